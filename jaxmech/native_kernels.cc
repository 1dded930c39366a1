// jaxmech's native CPU kernels (XLA FFI; built and loaded by jaxmech/native.py).
//
// Each kernel takes a batch of small dense problems (leading dimensions = batch) and works on
// W states at a time (W = 64 bytes / sizeof(T): one AVX-512 register, two AVX2 ones), each value
// stored lane by lane (x[i * W + w], w the state), so every arithmetic step below is one SIMD
// operation across W states and all of a group's factors stay in the L1 cache. Idle lanes of the
// last group hold an identity problem. The math of each kernel is that of its Python reference,
// named at the kernel; results agree with it to round-off.
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>
#include <algorithm>
#include "xla/ffi/api/ffi.h"
namespace ffi = xla::ffi;

template <typename T, int W>
struct Lanes {
  // Cholesky in place of the lower triangle of a (n x n, lanes interleaved); upper set to zero
  static void chol(T* __restrict a, int64_t n) {
    for (int64_t j = 0; j < n; ++j) {
      T d[W];
      for (int w = 0; w < W; ++w) d[w] = a[(j * n + j) * W + w];
      for (int64_t k = 0; k < j; ++k) {
        const T* x = a + (j * n + k) * W;
        for (int w = 0; w < W; ++w) d[w] -= x[w] * x[w];
      }
      T inv[W];
      for (int w = 0; w < W; ++w) { d[w] = std::sqrt(d[w]); inv[w] = T(1) / d[w]; a[(j * n + j) * W + w] = d[w]; }
      for (int64_t i = j + 1; i < n; ++i) {
        T s[W];
        for (int w = 0; w < W; ++w) s[w] = a[(i * n + j) * W + w];
        const T* ai = a + i * n * W;
        const T* aj = a + j * n * W;
        for (int64_t k = 0; k < j; ++k)
          for (int w = 0; w < W; ++w) s[w] -= ai[k * W + w] * aj[k * W + w];
        for (int w = 0; w < W; ++w) a[(i * n + j) * W + w] = s[w] * inv[w];
      }
      for (int64_t i = 0; i < j; ++i)
        for (int w = 0; w < W; ++w) a[(i * n + j) * W + w] = 0;
    }
  }
  // x (n, lanes) <- L^-1 x
  static void fwd(const T* __restrict L, T* __restrict x, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
      T s[W];
      for (int w = 0; w < W; ++w) s[w] = x[i * W + w];
      const T* li = L + i * n * W;
      for (int64_t k = 0; k < i; ++k)
        for (int w = 0; w < W; ++w) s[w] -= li[k * W + w] * x[k * W + w];
      for (int w = 0; w < W; ++w) x[i * W + w] = s[w] / li[i * W + w];
    }
  }
  // x <- L^-T x
  static void bwd(const T* __restrict L, T* __restrict x, int64_t n) {
    for (int64_t i = n - 1; i >= 0; --i) {
      T s[W];
      for (int w = 0; w < W; ++w) s[w] = x[i * W + w];
      for (int64_t k = i + 1; k < n; ++k)
        for (int w = 0; w < W; ++w) s[w] -= L[(k * n + i) * W + w] * x[k * W + w];
      for (int w = 0; w < W; ++w) x[i * W + w] = s[w] / L[(i * n + i) * W + w];
    }
  }
  // lower bound of sigma_min of lower-triangular T (comparison matrix), 0 where not finite
  static void sigma_lo(const T* __restrict L, int64_t n, T* __restrict out, T* __restrict y) {
    T ymax[W]; bool ok[W];
    for (int w = 0; w < W; ++w) { ymax[w] = -std::numeric_limits<T>::infinity(); ok[w] = true; }
    for (int64_t i = 0; i < n; ++i) {
      T s[W];
      for (int w = 0; w < W; ++w) s[w] = T(1);
      for (int64_t k = 0; k < i; ++k)
        for (int w = 0; w < W; ++w) s[w] += std::abs(L[(i * n + k) * W + w]) * y[k * W + w];
      for (int w = 0; w < W; ++w) {
        T d = std::abs(L[(i * n + i) * W + w]);
        ok[w] = ok[w] && (d > 0);
        y[i * W + w] = s[w] / d;
        ymax[w] = std::max(ymax[w], y[i * W + w]);  // NaN-unsafe max handled below
        if (std::isnan(y[i * W + w])) ymax[w] = std::numeric_limits<T>::quiet_NaN();
      }
    }
    T sq = std::sqrt(T(n));
    for (int w = 0; w < W; ++w) {
      bool good = ok[w] && std::isfinite(ymax[w]) && ymax[w] > 0;
      out[w] = good ? T(1) / (sq * ymax[w]) : T(0);
    }
  }
};

