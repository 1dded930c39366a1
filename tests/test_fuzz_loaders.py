"""Fuzzing the TOML, MJCF and URDF loaders: random mutations of shipped files (deleted lines and
keys, numbers replaced by NaN, infinities, huge values, strings or lists, swapped names,
truncation, non-UTF-8 bytes). Whatever the mutation, ``jm.load`` either returns a mechanism or
raises ``jm.ModelError``: no other exception, no hang, no traceback for the user."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import jaxmech as jm

ROOT = Path(__file__).resolve().parents[1]
SOURCES = {
    "toml": ROOT / "configs" / "four_bar.toml",
    "stewart_toml": ROOT / "configs" / "stewart_graph.toml",
    "mjcf": ROOT / "configs" / "four_bar.xml",
    "mjcf_features": ROOT / "tests" / "data" / "mjcf_features.xml",
    "urdf": ROOT / "tests" / "data" / "four_bar_loop.urdf",
}
SUFFIX = {"toml": ".toml", "stewart_toml": ".toml", "mjcf": ".xml", "mjcf_features": ".xml", "urdf": ".urdf"}
NUMBER = re.compile(rb"-?\d+(\.\d*)?([eE][-+]?\d+)?")
WORD = re.compile(rb"[A-Za-z_][A-Za-z_0-9]*")
REPLACEMENTS = [
    b"nan", b"inf", b"-inf", b"1e308", b"-1e308", b"1e400", b"0", b"-1", b"1e-320", b'"heavy"', b"heavy",
    b"[]", b"[1, 2]", b"{}", b"true", b"", b"\xff\xfe", b"\x00",
]  # fmt: skip


def _mutate(data: bytes, ops: list[tuple[int, int, int]]) -> bytes:
    """Apply (kind, position, choice) mutations to the file's bytes."""
    for kind, pos, choice in ops:
        if not data:
            break
        lines = data.split(b"\n")
        if kind == 0:  # delete a line (a key, a table header, an element)
            del lines[pos % len(lines)]
            data = b"\n".join(lines)
        elif kind == 1:  # replace a number
            nums = list(NUMBER.finditer(data))
            if nums:
                m = nums[pos % len(nums)]
                data = data[: m.start()] + REPLACEMENTS[choice % len(REPLACEMENTS)] + data[m.end() :]
        elif kind == 2:  # replace a word (key, name, type, tag) with another word of the file
            words = list(WORD.finditer(data))
            if words:
                m, other = words[pos % len(words)], words[choice % len(words)]
                data = data[: m.start()] + other.group() + data[m.end() :]
        elif kind == 3:  # raw bytes, non-UTF-8 included
            p = pos % (len(data) + 1)
            data = data[:p] + REPLACEMENTS[choice % len(REPLACEMENTS)] + data[p:]
        else:  # truncate
            data = data[: pos % (len(data) + 1)]
    return data


OPS = st.lists(st.tuples(st.integers(0, 4), st.integers(0, 10_000), st.integers(0, 10_000)), min_size=1, max_size=3)


def _load_or_model_error(path: Path) -> None:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # warnings (limits, dropped rows) are allowed
            jm.load(path)
    except jm.ModelError as e:
        assert str(e).strip() and "\n" not in str(e).strip(), repr(e)  # one line


@pytest.mark.parametrize("fmt", sorted(SOURCES))
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture], derandomize=True)
@given(ops=OPS)
def test_mutated_file_loads_or_raises_model_error(fmt, ops, tmp_path):
    data = _mutate(SOURCES[fmt].read_bytes(), ops)
    path = tmp_path / f"fuzz{SUFFIX[fmt]}"
    path.write_bytes(data)
    _load_or_model_error(path)


@pytest.mark.slow
@pytest.mark.parametrize("fmt", sorted(SOURCES))
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=OPS)
def test_mutated_file_loads_or_raises_model_error_many(fmt, ops, tmp_path):
    data = _mutate(SOURCES[fmt].read_bytes(), ops)
    path = tmp_path / f"fuzz{SUFFIX[fmt]}"
    path.write_bytes(data)
    _load_or_model_error(path)
