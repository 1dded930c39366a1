"""Loaders and exporters. :func:`load` dispatches on the file suffix."""

from __future__ import annotations

from pathlib import Path

from ..graph import Graph, ModelError


def read_graph(path) -> Graph:
    """Parse any supported file into a :class:`Graph` (before compilation)."""
    p = Path(path)
    if not p.exists():
        raise ModelError(f"{p}: file not found")
    suf = p.suffix.lower()
    if suf == ".toml":
        from .toml import read_toml

        return read_toml(p)
    if suf == ".xml":
        from .mjcf import read_mjcf

        return read_mjcf(p)
    if suf == ".urdf":
        from .urdf import read_urdf

        return read_urdf(p)
    if suf == ".sdf":
        from .sdf import read_sdf

        return read_sdf(p)
    if suf == ".json":
        from .cmg import read_cmg

        return read_cmg(p)
    raise ModelError(f"{p}: unsupported file type '{suf}' (expected .toml, .xml, .urdf, .sdf or .json)")


def load(path, **compile_options):
    """Load and compile a mechanism file (.toml, .xml MJCF, .urdf, .sdf, .json CMG graph)."""
    from ..compile import compile as _compile

    return _compile(read_graph(path), **compile_options)


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