template <typename T>
static void pack(const T* src, T* dst, int64_t sz, int64_t cnt, int W) {
  for (int64_t w = 0; w < cnt; ++w)
    for (int64_t i = 0; i < sz; ++i) dst[i * W + w] = src[w * sz + i];
}
template <typename T>
static void unpack(const T* src, T* dst, int64_t sz, int64_t cnt, int W) {
  for (int64_t w = 0; w < cnt; ++w)
    for (int64_t i = 0; i < sz; ++i) dst[w * sz + i] = src[i * W + w];
}

template <typename T, int W>
static void group(int64_t n, int64_t s, T rtol, T* Lb, T* Cb, T* gb, T* mb, T* bb, T* Zc, T* Kb, T* lam, T* tmp, T* okb) {
  using X = Lanes<T, W>;
  const T eps = std::numeric_limits<T>::epsilon();
  const T tiny = std::numeric_limits<T>::min();
  X::chol(Lb, n);
  X::fwd(Lb, bb, n);  // zb
  // ZC (n x s): column j = L^-1 C_j^T; stored as Zc[(j * n + i) * W]
  for (int64_t j = 0; j < s; ++j) {
    T* z = Zc + j * n * W;
    for (int64_t i = 0; i < n; ++i)
      for (int w = 0; w < W; ++w) z[i * W + w] = Cb[(j * n + i) * W + w];
    X::fwd(Lb, z, n);
  }
  // K = ZC^T ZC + diag(1 - mask), lower triangle
  for (int64_t i = 0; i < s; ++i)
    for (int64_t j = 0; j <= i; ++j) {
      T acc[W];
      for (int w = 0; w < W; ++w) acc[w] = (i == j) ? T(1) - mb[i * W + w] : T(0);
      const T* zi = Zc + i * n * W;
      const T* zj = Zc + j * n * W;
      for (int64_t k = 0; k < n; ++k)
        for (int w = 0; w < W; ++w) acc[w] += zi[k * W + w] * zj[k * W + w];
      for (int w = 0; w < W; ++w) Kb[(i * s + j) * W + w] = acc[w];
    }
  X::chol(Kb, s);
  // lam = K^-1 (-g - ZC^T zb)
  for (int64_t j = 0; j < s; ++j) {
    T acc[W];
    for (int w = 0; w < W; ++w) acc[w] = -gb[j * W + w];
    const T* z = Zc + j * n * W;
    for (int64_t k = 0; k < n; ++k)
      for (int w = 0; w < W; ++w) acc[w] -= z[k * W + w] * bb[k * W + w];
    for (int w = 0; w < W; ++w) lam[j * W + w] = acc[w];
  }
  X::fwd(Kb, lam, s);
  X::bwd(Kb, lam, s);
  // a = L^-T (zb + ZC lam)  -> stored in bb
  for (int64_t j = 0; j < s; ++j) {
    const T* z = Zc + j * n * W;
    for (int64_t k = 0; k < n; ++k)
      for (int w = 0; w < W; ++w) bb[k * W + w] += z[k * W + w] * lam[j * W + w];
  }
  X::bwd(Lb, bb, n);
  // violation r = C a + g; refine where max|r| > 16 eps scale
  T gmax[W], cmax[W], amax[W], rmax[W];
  for (int w = 0; w < W; ++w) gmax[w] = cmax[w] = amax[w] = rmax[w] = 0;
  for (int64_t k = 0; k < n; ++k)
    for (int w = 0; w < W; ++w) amax[w] = std::max(amax[w], std::abs(bb[k * W + w]));
  for (int64_t j = 0; j < s; ++j) {
    T acc[W];
    for (int w = 0; w < W; ++w) { acc[w] = gb[j * W + w]; gmax[w] = std::max(gmax[w], std::abs(gb[j * W + w])); }
    const T* c = Cb + j * n * W;
    for (int64_t k = 0; k < n; ++k)
      for (int w = 0; w < W; ++w) { acc[w] += c[k * W + w] * bb[k * W + w]; cmax[w] = std::max(cmax[w], std::abs(c[k * W + w])); }
    for (int w = 0; w < W; ++w) { tmp[j * W + w] = -acc[w]; rmax[w] = std::max(rmax[w], std::abs(acc[w])); }
  }
  bool any = false;
  T fix[W];
  for (int w = 0; w < W; ++w) {
    T scale = T(1) + gmax[w] + cmax[w] * amax[w];
    fix[w] = !(rmax[w] <= 16 * eps * scale) ? T(1) : T(0);
    any = any || fix[w] > 0;
  }
  if (any) {  // dlam = K^-1 (-g - C a); a += L^-T ZC dlam; lam += dlam (only where fix)
    X::fwd(Kb, tmp, s);
    X::bwd(Kb, tmp, s);
    T* da = tmp + s * W;
    for (int64_t k = 0; k < n; ++k) for (int w = 0; w < W; ++w) da[k * W + w] = 0;
    for (int64_t j = 0; j < s; ++j) {
      const T* z = Zc + j * n * W;
      for (int64_t k = 0; k < n; ++k)
        for (int w = 0; w < W; ++w) da[k * W + w] += z[k * W + w] * tmp[j * W + w];
    }
    X::bwd(Lb, da, n);
    for (int64_t k = 0; k < n; ++k) for (int w = 0; w < W; ++w) bb[k * W + w] += fix[w] * da[k * W + w];
    for (int64_t j = 0; j < s; ++j) for (int w = 0; w < W; ++w) lam[j * W + w] += fix[w] * tmp[j * W + w];
  }
  // certificate: ||C||_F rtol < sigma_lo(L) sigma_lo(Lk)
  T s1[W], s2[W], fro[W];
  X::sigma_lo(Lb, n, s1, tmp);
  X::sigma_lo(Kb, s, s2, tmp);
  for (int w = 0; w < W; ++w) fro[w] = 0;
  for (int64_t j = 0; j < s * n; ++j)
    for (int w = 0; w < W; ++w) fro[w] += Cb[j * W + w] * Cb[j * W + w];
  for (int w = 0; w < W; ++w) {
    T lo = s1[w] * s2[w];
    okb[w] = (lo > tiny && std::sqrt(fro[w]) * rtol < lo) ? T(1) : T(0);
  }
}

