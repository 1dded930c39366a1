// jaxmech's native CPU kernels (XLA FFI; built and loaded by jaxmech/native.py).
//
// Each kernel takes a batch of small dense problems, batch-last (every array (..., batch); the
// Python side moves the batch axis, and XLA cancels that move against the batch-last producers of
// jaxmech/batchlast_dynamics.py), and works on W states at a time (W = 64 bytes / sizeof(T)),
// each value a vector of W states (GCC/Clang vector extension: one AVX-512 register, two AVX2
// ones), so every arithmetic step below is one SIMD operation across W states and a group's
// factors stay in the L1 cache.
// Idle lanes of the last group hold an identity problem. The math of each kernel is that of its
// Python reference, named at the kernel; results agree with it to round-off.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

// A problem's static sparsity, the same for every state (jaxmech/kkt.py, Sparsity): which entries
// of the lower Cholesky factor L (n, n) of M, and of the rows of Z = (L^-1 C^T)^T (s, n), can be
// non-zero (fill-in included), as index lists; the kernels skip the others, which are zero in
// every state. All-ones masks (or empty ones) give the dense kernels.
struct Pattern {
  int64_t n = 0, s = 0;
  std::vector<int64_t> row_off, row;  // L: row i's columns k < i, at row[row_off[i] .. row_off[i + 1])
  std::vector<int64_t> col_off, col;  // L: column i's rows k > i
  std::vector<char> zm;               // Z: zm[j * n + i] = 1 where Z[j, i] can be non-zero
  std::vector<int64_t> z_off, z;      // Z: row j's columns

  // lmask (n * n, row-major; only k < i read) and zmask (s * n); an empty mask means dense
  Pattern(int64_t n_, int64_t s_, ffi::Span<const int64_t> lmask, ffi::Span<const int64_t> zmask)
      : n(n_), s(s_), row_off(1, 0), col_off(1, 0), zm(s_ * n_, 1), z_off(1, 0) {
    const bool ld = lmask.size() != static_cast<size_t>(n * n), zd = zmask.size() != static_cast<size_t>(s * n);
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t k = 0; k < i; ++k)
        if (ld || lmask[i * n + k]) row.push_back(k);
      row_off.push_back(row.size());
      for (int64_t k = i + 1; k < n; ++k)
        if (ld || lmask[k * n + i]) col.push_back(k);
      col_off.push_back(col.size());
    }
    for (int64_t j = 0; j < s; ++j) {
      for (int64_t i = 0; i < n; ++i) {
        zm[j * n + i] = zd || zmask[j * n + i];
        if (zm[j * n + i]) z.push_back(i);
      }
      z_off.push_back(z.size());
    }
  }
  static Pattern dense(int64_t n, int64_t s = 0) { return Pattern(n, s, {}, {}); }
  const int64_t* r(int64_t i) const { return row.data() + row_off[i]; }
  int64_t nr(int64_t i) const { return row_off[i + 1] - row_off[i]; }
  const int64_t* c(int64_t i) const { return col.data() + col_off[i]; }
  int64_t nc(int64_t i) const { return col_off[i + 1] - col_off[i]; }
  const int64_t* zr(int64_t j) const { return z.data() + z_off[j]; }
  int64_t nz(int64_t j) const { return z_off[j + 1] - z_off[j]; }
};

template <typename T>
struct Lanes {
  static constexpr int W = 64 / sizeof(T);
  typedef T V __attribute__((vector_size(64)));

  static V splat(T x) { return V{} + x; }
  static V abs(V x) { return x < 0 ? -x : x; }
  static V max(V a, V b) { return a > b ? a : b; }
  static V sqrt(V x) {
    for (int w = 0; w < W; ++w) x[w] = std::sqrt(x[w]);
    return x;
  }

  // sum over t < len of a[idx[t] * sa] * b[idx[t] * sb], on four independent chains (one chain
  // waits for each fused multiply-add's latency)
  static V dot(const V* a, int64_t sa, const V* b, int64_t sb, const int64_t* idx, int64_t len) {
    if (len > 0 && idx[len - 1] - idx[0] == len - 1)  // a contiguous run (dense rows, tree blocks)
      return dot(a + idx[0] * sa, sa, b + idx[0] * sb, sb, len);
    V c0{}, c1{}, c2{}, c3{};
    int64_t t = 0;
    for (; t + 4 <= len; t += 4) {
      c0 += a[idx[t] * sa] * b[idx[t] * sb];
      c1 += a[idx[t + 1] * sa] * b[idx[t + 1] * sb];
      c2 += a[idx[t + 2] * sa] * b[idx[t + 2] * sb];
      c3 += a[idx[t + 3] * sa] * b[idx[t + 3] * sb];
    }
    for (; t < len; ++t) c0 += a[idx[t] * sa] * b[idx[t] * sb];
    return (c0 + c1) + (c2 + c3);
  }

