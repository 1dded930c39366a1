"""Native CPU kernels through XLA's FFI, built on first use; LAPACK where they are not available.

Why. A batched Stewart forward dynamics spends about 5 us per state in per-matrix LAPACK calls on
18-24-sized matrices (``benchmarks/PROFILE.md``, sessions 45-48): each ``potrf``/``trsm`` call costs
1-3 us of fixed overhead, several times its arithmetic, and unrolled ``jnp`` versions are slower
still. :func:`kkt_natural` runs the whole certified KKT solve of :mod:`jaxmech.kkt` for a batch of
states in one call (``native_kernels.cc``): eight float64 (sixteen float32) states at a time, laid
out lane by lane so every step is one SIMD operation across states, all factors kept in the L1
cache. Given a model's static :class:`jaxmech.kkt.Sparsity` (``pattern=``), the kernels' loops run
over index lists of the entries that can be non-zero and skip the tree's and the loops' structural
zeros (Stewart forward dynamics 7.0 -> 6.4 us per state).

Build. The C++ source ships with the package and is compiled once per machine, jaxlib version and
source, with the system's C++ compiler (``$CXX``, else ``c++``/``g++``; ``-O3 -march=native``)
against the FFI headers jaxlib ships (``jax.ffi.include_dir()``), into
``$XDG_CACHE_HOME/jaxmech/native/<key>/`` (``~/.cache/...`` when unset; written to a temporary
file and renamed, so concurrent processes are safe). A first build takes about 5 s. Where there
is no compiler or the build fails, a warning says why once and every caller takes the LAPACK
path, which gives the same results to round-off. ``JAXMECH_NATIVE=0`` switches the kernels off.

Nothing happens at import: the first call that could use a kernel builds and registers it (an FFI
target registration, JAX's only global change). Kernels run only on the CPU backend (callers use
``lax.platform_dependent``); they are not differentiated themselves (callers define derivatives).
"""

from __future__ import annotations

import functools
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from jax.custom_batching import custom_vmap

_SRC = Path(__file__).with_name("native_kernels.cc")
_KERNELS = {
    "kkt": "Kkt",
    "vproj": "Vproj",
    "min_norm": "MinNorm",
    "chord": "Chord",
    "lm_factor": "LmFactor",
    "lm_solve": "LmSolve",
}
_DTYPES = {np.dtype(np.float64): "F64", np.dtype(np.float32): "F32"}


def _target(kernel: str, dtype) -> str:
    return f"jaxmech_{kernel}_{_DTYPES[np.dtype(dtype)].lower()}"


def _compiler() -> str | None:
    for name in (os.environ.get("CXX"), "c++", "g++", "clang++"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def _cpu_flags() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return line
    except OSError:
        pass
    return platform.processor()


def _cache_dir(key: str) -> Path:
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return root / "jaxmech" / "native" / key


def _build() -> Path:
    """The shared library, compiled now unless a cached build of the same inputs exists."""
    cxx = _compiler()
    if cxx is None:
        raise RuntimeError("no C++ compiler found (set CXX)")
    import jaxlib

    version = subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=30).stdout
    key = hashlib.sha256(
        b"\0".join(
            s.encode() if isinstance(s, str) else s
            for s in (_SRC.read_bytes(), jaxlib.__version__, version, platform.machine(), _cpu_flags())
        )
    ).hexdigest()[:16]
    out = _cache_dir(key) / "native_kernels.so"
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=out.parent)
    os.close(fd)
    cmd = [cxx, "-O3", "-march=native", "-fno-math-errno", "-shared", "-fPIC", "-std=c++17", "-w"]
    cmd += ["-I", jax.ffi.include_dir(), str(_SRC), "-o", tmp]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        if r.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{r.stderr[-2000:]}")
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return out


def switched_off() -> bool:
    """True when ``JAXMECH_NATIVE`` is ``0``/``false``/``no``/``off`` (read at each call)."""
    return os.environ.get("JAXMECH_NATIVE", "1").strip().lower() in ("0", "false", "no", "off")


@functools.cache
def _load() -> bool:
    """Build (or find) and register the kernels once per process; False, with one warning, where
    that fails."""
    try:
        import ctypes

        lib = ctypes.cdll.LoadLibrary(str(_build()))
        for kernel, symbol in _KERNELS.items():
            for dt, suffix in _DTYPES.items():
                handler = jax.ffi.pycapsule(getattr(lib, f"Jm{symbol}{suffix}"))
                jax.ffi.register_ffi_target(_target(kernel, dt), handler, platform="cpu")
    except Exception as e:  # noqa: BLE001 -- any failure means the LAPACK path, said once
        warnings.warn(f"jaxmech: native CPU kernels unavailable, using LAPACK instead ({e})", stacklevel=3)
        return False
    return True