template <ffi::DataType DT>
static ffi::Error Kkt(ffi::Buffer<DT> M, ffi::Buffer<DT> C, ffi::Buffer<DT> g, ffi::Buffer<DT> mask, ffi::Buffer<DT> b,
                      ffi::ResultBuffer<DT> Lo, ffi::ResultBuffer<DT> ao, ffi::ResultBuffer<DT> lo, ffi::ResultBuffer<DT> oko,
                      double rtol) {
  using T = ffi::NativeType<DT>;
  constexpr int W = 64 / sizeof(T);
  int64_t n = b.dimensions().back();
  int64_t s = g.dimensions().back();
  int64_t batch = b.element_count() / n;
  std::vector<T> Lb(n * n * W), Cb(s * n * W), gb(s * W), mb(s * W), bb(n * W), Zc(s * n * W), Kb(s * s * W),
      lam(s * W), tmp((s + n) * W), okb(W);
  for (int64_t b0 = 0; b0 < batch; b0 += W) {
    int64_t cnt = std::min<int64_t>(W, batch - b0);
    if (cnt < W) {  // idle lanes: an identity system
      std::fill(Lb.begin(), Lb.end(), T(0)); std::fill(Cb.begin(), Cb.end(), T(0));
      std::fill(gb.begin(), gb.end(), T(0)); std::fill(mb.begin(), mb.end(), T(0)); std::fill(bb.begin(), bb.end(), T(0));
      for (int64_t i = 0; i < n; ++i) for (int w = 0; w < W; ++w) Lb[(i * n + i) * W + w] = T(1);
    }
    pack(M.typed_data() + b0 * n * n, Lb.data(), n * n, cnt, W);
    pack(C.typed_data() + b0 * s * n, Cb.data(), s * n, cnt, W);
    pack(g.typed_data() + b0 * s, gb.data(), s, cnt, W);
    pack(mask.typed_data() + b0 * s, mb.data(), s, cnt, W);
    pack(b.typed_data() + b0 * n, bb.data(), n, cnt, W);
    group<T, W>(n, s, T(rtol), Lb.data(), Cb.data(), gb.data(), mb.data(), bb.data(), Zc.data(), Kb.data(), lam.data(),
                tmp.data(), okb.data());
    unpack(Lb.data(), Lo->typed_data() + b0 * n * n, n * n, cnt, W);
    unpack(bb.data(), ao->typed_data() + b0 * n, n, cnt, W);
    unpack(lam.data(), lo->typed_data() + b0 * s, s, cnt, W);
    unpack(okb.data(), oko->typed_data() + b0, 1, cnt, W);
  }
  return ffi::Error::Success();
}