  // sum_{k < len} a[k * sa] * b[k * sb], on four chains
  static V dot(const V* a, int64_t sa, const V* b, int64_t sb, int64_t len) {
    V c0{}, c1{}, c2{}, c3{};
    int64_t k = 0;
    for (; k + 4 <= len; k += 4) {
      c0 += a[k * sa] * b[k * sb];
      c1 += a[(k + 1) * sa] * b[(k + 1) * sb];
      c2 += a[(k + 2) * sa] * b[(k + 2) * sb];
      c3 += a[(k + 3) * sa] * b[(k + 3) * sb];
    }
    for (; k < len; ++k) c0 += a[k * sa] * b[k * sb];
    return (c0 + c1) + (c2 + c3);
  }

  // Cholesky in place on the pattern P of L: the lower triangle of a (n, n) becomes L (NaN where
  // not positive definite, as LAPACK's potrf under JAX); the upper triangle is zeroed, entries
  // outside P are left as they are (zero: structural zeros of M); dinv (n,) = 1 / diag L (the
  // solves multiply by it: a division's latency would sit in their dependency chains).
  static void chol(V* a, V* dinv, const Pattern& P) {
    const int64_t n = P.n;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = i + 1; j < n; ++j) a[i * n + j] = V{};
    for (int64_t j = 0; j < n; ++j) {
      V d = sqrt(a[j * n + j] - dot(a + j * n, 1, a + j * n, 1, P.r(j), P.nr(j)));
      a[j * n + j] = d;
      dinv[j] = 1 / d;
      for (int64_t t = 0; t < P.nc(j); ++t) {
        const int64_t i = P.c(j)[t];
        a[i * n + j] = (a[i * n + j] - dot(a + i * n, 1, a + j * n, 1, P.r(j), P.nr(j))) * dinv[j];
      }
    }
  }
  // x (n,) <- L^-1 x
  static void fwd(const V* L, const V* dinv, V* x, const Pattern& P) {
    for (int64_t i = 0; i < P.n; ++i) x[i] = (x[i] - dot(L + i * P.n, 1, x, 1, P.r(i), P.nr(i))) * dinv[i];
  }
  // the rows of X (s, n) <- L^-1 each, on Z's pattern (X: C on entry, zero outside it): row by row
  // of L across all s, so the dot products of a step are independent
  static void fwd_rows(const V* L, const V* dinv, V* X, const Pattern& P) {
    const int64_t n = P.n;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < P.s; ++j)
        if (P.zm[j * n + i]) X[j * n + i] = (X[j * n + i] - dot(L + i * n, 1, X + j * n, 1, P.r(i), P.nr(i))) * dinv[i];
  }
  // x (n,) <- L^-T x
  static void bwd(const V* L, const V* dinv, V* x, const Pattern& P) {
    for (int64_t i = P.n - 1; i >= 0; --i) x[i] = (x[i] - dot(L + i, P.n, x, 1, P.c(i), P.nc(i))) * dinv[i];
  }
  // y (n,) += A^T x for A (s, n) on Z's pattern (rows of A contiguous)
  static void add_at(const V* A, const V* x, V* y, const Pattern& P) {
    for (int64_t j = 0; j < P.s; ++j)
      for (int64_t t = 0; t < P.nz(j); ++t) y[P.zr(j)[t]] += A[j * P.n + P.zr(j)[t]] * x[j];
  }
  // A_j . x for row j of A (s, n) on Z's pattern
  static V row_dot(const V* A, const V* x, const Pattern& P, int64_t j) {
    return dot(A + j * P.n, 1, x, 1, P.zr(j), P.nz(j));
  }
  // G (s, s) lower = A A^T for A (s, n) on Z's pattern
  static void gram(const V* A, V* G, const Pattern& P) {
    const int64_t n = P.n, s = P.s;
    for (int64_t i = 0; i < s; ++i)
      for (int64_t j = 0; j <= i; ++j) {
        const int64_t k = P.nz(i) < P.nz(j) ? i : j;  // the shorter row's columns
        G[i * s + j] = dot(A + i * n, 1, A + j * n, 1, P.zr(k), P.nz(k));
      }
  }
  // A lower bound of sigma_min of lower-triangular L (n, n) with a positive diagonal:
  // 1 / (sqrt(n) max y), M(L) y = 1 with M(L) the comparison matrix (kkt.sigma_min_lower);
  // 0 where the bound is not finite.
  static V sigma_lo(const V* L, const V* dinv, const Pattern& P, V* y) {
    const int64_t n = P.n;
    V ymax = splat(-std::numeric_limits<T>::infinity());
    auto good = ymax == ymax;  // all true
    for (int64_t i = 0; i < n; ++i) {
      V s0 = splat(1), s1{};
      const int64_t* k = P.r(i);
      int64_t t = 0;
      for (; t + 2 <= P.nr(i); t += 2) {
        s0 += abs(L[i * n + k[t]]) * y[k[t]];
        s1 += abs(L[i * n + k[t + 1]]) * y[k[t + 1]];
      }
      if (t < P.nr(i)) s0 += abs(L[i * n + k[t]]) * y[k[t]];
      V s = s0 + s1;
      good = good & (abs(L[i * n + i]) > 0) & (s == s);
      y[i] = s * abs(dinv[i]);
      ymax = max(ymax, y[i]);
    }
    good = good & (ymax - ymax == 0) & (ymax > 0);
    return good ? 1 / (std::sqrt(T(n)) * ymax) : V{};
  }
  // the damping of the row Gram matrices in jaxmech/simulate.py (_damping): 1e3 eps max(max diag G, 1)
  static void damp(V* G, int64_t s) {
    V mu = splat(1);
    for (int64_t i = 0; i < s; ++i) mu = max(mu, abs(G[i * s + i]));
    for (int64_t i = 0; i < s; ++i) G[i * s + i] += T(1000) * std::numeric_limits<T>::epsilon() * mu;
  }
};