def available(dtype) -> bool:
    """Whether the native kernels can run for ``dtype`` (float32 or float64): not switched off by
    ``JAXMECH_NATIVE=0``, and built and loaded (on the first call). Read when a program is traced:
    programs already compiled keep the path they were traced with."""
    return np.dtype(dtype) in _DTYPES and not switched_off() and _load()


def status() -> str:
    """``"on"``, ``"off (JAXMECH_NATIVE=0)"`` or ``"unavailable"`` (no compiler, failed build):
    for benchmark reports. Builds the kernels if they are not built yet."""
    if switched_off():
        return "off (JAXMECH_NATIVE=0)"
    return "on" if _load() else "unavailable"


def _masks(pattern, n: int, s: int, lower: bool = True) -> dict:
    """The kernels' ``lmask`` (n * n) and ``zmask`` (s * n) attributes (int64, row-major) from a
    :class:`jaxmech.kkt.Sparsity` (``lower=False``: ``C``'s own pattern as ``zmask``, no
    ``lmask``); all ones (dense) for None."""
    if pattern is None:
        z = np.ones(s * n, np.int64)
        return {"lmask": np.ones(n * n, np.int64), "zmask": z} if lower else {"zmask": z}
    if pattern.rows.shape != (s, n):
        raise ValueError(f"sparsity pattern for C {pattern.rows.shape}, got C ({s}, {n})")
    if not lower:
        return {"zmask": np.asarray(pattern.c, np.int64).ravel()}
    return {"lmask": np.asarray(pattern.lower, np.int64).ravel(), "zmask": np.asarray(pattern.rows, np.int64).ravel()}


def kkt_natural(M, C, gamma, mask, b, rtol: float, pattern=None):
    """The certified natural-order KKT solve of :func:`jaxmech.kkt.solve` for one state (batch
    under ``vmap``): ``M`` (n, n), ``C`` (s, n) and ``gamma`` (s,) with masked rows zeroed,
    ``mask`` (s,) 1 / 0, ``b`` (n,), s <= n. Returns ``(L, a, lam, ok)``: the Cholesky factor of
    ``M`` (n, n), accelerations (n,), multipliers (s,) and the certificate (a bool scalar). Call
    only where :func:`available` is true and on the CPU backend. ``pattern``: the static
    :class:`jaxmech.kkt.Sparsity` of ``M`` and ``C`` (None: dense)."""
    dt = M.dtype
    n, s = b.shape[-1], gamma.shape[-1]
    outs = ((n, n), (n,), (s,), (1,))
    L, a, lam, ok = _call("kkt", outs, dt, (M, C, gamma, mask, b), rtol=float(rtol), **_masks(pattern, n, s))
    return L, a, lam, ok[0] > 0


def project_velocity(L, C, v, pattern=None):
    """``v - L^-T Z w`` with ``Z = L^-1 C^T``, ``w = (Z^T Z + mu I)^-1 C v``: the M-orthogonal
    projection of :func:`jaxmech.simulate.project_velocity` for ``L`` (n, n) the lower Cholesky
    factor of ``M``, ``C`` (s, n), ``v`` (n,); ``mu`` its damping; ``pattern`` as in
    :func:`kkt_natural`. Returns (n,)."""
    s, n = C.shape[-2:]
    return _call("vproj", (v.shape,), v.dtype, (L, C, v), **_masks(pattern, n, s))[0]


def min_norm_step(C, r, pattern=None):
    """``(L_g, dq)``: the lower Cholesky factor (s, s) of ``C C^T + mu I`` and the minimum-norm
    step ``dq = -C^T (C C^T + mu I)^-1 r`` (n,) of :func:`jaxmech.simulate.project_position`, for
    ``C`` (s, n) and ``r`` (s,); ``pattern`` as in :func:`kkt_natural` (``C``'s is read)."""
    s, n = C.shape
    return _call("min_norm", ((s, s), (n,)), C.dtype, (C, r), **_masks(pattern, n, s, lower=False))


