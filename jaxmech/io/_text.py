"""Reading robot text files with one-line :class:`~jaxmech.graph.ModelError`s (shared by the loaders)."""

from __future__ import annotations

import re
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


def check_utf8(path, xml: bool = False) -> Path:
    """``path`` if it is a readable UTF-8 text file (for loaders whose parser opens the file itself).
    ``xml=True``: a file whose XML declaration names another encoding is left to the XML parser."""
    path = Path(path)
    if xml:
        try:
            head = path.read_bytes()[:200]
        except OSError:
            head = b""
        m = re.match(rb"^(\xef\xbb\xbf)?\s*<\?xml[^>]*encoding\s*=\s*[\"']([A-Za-z0-9._-]+)", head)
        if m and m.group(2).lower().replace(b"_", b"-") not in (b"utf-8", b"utf8"):
            return path
    read_text(path)
    return path
