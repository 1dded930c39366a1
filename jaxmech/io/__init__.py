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