// A group's buffers: `size` values per state for W states, one vector of W lanes per value. The
// arrays come batch-last ((..., batch): value i of state b at i * batch + b), so a full group
// loads and stores whole vectors.
template <typename T>
struct Group {
  using X = Lanes<T>;
  using V = typename X::V;
  static constexpr int W = X::W;
  std::vector<V> buf;
  explicit Group(int64_t size) : buf(std::max<int64_t>(size, 1)) {}
  V* data() { return buf.data(); }
  V& operator[](int64_t i) { return buf[i]; }
  // states b0 .. b0 + cnt of src into the lanes; idle lanes (cnt < W) get `idle` (or 0)
  void load(const T* src, int64_t size, int64_t batch, int64_t b0, int64_t cnt, const V* idle = nullptr) {
    if (cnt == W) {
      for (int64_t i = 0; i < size; ++i) std::memcpy(&buf[i], src + i * batch + b0, sizeof(V));
      return;
    }
    for (int64_t i = 0; i < size; ++i) {
      buf[i] = idle ? idle[i] : V{};
      for (int64_t w = 0; w < cnt; ++w) buf[i][w] = src[i * batch + b0 + w];
    }
  }
  void store(T* dst, int64_t size, int64_t batch, int64_t b0, int64_t cnt) const {
    if (cnt == W) {
      for (int64_t i = 0; i < size; ++i) std::memcpy(dst + i * batch + b0, &buf[i], sizeof(V));
      return;
    }
    for (int64_t i = 0; i < size; ++i)
      for (int64_t w = 0; w < cnt; ++w) dst[i * batch + b0 + w] = buf[i][w];
  }
};

template <typename T>
std::vector<typename Lanes<T>::V> identity(int64_t n, int64_t m) {  // (n, m), ones on the diagonal
  std::vector<typename Lanes<T>::V> I(n * m);
  for (int64_t i = 0; i < std::min(n, m); ++i) I[i * m + i] = Lanes<T>::splat(1);
  return I;
}

