"""Reading robot text files with one-line :class:`~jaxmech.graph.ModelError`s (shared by the loaders)."""

from __future__ import annotations

from pathlib import Path

from ..graph import ModelError


def read_text(path) -> str:
    """The text of a UTF-8 file. A missing file, a directory, an unreadable file or bytes that are
    not UTF-8 raise a one-line :class:`ModelError` naming the file (and the byte offset)."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise ModelError(f"{path}: file not found") from None
    except IsADirectoryError:
        raise ModelError(f"{path}: is a directory, not a file") from None
    except OSError as e:
        raise ModelError(f"{path}: cannot read: {e.strerror or e}") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        bad = raw[e.start : e.start + 4]
        raise ModelError(f"{path}: not a UTF-8 text file (byte {e.start}: {bad!r}); save it as UTF-8") from None


def check_utf8(path) -> Path:
    """``path`` if it is a readable UTF-8 text file (for loaders whose parser opens the file itself)."""
    read_text(path)
    return Path(path)