// Damping of the row Gram matrices in jaxmech/simulate.py (_damping): 1e3 eps max(max diag G, 1).
template <typename T, int W>
static void damp(T* __restrict G, int64_t s, T* __restrict mu) {
  const T eps = std::numeric_limits<T>::epsilon();
  for (int w = 0; w < W; ++w) mu[w] = T(1);
  for (int64_t i = 0; i < s; ++i)
    for (int w = 0; w < W; ++w) mu[w] = std::max(mu[w], std::abs(G[(i * s + i) * W + w]));
  for (int64_t i = 0; i < s; ++i)
    for (int w = 0; w < W; ++w) G[(i * s + i) * W + w] += T(1000) * eps * mu[w];
}

// simulate.project_velocity: v - L^-T Z w, Z = L^-1 C^T, w = (Z^T Z + mu I)^-1 C v.
template <typename T, int W>
static void vproj_group(int64_t n, int64_t s, const T* Lb, const T* Cb, T* vb, T* Zc, T* Gb, T* wb, T* tmp) {
  using X = Lanes<T, W>;
  for (int64_t j = 0; j < s; ++j) {
    T* z = Zc + j * n * W;
    T acc[W];
    for (int w = 0; w < W; ++w) acc[w] = 0;
    for (int64_t i = 0; i < n; ++i)
      for (int w = 0; w < W; ++w) {
        z[i * W + w] = Cb[(j * n + i) * W + w];
        acc[w] += Cb[(j * n + i) * W + w] * vb[i * W + w];
      }
    for (int w = 0; w < W; ++w) wb[j * W + w] = acc[w];
    X::fwd(Lb, z, n);
  }
  for (int64_t i = 0; i < s; ++i)
    for (int64_t j = 0; j <= i; ++j) {
      T acc[W];
      for (int w = 0; w < W; ++w) acc[w] = 0;
      for (int64_t k = 0; k < n; ++k)
        for (int w = 0; w < W; ++w) acc[w] += Zc[(i * n + k) * W + w] * Zc[(j * n + k) * W + w];
      for (int w = 0; w < W; ++w) Gb[(i * s + j) * W + w] = acc[w];
    }
  damp<T, W>(Gb, s, tmp);
  X::chol(Gb, s);
  X::fwd(Gb, wb, s);
  X::bwd(Gb, wb, s);
  T* d = tmp;
  for (int64_t k = 0; k < n; ++k) for (int w = 0; w < W; ++w) d[k * W + w] = 0;
  for (int64_t j = 0; j < s; ++j)
    for (int64_t k = 0; k < n; ++k)
      for (int w = 0; w < W; ++w) d[k * W + w] += Zc[(j * n + k) * W + w] * wb[j * W + w];
  X::bwd(Lb, d, n);
  for (int64_t k = 0; k < n; ++k) for (int w = 0; w < W; ++w) vb[k * W + w] -= d[k * W + w];
}