// kkt._natural_lapack: L = chol(M), Z = L^-1 [b, C^T], K = Z_C^T Z_C + diag(1 - mask) = L_k L_k^T,
// lam = K^-1 (-g - Z_C^T z_b), a = L^-T (z_b + Z_C lam); one correction where max |C a + g| >
// 16 eps (1 + max |g| + max |C| max |a|) (kkt.at_roundoff); certificate kkt.certified.
template <ffi::DataType DT>
ffi::Error Kkt(ffi::Buffer<DT> M, ffi::Buffer<DT> C, ffi::Buffer<DT> g, ffi::Buffer<DT> mask, ffi::Buffer<DT> b,
               ffi::ResultBuffer<DT> Lo, ffi::ResultBuffer<DT> ao, ffi::ResultBuffer<DT> lo, ffi::ResultBuffer<DT> oko,
               double rtol, ffi::Span<const int64_t> lmask, ffi::Span<const int64_t> zmask) {
  using T = ffi::NativeType<DT>;
  using X = Lanes<T>;
  using V = typename X::V;
  constexpr int W = X::W;
  const int64_t n = b.dimensions()[0], s = g.dimensions()[0], batch = b.dimensions().back();
  const T eps = std::numeric_limits<T>::epsilon(), tiny = std::numeric_limits<T>::min();
  const auto I = identity<T>(n, n);
  const Pattern P(n, s, lmask, zmask), PK = Pattern::dense(s);
  Group<T> Lb(n * n), Cb(s * n), gb(s), mb(s), ab(n), Z(s * n), K(s * s), lam(s), r(s), da(n), y(n), ok(1), dl(n), dk(s);
  for (int64_t b0 = 0; b0 < batch; b0 += W) {
    const int64_t cnt = std::min<int64_t>(W, batch - b0);
    Lb.load(M.typed_data(), n * n, batch, b0, cnt, I.data());
    Cb.load(C.typed_data(), s * n, batch, b0, cnt);
    gb.load(g.typed_data(), s, batch, b0, cnt);
    mb.load(mask.typed_data(), s, batch, b0, cnt);
    ab.load(b.typed_data(), n, batch, b0, cnt);
    X::chol(Lb.data(), dl.data(), P);
    X::fwd(Lb.data(), dl.data(), ab.data(), P);  // z_b
    std::copy(Cb.data(), Cb.data() + s * n, Z.data());  // row j of Z = (L^-1 C_j^T)^T
    X::fwd_rows(Lb.data(), dl.data(), Z.data(), P);
    X::gram(Z.data(), K.data(), P);
    for (int64_t i = 0; i < s; ++i) K[i * s + i] += 1 - mb[i];
    X::chol(K.data(), dk.data(), PK);
    for (int64_t j = 0; j < s; ++j) lam[j] = -gb[j] - X::row_dot(Z.data(), ab.data(), P, j);
    X::fwd(K.data(), dk.data(), lam.data(), PK);
    X::bwd(K.data(), dk.data(), lam.data(), PK);
    X::add_at(Z.data(), lam.data(), ab.data(), P);
    X::bwd(Lb.data(), dl.data(), ab.data(), P);  // a
    V amax{}, gmax{}, cmax{}, rmax{};
    for (int64_t k = 0; k < n; ++k) amax = X::max(amax, X::abs(ab[k]));
    for (int64_t j = 0; j < s; ++j) {
      V cj = X::row_dot(Cb.data(), ab.data(), P, j) + gb[j];
      r[j] = -cj;
      rmax = X::max(rmax, X::abs(cj));
      gmax = X::max(gmax, X::abs(gb[j]));
      for (int64_t t = 0; t < P.nz(j); ++t) cmax = X::max(cmax, X::abs(Cb[j * n + P.zr(j)[t]]));
    }
    auto fix = !(rmax <= 16 * eps * (1 + gmax + cmax * amax));
    bool any = false;
    for (int w = 0; w < W; ++w) any = any || fix[w];
    if (any) {  // dlam = K^-1 (-g - C a); a += L^-T Z_C dlam; lam += dlam, where fix
      X::fwd(K.data(), dk.data(), r.data(), PK);
      X::bwd(K.data(), dk.data(), r.data(), PK);
      std::fill(da.data(), da.data() + n, V{});
      X::add_at(Z.data(), r.data(), da.data(), P);
      X::bwd(Lb.data(), dl.data(), da.data(), P);
      for (int64_t k = 0; k < n; ++k) ab[k] = fix ? ab[k] + da[k] : ab[k];
      for (int64_t j = 0; j < s; ++j) lam[j] = fix ? lam[j] + r[j] : lam[j];
    }
    V fro{};
    for (int64_t j = 0; j < s; ++j) fro += X::row_dot(Cb.data(), Cb.data() + j * n, P, j);  // |C|_F^2
    V low = X::sigma_lo(Lb.data(), dl.data(), P, y.data()) * X::sigma_lo(K.data(), dk.data(), PK, y.data());
    ok[0] = (low > tiny) & (X::sqrt(fro) * T(rtol) < low) ? X::splat(1) : V{};
    Lb.store(Lo->typed_data(), n * n, batch, b0, cnt);
    ab.store(ao->typed_data(), n, batch, b0, cnt);
    lam.store(lo->typed_data(), s, batch, b0, cnt);
    ok.store(oko->typed_data(), 1, batch, b0, cnt);
  }
  return ffi::Error::Success();
}