def chord_step(Lg, C, r, pattern=None):
    """``-C^T L_g^-T L_g^-1 r`` (n,): a chord step with the factor of :func:`min_norm_step`."""
    s, n = C.shape
    return _call("chord", ((n,),), C.dtype, (Lg, C, r), **_masks(pattern, n, s, lower=False))[0]


def lm_factor(J, mu):
    """The lower Cholesky factor (n, n) of the Levenberg-Marquardt matrix ``J^T J + mu s I`` of
    :func:`jaxmech.corrector._lm_factor` (``s`` = the largest diagonal entry of ``J^T J``), for ``J``
    (m, n) and the scalar damping ``mu``."""
    n = J.shape[1]
    return _call("lm_factor", ((n, n),), J.dtype, (J, jnp.reshape(mu, (1,)).astype(J.dtype)))[0]


def lm_solve(L, J, f):
    """The step ``-(L L^T)^-1 J^T f`` (n,) of :func:`jaxmech.corrector._lm_solve` (0 where it is
    not finite) for the factor ``L`` (n, n) of :func:`lm_factor`, ``J`` (m, n), ``f`` (m,)."""
    return _call("lm_solve", ((J.shape[1],),), J.dtype, (L, J, f))[0]


def _call(kernel: str, outs, dtype, args, **attrs):
    """The kernel on one problem (``args`` and ``outs``, the output shapes, without a batch axis).
    Under ``vmap`` (nested or not) it runs once on the whole batch, batch-last."""

    @custom_vmap
    def one(args):
        return tuple(o[..., 0] for o in _ffi(kernel, outs, dtype, [a[..., None] for a in args], 1, attrs))

    @one.def_vmap
    def _rule(m, in_batched, args):
        out = _batched(kernel, outs, dtype, _broadcast(m, in_batched[0], args), attrs)
        return out, (True,) * len(outs)

    return one(tuple(args))


def _batched(kernel, outs, dtype, args, attrs):
    """:func:`_call` on arguments with one leading batch axis; an enclosing ``vmap`` merges its axis
    into that one."""

    @custom_vmap
    def many(args):
        size = args[0].shape[0]
        res = _ffi(kernel, outs, dtype, [jnp.moveaxis(a, 0, -1) for a in args], size, attrs)
        return tuple(jnp.moveaxis(o, -1, 0) for o in res)

    @many.def_vmap
    def _rule(m, in_batched, args):
        args = _broadcast(m, in_batched[0], args)
        size = args[0].shape[1]
        res = _batched(kernel, outs, dtype, [a.reshape((m * size,) + a.shape[2:]) for a in args], attrs)
        return tuple(o.reshape((m, size) + o.shape[1:]) for o in res), (True,) * len(outs)

    return many(tuple(args))


def _broadcast(m: int, batched, args):
    return [a if b else jnp.broadcast_to(a, (m,) + a.shape) for a, b in zip(args, batched, strict=True)]


def _ffi(kernel, outs, dtype, args, size: int, attrs):
    shapes = [jax.ShapeDtypeStruct(tuple(o) + (size,), dtype) for o in outs]
    return jax.ffi.ffi_call(_target(kernel, dtype), shapes)(*args, **attrs)


def on_cpu(kernel, reference, *args):
    """``kernel(*args)`` where the native kernels are available for the first argument's dtype and
    the program runs on the CPU, else ``reference(*args)``. Where the default backend is the CPU
    the choice is made here, so XLA sees the kernel's operands directly (a ``lax.platform_dependent``
    conditional would keep it from cancelling their batch-last transposes); elsewhere it is a
    ``lax.platform_dependent``."""
    if not available(args[0].dtype):
        return reference(*args)
    if jax.default_backend() == "cpu":
        return kernel(*args)
    return jax.lax.platform_dependent(*args, cpu=kernel, default=reference)


def cpu_or(kernel, reference):
    """``f(*args)``: ``kernel`` on the CPU backend where the native kernels are available for the
    first argument's dtype, ``reference`` elsewhere (same outputs to round-off); derivatives are
    always the reference's (``custom_jvp``, :func:`jaxmech._as_written.jvp_rule`)."""
    from ._as_written import jvp_rule

    @jax.custom_jvp
    def f(*args):
        return on_cpu(kernel, reference, *args)

    f.defjvp(jvp_rule(reference), symbolic_zeros=True)
    return f


__all__ = [
    "available",
    "chord_step",
    "cpu_or",
    "kkt_natural",
    "lm_factor",
    "lm_solve",
    "min_norm_step",
    "on_cpu",
    "project_velocity",
    "status",
]