template <ffi::DataType DT>
static ffi::Error Vproj(ffi::Buffer<DT> L, ffi::Buffer<DT> C, ffi::Buffer<DT> v, ffi::ResultBuffer<DT> vo) {
  using T = ffi::NativeType<DT>;
  constexpr int W = 64 / sizeof(T);
  int64_t n = v.dimensions().back();
  int64_t s = C.dimensions()[C.dimensions().size() - 2];
  int64_t batch = v.element_count() / n;
  std::vector<T> Lb(n * n * W), Cb(s * n * W), vb(n * W), Zc(s * n * W), Gb(s * s * W), wb(s * W), tmp((n + s) * W);
  for (int64_t b0 = 0; b0 < batch; b0 += W) {
    int64_t cnt = std::min<int64_t>(W, batch - b0);
    if (cnt < W) {
      std::fill(Lb.begin(), Lb.end(), T(0)); std::fill(Cb.begin(), Cb.end(), T(0)); std::fill(vb.begin(), vb.end(), T(0));
      for (int64_t i = 0; i < n; ++i) for (int w = 0; w < W; ++w) Lb[(i * n + i) * W + w] = T(1);
    }
    pack(L.typed_data() + b0 * n * n, Lb.data(), n * n, cnt, W);
    pack(C.typed_data() + b0 * s * n, Cb.data(), s * n, cnt, W);
    pack(v.typed_data() + b0 * n, vb.data(), n, cnt, W);
    vproj_group<T, W>(n, s, Lb.data(), Cb.data(), vb.data(), Zc.data(), Gb.data(), wb.data(), tmp.data());
    unpack(vb.data(), vo->typed_data() + b0 * n, n, cnt, W);
  }
  return ffi::Error::Success();
}

// simulate.project_position's minimum-norm step: dq = -C^T (C C^T + mu I)^-1 r, with the
// Cholesky factor of the damped Gram matrix (s, s) for the chord steps that follow.
template <ffi::DataType DT>
static ffi::Error MinNorm(ffi::Buffer<DT> C, ffi::Buffer<DT> r, ffi::ResultBuffer<DT> Lgo, ffi::ResultBuffer<DT> dqo) {
  using T = ffi::NativeType<DT>;
  constexpr int W = 64 / sizeof(T);
  using X = Lanes<T, W>;
  int64_t s = r.dimensions().back();
  int64_t n = C.dimensions().back();
  int64_t batch = r.element_count() / s;
  std::vector<T> Cb(s * n * W), rb(s * W), Gb(s * s * W), dq(n * W), mu(W);
  for (int64_t b0 = 0; b0 < batch; b0 += W) {
    int64_t cnt = std::min<int64_t>(W, batch - b0);
    if (cnt < W) {  // idle lanes: C = [I 0]
      std::fill(Cb.begin(), Cb.end(), T(0)); std::fill(rb.begin(), rb.end(), T(0));
      for (int64_t i = 0; i < std::min(s, n); ++i) for (int w = 0; w < W; ++w) Cb[(i * n + i) * W + w] = T(1);
    }
    pack(C.typed_data() + b0 * s * n, Cb.data(), s * n, cnt, W);
    pack(r.typed_data() + b0 * s, rb.data(), s, cnt, W);
    for (int64_t i = 0; i < s; ++i)
      for (int64_t j = 0; j <= i; ++j) {
        T acc[W];
        for (int w = 0; w < W; ++w) acc[w] = 0;
        for (int64_t k = 0; k < n; ++k)
          for (int w = 0; w < W; ++w) acc[w] += Cb[(i * n + k) * W + w] * Cb[(j * n + k) * W + w];
        for (int w = 0; w < W; ++w) Gb[(i * s + j) * W + w] = acc[w];
      }
    damp<T, W>(Gb.data(), s, mu.data());
    X::chol(Gb.data(), s);
    X::fwd(Gb.data(), rb.data(), s);
    X::bwd(Gb.data(), rb.data(), s);
    for (int64_t k = 0; k < n; ++k) for (int w = 0; w < W; ++w) dq[k * W + w] = 0;
    for (int64_t j = 0; j < s; ++j)
      for (int64_t k = 0; k < n; ++k)
        for (int w = 0; w < W; ++w) dq[k * W + w] -= Cb[(j * n + k) * W + w] * rb[j * W + w];
    unpack(Gb.data(), Lgo->typed_data() + b0 * s * s, s * s, cnt, W);
    unpack(dq.data(), dqo->typed_data() + b0 * n, n, cnt, W);
  }
  return ffi::Error::Success();
}


