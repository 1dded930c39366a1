"""Bad robot files: every case is one line of :class:`jaxmech.ModelError` naming the file, the
element and the value, never a traceback from inside numpy / json / tomllib. Graph and compile
step only (no JAX tracing), plus a bounded hypothesis fuzz of the CMG JSON loader."""

from __future__ import annotations

import copy
import json
import math
import warnings
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import jaxmech as jm
from jaxmech.io.cmg import graph_from_cmg, read_cmg

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
_DOCS: dict = {}


def doc(robot: str) -> dict:
    if robot not in _DOCS:
        _DOCS[robot] = json.loads((CONFIGS / f"{robot}_physical_graph.json").read_text())
    return copy.deepcopy(_DOCS[robot])


def load_error(path: Path) -> str:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(jm.ModelError) as e:
            jm.compile(jm.read_graph(path))
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(str(path)), msg
    return msg


def write(tmp_path, name, data) -> Path:
    p = tmp_path / name
    p.write_text(json.dumps(data))
    return p


def _generated_key(d):
    d["cuts"] = ["left_hip_yaw_closed"]
    return d


def _joint_paths(d):
    d["joints"][3]["paths"] = [[0, 1]]
    return d


def _missing_body(d):
    d["loop_cuts"][2]["body2"] = "no_such_body"
    return d


def _bad_transmission(d):
    d["actuators"][7]["transmission"] = {"finger_joint1": 0.5, "finger_joint9": 0.5}
    return d


def _not_rotation(d):
    u = next(c for c in d["loop_cuts"] if c["type"] == "universal")
    u["frame1_R"] = [[2.0, 0, 0], [0, 1, 0], [0, 0, 1]]
    return d


def _sole_without_frame(d):
    del d["sole_sites"][1]["frame_translation_m"]
    return d


def _mass_string(d):
    d["bodies"][4]["mass_kg"] = "heavy"
    return d


def _numeric_string(d):
    d["joints"][2]["T_AJ"][0][3] = "0.25"
    return d


def _nan_seed(d):
    d["seed"]["joints"]["q3"] = float("nan")
    return d


def _huge_com(d):
    d["bodies"][0]["com_m"] = [1e300, 0, 0]
    return d


CASES = [
    ("kangaroo", _generated_key, ["top level", "cuts", "generated structure"]),
    ("kangaroo", _joint_paths, ["joint #4", "'paths'", "generated structure"]),
    ("kangaroo", _missing_body, ["loop_cut #3", "body2", "no_such_body"]),
    ("panda", _bad_transmission, ["actuator #8 'actuator8'", "finger_joint9"]),
    ("kangaroo", _not_rotation, ["loop_cut #", "frame1_R is not a rotation", "2.0"]),
    ("kangaroo", _sole_without_frame, ["sole_site #2 'right_sole'", "frame_translation_m"]),
    ("stewart", _mass_string, ["body #5", "mass_kg", "'heavy'"]),
    ("go2", _numeric_string, ["joint #3", "T_AJ", "'0.25'"]),
    ("excavator", _nan_seed, ["joint", "seed", "nan"]),
    ("go2", _huge_com, ["body #1 'base'", "com_m", "1e+300"]),
]


@pytest.mark.parametrize(("robot", "mutate", "words"), CASES, ids=[c[1].__name__.strip("_") for c in CASES])
def test_cmg_bad_input_one_line(tmp_path, robot, mutate, words):
    msg = load_error(write(tmp_path, f"{robot}_bad.json", mutate(doc(robot))))
    for w in words:
        assert w in msg, (w, msg)


def test_unknown_keys_one_warning(tmp_path):
    d = doc("go2")
    d["colour"] = "red"
    d["joints"][0]["stifness"] = 3.0
    d["point_sites"][0]["friction"] = 0.8
    with pytest.warns(UserWarning) as rec:
        jm.read_graph(write(tmp_path, "go2_extra.json", d))
    msgs = [str(w.message) for w in rec if "unknown key" in str(w.message)]
    assert len(msgs) == 1
    for k in ("colour", "joints[].stifness", "point_sites[].friction"):
        assert k in msgs[0]