// simulate._project_velocity: v - L^-T Z^T w, Z = (L^-1 C^T)^T, w = (Z Z^T + mu I)^-1 C v.
template <ffi::DataType DT>
ffi::Error Vproj(ffi::Buffer<DT> L, ffi::Buffer<DT> C, ffi::Buffer<DT> v, ffi::ResultBuffer<DT> vo,
                 ffi::Span<const int64_t> lmask, ffi::Span<const int64_t> zmask) {
  using T = ffi::NativeType<DT>;
  using X = Lanes<T>;
  using V = typename X::V;
  constexpr int W = X::W;
  const int64_t n = v.dimensions()[0], s = C.dimensions()[0], batch = v.dimensions().back();
  const auto I = identity<T>(n, n);
  const Pattern P(n, s, lmask, zmask), PG = Pattern::dense(s);
  Group<T> Lb(n * n), Z(s * n), vb(n), G(s * s), wb(s), d(n), dl(n), dg(s);
  for (int64_t b0 = 0; b0 < batch; b0 += W) {
    const int64_t cnt = std::min<int64_t>(W, batch - b0);
    Lb.load(L.typed_data(), n * n, batch, b0, cnt, I.data());
    Z.load(C.typed_data(), s * n, batch, b0, cnt);
    vb.load(v.typed_data(), n, batch, b0, cnt);
    for (int64_t j = 0; j < s; ++j) wb[j] = X::row_dot(Z.data(), vb.data(), P, j);  // C v
    for (int64_t i = 0; i < n; ++i) dl[i] = 1 / Lb[i * n + i];
    X::fwd_rows(Lb.data(), dl.data(), Z.data(), P);
    X::gram(Z.data(), G.data(), P);
    X::damp(G.data(), s);
    X::chol(G.data(), dg.data(), PG);
    X::fwd(G.data(), dg.data(), wb.data(), PG);
    X::bwd(G.data(), dg.data(), wb.data(), PG);
    std::fill(d.data(), d.data() + n, V{});
    X::add_at(Z.data(), wb.data(), d.data(), P);
    X::bwd(Lb.data(), dl.data(), d.data(), P);
    for (int64_t k = 0; k < n; ++k) vb[k] -= d[k];
    vb.store(vo->typed_data(), n, batch, b0, cnt);
  }
  return ffi::Error::Success();
}

// simulate._min_norm_step: L_g = chol(C C^T + mu I) (s, s) and dq = -C^T L_g^-T L_g^-1 r (n,).
// With Lg given (simulate._chord_step, the chord steps after the first) only the solve.
template <typename T>
void min_norm_group(typename Lanes<T>::V* Cb, typename Lanes<T>::V* G, typename Lanes<T>::V* dg,
                    typename Lanes<T>::V* rb, typename Lanes<T>::V* dq, const Pattern& P, const Pattern& PG,
                    bool factor) {
  using X = Lanes<T>;
  const int64_t s = P.s, n = P.n;
  if (factor) {
    X::gram(Cb, G, P);
    X::damp(G, s);
    X::chol(G, dg, PG);
  } else {
    for (int64_t i = 0; i < s; ++i) dg[i] = 1 / G[i * s + i];
  }
  X::fwd(G, dg, rb, PG);
  X::bwd(G, dg, rb, PG);
  std::fill(dq, dq + n, typename X::V{});
  for (int64_t j = 0; j < s; ++j) rb[j] = -rb[j];
  X::add_at(Cb, rb, dq, P);
}