// The chord steps after the first: dq = -C^T Lg^-T Lg^-1 r with the first step's factor Lg.
template <ffi::DataType DT>
static ffi::Error Chord(ffi::Buffer<DT> Lg, ffi::Buffer<DT> C, ffi::Buffer<DT> r, ffi::ResultBuffer<DT> dqo) {
  using T = ffi::NativeType<DT>;
  constexpr int W = 64 / sizeof(T);
  using X = Lanes<T, W>;
  int64_t s = r.dimensions().back();
  int64_t n = C.dimensions().back();
  int64_t batch = r.element_count() / s;
  std::vector<T> Lb(s * s * W), Cb(s * n * W), rb(s * W), dq(n * W);
  for (int64_t b0 = 0; b0 < batch; b0 += W) {
    int64_t cnt = std::min<int64_t>(W, batch - b0);
    if (cnt < W) {
      std::fill(Lb.begin(), Lb.end(), T(0)); std::fill(Cb.begin(), Cb.end(), T(0)); std::fill(rb.begin(), rb.end(), T(0));
      for (int64_t i = 0; i < s; ++i) for (int w = 0; w < W; ++w) Lb[(i * s + i) * W + w] = T(1);
    }
    pack(Lg.typed_data() + b0 * s * s, Lb.data(), s * s, cnt, W);
    pack(C.typed_data() + b0 * s * n, Cb.data(), s * n, cnt, W);
    pack(r.typed_data() + b0 * s, rb.data(), s, cnt, W);
    X::fwd(Lb.data(), rb.data(), s);
    X::bwd(Lb.data(), rb.data(), s);
    for (int64_t k = 0; k < n; ++k) for (int w = 0; w < W; ++w) dq[k * W + w] = 0;
    for (int64_t j = 0; j < s; ++j)
      for (int64_t k = 0; k < n; ++k)
        for (int w = 0; w < W; ++w) dq[k * W + w] -= Cb[(j * n + k) * W + w] * rb[j * W + w];
    unpack(dq.data(), dqo->typed_data() + b0 * n, n, cnt, W);
  }
  return ffi::Error::Success();
}

#define BIND(DT) ffi::Ffi::Bind().Arg<ffi::Buffer<DT>>().Arg<ffi::Buffer<DT>>().Arg<ffi::Buffer<DT>>().Arg<ffi::Buffer<DT>>() \
  .Arg<ffi::Buffer<DT>>().Ret<ffi::Buffer<DT>>().Ret<ffi::Buffer<DT>>().Ret<ffi::Buffer<DT>>().Ret<ffi::Buffer<DT>>().Attr<double>("rtol")
XLA_FFI_DEFINE_HANDLER_SYMBOL(JmKktF64, Kkt<ffi::F64>, BIND(ffi::F64));
XLA_FFI_DEFINE_HANDLER_SYMBOL(JmKktF32, Kkt<ffi::F32>, BIND(ffi::F32));

#define BIND_VPROJ(DT) ffi::Ffi::Bind().Arg<ffi::Buffer<DT>>().Arg<ffi::Buffer<DT>>().Arg<ffi::Buffer<DT>>().Ret<ffi::Buffer<DT>>()
XLA_FFI_DEFINE_HANDLER_SYMBOL(JmVprojF64, Vproj<ffi::F64>, BIND_VPROJ(ffi::F64));
XLA_FFI_DEFINE_HANDLER_SYMBOL(JmVprojF32, Vproj<ffi::F32>, BIND_VPROJ(ffi::F32));
#define BIND_MINNORM(DT) ffi::Ffi::Bind().Arg<ffi::Buffer<DT>>().Arg<ffi::Buffer<DT>>().Ret<ffi::Buffer<DT>>().Ret<ffi::Buffer<DT>>()
XLA_FFI_DEFINE_HANDLER_SYMBOL(JmMinNormF64, MinNorm<ffi::F64>, BIND_MINNORM(ffi::F64));
XLA_FFI_DEFINE_HANDLER_SYMBOL(JmMinNormF32, MinNorm<ffi::F32>, BIND_MINNORM(ffi::F32));
#define BIND_CHORD(DT) ffi::Ffi::Bind().Arg<ffi::Buffer<DT>>().Arg<ffi::Buffer<DT>>().Arg<ffi::Buffer<DT>>().Ret<ffi::Buffer<DT>>()
XLA_FFI_DEFINE_HANDLER_SYMBOL(JmChordF64, Chord<ffi::F64>, BIND_CHORD(ffi::F64));
XLA_FFI_DEFINE_HANDLER_SYMBOL(JmChordF32, Chord<ffi::F32>, BIND_CHORD(ffi::F32));