@pytest.mark.parametrize("suffix", ["json", "toml", "urdf", "sdf", "xml"])
def test_not_utf8(tmp_path, suffix):
    body = {
        "json": b'{"id": "r\xe9", "joints": []}',
        "toml": b'name = "r\xe9"\n',
        "urdf": b'<robot name="r\xe9"><link name="a"/></robot>',
        "sdf": b'<sdf version="1.7"><model name="m\xe9"><link name="a"/></model></sdf>',
        "xml": b'<mujoco model="m\xe9"><worldbody><body name="a"><joint/><geom size="0.1"/></body>'
        b"</worldbody></mujoco>",
    }[suffix]
    p = tmp_path / f"latin1.{suffix}"
    p.write_bytes(body)
    msg = load_error(p)
    assert "not a UTF-8 text file" in msg and "\\xe9" in msg


@pytest.mark.parametrize(
    ("line", "words"),
    [
        ('mass = "heavy"', ["body 'b'", "mass", "'heavy'"]),
        ('mass = 1.0\ncom = ["0.1", 0, 0]', ["body 'b'", "com", "'0.1'"]),
    ],
)
def test_toml_number_as_string(tmp_path, line, words):
    p = tmp_path / "heavy.toml"
    p.write_text(f'name = "r"\n[[body]]\nname = "b"\n{line}\ninertia = [0.1, 0.1, 0.1]\n')
    msg = load_error(p)
    for w in words:
        assert w in msg, (w, msg)


# ----------------------------------------------------------------------------- fuzz
def _slots(x, out, path=()):
    """Every (container, key) in a JSON document."""
    items = x.items() if isinstance(x, dict) else enumerate(x) if isinstance(x, list) else ()
    for k, v in items:
        out.append((x, k))
        _slots(v, out, (*path, k))
    return out


_BASE = {r: json.loads((CONFIGS / f"{r}_physical_graph.json").read_text()) for r in ("stewart", "go2", "panda")}
_VALUES = st.sampled_from(
    ["heavy", "1.5", None, True, [], {}, [1, 2], math.nan, math.inf, -math.inf, 1e300, -1e300, 0, -1.0, "world"]
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(robot=st.sampled_from(sorted(_BASE)), data=st.data())
def test_fuzz_cmg_only_model_error(tmp_path, robot, data):
    d = copy.deepcopy(_BASE[robot])
    raw = None
    for _ in range(data.draw(st.integers(1, 3), label="n mutations")):
        slots = _slots(d, [])
        container, key = slots[data.draw(st.integers(0, len(slots) - 1), label="slot")]
        op = data.draw(st.sampled_from(["delete", "replace", "stringify", "bytes"]), label="op")
        if op == "delete":
            del container[key]
        elif op == "replace":
            container[key] = data.draw(_VALUES, label="value")
        elif op == "stringify":
            container[key] = json.dumps(container[key])
        else:
            text = json.dumps(d).encode()
            i = data.draw(st.integers(0, len(text)), label="byte at")
            raw = text[:i] + data.draw(st.sampled_from([b"\xff", b"\xc3", b"\x00", b"{", b"]"])) + text[i:]
    p = tmp_path / f"fuzz_{robot}.json"
    p.write_bytes(raw if raw is not None else json.dumps(d).encode())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            jm.compile(read_cmg(p))
        except jm.ModelError as e:
            assert "\n" not in str(e)


def test_graph_from_cmg_not_a_document():
    for bad in (None, [], "x", {"bodies": []}):
        with pytest.raises(jm.ModelError, match="not a mechanism graph"):
            graph_from_cmg(bad, "doc.json")
