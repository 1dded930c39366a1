"""Loaders and exporters. :func:`load` dispatches on the file suffix."""

from __future__ import annotations

from pathlib import Path

from ..graph import Graph, ModelError


def read_graph(path, **options) -> Graph:
    """Parse any supported file into a :class:`Graph` (before compilation). ``options`` go to the
    format's reader: ``floating=True`` (URDF: free joint world -> root link), ``model="name"``
    (SDF: which model of the file)."""
    p = Path(path)
    if not p.exists():
        raise ModelError(f"{p}: file not found")
    suf = p.suffix.lower()
    allowed = {".urdf": {"floating"}, ".sdf": {"model"}}.get(suf, set())
    if set(options) - allowed:
        raise ModelError(
            f"{p}: reader option(s) {sorted(set(options) - allowed)} do not apply to {suf} files "
            "(floating: .urdf, model: .sdf)"
        )
    if suf == ".toml":
        from .toml import read_toml

        return read_toml(p)
    if suf == ".xml":
        from .mjcf import read_mjcf

        return read_mjcf(p)
    if suf == ".urdf":
        from .urdf import read_urdf

        return read_urdf(p, **options)
    if suf == ".sdf":
        from .sdf import read_sdf

        return read_sdf(p, **options)
    if suf == ".json":
        from .cmg import read_cmg

        return read_cmg(p)
    raise ModelError(f"{p}: unsupported file type '{suf}' (expected .toml, .xml, .urdf, .sdf or .json)")


def load(path, **options):
    """Load and compile a mechanism file (.toml, .xml MJCF, .urdf, .sdf, .json CMG graph).

    Reader options (``floating`` for URDF, ``model`` for SDF) go to :func:`read_graph`, the rest
    (``cuts``, ``tree``) to :func:`jaxmech.compile`."""
    from ..compile import compile as _compile

    reader = {k: options.pop(k) for k in ("floating", "model") if k in options}
    return _compile(read_graph(path, **reader), **options)


def resolve_resource(spec: str, base_dir=None, where: str = "") -> Path:
    """Path of a robot file named ``"distribution:relative/path"`` (a file installed by that Python
    distribution, looked up through ``importlib.metadata``, e.g.
    ``"example-robot-data:panda_description/urdf/panda.urdf"``) or a plain path (relative to
    ``base_dir``). Raises :class:`ModelError` naming ``where`` and the spec when nothing matches."""
    import importlib.metadata as md

    spec = str(spec)
    plain = Path(spec) if base_dir is None or Path(spec).is_absolute() else Path(base_dir) / spec
    if plain.exists():
        return plain
    if ":" in spec and not Path(spec).drive:
        dist, rel = spec.split(":", 1)
        rel = rel.lstrip("/")
        try:
            d = md.distribution(dist)
        except md.PackageNotFoundError:
            raise ModelError(f"{where}: Python distribution '{dist}' is not installed (resource {spec!r})") from None
        for f in d.files or ():
            if str(f).replace("\\", "/").endswith("/" + rel) or str(f) == rel:
                p = Path(d.locate_file(f))
                if p.exists():
                    return p
        raise ModelError(f"{where}: no file '{rel}' in distribution '{dist}'")
    raise ModelError(f"{where}: file not found: {plain}")