template <ffi::DataType DT>
ffi::Error MinNorm(ffi::Buffer<DT> C, ffi::Buffer<DT> r, ffi::ResultBuffer<DT> Lgo, ffi::ResultBuffer<DT> dqo,
                   ffi::Span<const int64_t> zmask) {
  using T = ffi::NativeType<DT>;
  constexpr int W = Lanes<T>::W;
  const int64_t s = r.dimensions()[0], n = C.dimensions()[1], batch = r.dimensions().back();
  const auto I = identity<T>(s, n);  // idle lanes: C = [I 0] (on C's pattern: finite either way)
  const Pattern P(n, s, {}, zmask), PG = Pattern::dense(s);
  Group<T> Cb(s * n), G(s * s), rb(s), dq(n), dg(s);
  for (int64_t b0 = 0; b0 < batch; b0 += W) {
    const int64_t cnt = std::min<int64_t>(W, batch - b0);
    Cb.load(C.typed_data(), s * n, batch, b0, cnt, I.data());
    rb.load(r.typed_data(), s, batch, b0, cnt);
    min_norm_group<T>(Cb.data(), G.data(), dg.data(), rb.data(), dq.data(), P, PG, true);
    G.store(Lgo->typed_data(), s * s, batch, b0, cnt);
    dq.store(dqo->typed_data(), n, batch, b0, cnt);
  }
  return ffi::Error::Success();
}

template <ffi::DataType DT>
ffi::Error Chord(ffi::Buffer<DT> Lg, ffi::Buffer<DT> C, ffi::Buffer<DT> r, ffi::ResultBuffer<DT> dqo,
                 ffi::Span<const int64_t> zmask) {
  using T = ffi::NativeType<DT>;
  constexpr int W = Lanes<T>::W;
  const int64_t s = r.dimensions()[0], n = C.dimensions()[1], batch = r.dimensions().back();
  const auto I = identity<T>(s, s);
  const Pattern P(n, s, {}, zmask), PG = Pattern::dense(s);
  Group<T> Cb(s * n), G(s * s), rb(s), dq(n), dg(s);
  for (int64_t b0 = 0; b0 < batch; b0 += W) {
    const int64_t cnt = std::min<int64_t>(W, batch - b0);
    G.load(Lg.typed_data(), s * s, batch, b0, cnt, I.data());
    Cb.load(C.typed_data(), s * n, batch, b0, cnt);
    rb.load(r.typed_data(), s, batch, b0, cnt);
    min_norm_group<T>(Cb.data(), G.data(), dg.data(), rb.data(), dq.data(), P, PG, false);
    dq.store(dqo->typed_data(), n, batch, b0, cnt);
  }
  return ffi::Error::Success();
}

// corrector._lm_factor: L = chol(A + mu s I) (n, n), A = J^T J for J (m, n), s = max(max diag A,
// tiny): the Levenberg-Marquardt matrix of assembly's and tracking's Gauss-Newton steps.
template <ffi::DataType DT>
ffi::Error LmFactor(ffi::Buffer<DT> J, ffi::Buffer<DT> mu, ffi::ResultBuffer<DT> Lo) {
  using T = ffi::NativeType<DT>;
  using X = Lanes<T>;
  using V = typename X::V;
  constexpr int W = X::W;
  const int64_t m = J.dimensions()[0], n = J.dimensions()[1], batch = mu.dimensions().back();
  const auto I = identity<T>(m, n);  // idle lanes: J = [I 0], mu = 1
  const std::vector<V> one(1, X::splat(1));
  const Pattern P = Pattern::dense(n);
  Group<T> Jb(m * n), mb(1), A(n * n), dinv(n);
  for (int64_t b0 = 0; b0 < batch; b0 += W) {
    const int64_t cnt = std::min<int64_t>(W, batch - b0);
    Jb.load(J.typed_data(), m * n, batch, b0, cnt, I.data());
    mb.load(mu.typed_data(), 1, batch, b0, cnt, one.data());
    V smax = X::splat(std::numeric_limits<T>::min());
    for (int64_t i = 0; i < n; ++i)
      for (int64_t k = 0; k <= i; ++k) A[i * n + k] = X::dot(Jb.data() + i, n, Jb.data() + k, n, m);
    for (int64_t i = 0; i < n; ++i) smax = X::max(smax, A[i * n + i]);
    for (int64_t i = 0; i < n; ++i) A[i * n + i] += mb[0] * smax;
    X::chol(A.data(), dinv.data(), P);
    A.store(Lo->typed_data(), n * n, batch, b0, cnt);
  }
  return ffi::Error::Success();
}

// corrector._lm_solve: d = -(L L^T)^-1 J^T f (n,) for L (n, n), J (m, n), f (m,); 0 where d is
// not finite.
template <ffi::DataType DT>
ffi::Error LmSolve(ffi::Buffer<DT> L, ffi::Buffer<DT> J, ffi::Buffer<DT> f, ffi::ResultBuffer<DT> dout) {
  using T = ffi::NativeType<DT>;
  using X = Lanes<T>;
  using V = typename X::V;
  constexpr int W = X::W;
  const int64_t m = J.dimensions()[0], n = J.dimensions()[1], batch = f.dimensions().back();
  const auto I = identity<T>(n, n);
  const Pattern P = Pattern::dense(n);
  Group<T> Lb(n * n), Jb(m * n), fb(m), d(n), dinv(n);
  for (int64_t b0 = 0; b0 < batch; b0 += W) {
    const int64_t cnt = std::min<int64_t>(W, batch - b0);
    Lb.load(L.typed_data(), n * n, batch, b0, cnt, I.data());
    Jb.load(J.typed_data(), m * n, batch, b0, cnt);
    fb.load(f.typed_data(), m, batch, b0, cnt);
    for (int64_t k = 0; k < n; ++k) {
      d[k] = -X::dot(Jb.data() + k, n, fb.data(), 1, m);
      dinv[k] = 1 / Lb[k * n + k];
    }
    X::fwd(Lb.data(), dinv.data(), d.data(), P);
    X::bwd(Lb.data(), dinv.data(), d.data(), P);
    const V zero{};
    auto good = zero == zero;  // all true
    for (int64_t k = 0; k < n; ++k) good = good & (d[k] - d[k] == 0);
    for (int64_t k = 0; k < n; ++k) d[k] = good ? d[k] : V{};
    d.store(dout->typed_data(), n, batch, b0, cnt);
  }
  return ffi::Error::Success();
}

}  // namespace

#define JM_ARG(DT) .Arg<ffi::Buffer<DT>>()
#define JM_RET(DT) .Ret<ffi::Buffer<DT>>()
#define JM_ZMASK .Attr<ffi::Span<const int64_t>>("zmask")
#define JM_MASKS .Attr<ffi::Span<const int64_t>>("lmask") JM_ZMASK
#define JM_KERNELS(DT, S)                                                                                        \
  XLA_FFI_DEFINE_HANDLER_SYMBOL(JmKkt##S, Kkt<DT>,                                                               \
                                ffi::Ffi::Bind() JM_ARG(DT) JM_ARG(DT) JM_ARG(DT) JM_ARG(DT) JM_ARG(DT)          \
                                    JM_RET(DT) JM_RET(DT) JM_RET(DT) JM_RET(DT).Attr<double>("rtol") JM_MASKS);           \
  XLA_FFI_DEFINE_HANDLER_SYMBOL(JmVproj##S, Vproj<DT>, ffi::Ffi::Bind() JM_ARG(DT) JM_ARG(DT) JM_ARG(DT) JM_RET(DT) JM_MASKS); \
  XLA_FFI_DEFINE_HANDLER_SYMBOL(JmMinNorm##S, MinNorm<DT>, ffi::Ffi::Bind() JM_ARG(DT) JM_ARG(DT) JM_RET(DT) JM_RET(DT) JM_ZMASK); \
  XLA_FFI_DEFINE_HANDLER_SYMBOL(JmChord##S, Chord<DT>, ffi::Ffi::Bind() JM_ARG(DT) JM_ARG(DT) JM_ARG(DT) JM_RET(DT) JM_ZMASK); \
  XLA_FFI_DEFINE_HANDLER_SYMBOL(JmLmFactor##S, LmFactor<DT>, ffi::Ffi::Bind() JM_ARG(DT) JM_ARG(DT) JM_RET(DT));         \
  XLA_FFI_DEFINE_HANDLER_SYMBOL(JmLmSolve##S, LmSolve<DT>, ffi::Ffi::Bind() JM_ARG(DT) JM_ARG(DT) JM_ARG(DT) JM_RET(DT));

JM_KERNELS(ffi::F64, F64)
JM_KERNELS(ffi::F32, F32)
