"""The graph builder and compiler: bad input fails early with a message naming the file, the
element and the value; automatic cut selection gives a spanning tree with the right cuts."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import jaxmech as jm
from jaxmech.graph import Graph

BODY = """
[[body]]
name = "{name}"
mass = 1.0
inertia = [0.1, 0.1, 0.1]
"""
JOINT = """
[[joint]]
name = "{name}"
type = "{type}"
parent = "{parent}"
child = "{child}"
"""


def _toml(bodies, joints, extra=""):
    text = 'name = "t"\n'
    text += "".join(BODY.format(name=b) for b in bodies)
    text += "".join(JOINT.format(name=n, type=t, parent=p, child=c) for n, t, p, c in joints)
    return text + extra


def _load_error(tmp_path, text, fname="model.toml") -> str:
    path = tmp_path / fname
    path.write_text(text)
    with pytest.raises(jm.ModelError) as e:
        jm.load(path)
    msg = str(e.value)
    assert str(path) in msg, msg  # names the file
    assert "\n" not in msg.strip(), msg  # one line
    return msg


CHAIN = _toml(["a", "b"], [("j1", "revolute", "world", "a"), ("j2", "revolute", "a", "b")])


def test_good_file_loads(tmp_path):
    p = tmp_path / "ok.toml"
    p.write_text(CHAIN)
    mech = jm.load(p)
    assert mech.nq == mech.nv == 2 and mech.body_names == ("a", "b")


def test_unknown_joint_type(tmp_path):
    msg = _load_error(tmp_path, _toml(["a"], [("hinge1", "revolut", "world", "a")]))
    assert "joint 'hinge1'" in msg and "revolut" in msg and "unknown joint type" in msg


def test_disconnected_body(tmp_path):
    msg = _load_error(tmp_path, _toml(["a", "island"], [("j1", "revolute", "world", "a")]))
    assert "body 'island'" in msg and "not connected" in msg


def test_disconnected_subgraph(tmp_path):
    """Two bodies joined to each other but not to the world."""
    msg = _load_error(
        tmp_path, _toml(["a", "b", "c"], [("j1", "revolute", "world", "a"), ("j2", "revolute", "b", "c")])
    )
    assert ("body 'b'" in msg or "body 'c'" in msg) and "not connected" in msg


@pytest.mark.parametrize("kind", ["body", "joint"])
def test_duplicate_name(tmp_path, kind):
    if kind == "body":
        text = _toml(["a", "a"], [("j1", "revolute", "world", "a")])
    else:
        text = _toml(["a", "b"], [("j1", "revolute", "world", "a"), ("j1", "revolute", "a", "b")])
    msg = _load_error(tmp_path, text)
    assert f"{kind} 'a'" in msg or f"{kind} 'j1'" in msg
    assert "duplicate" in msg


def test_zero_axis(tmp_path):
    text = _toml(["a"], [("j1", "revolute", "world", "a")]).replace(
        'child = "a"\n', 'child = "a"\naxis = [0.0, 0.0, 0.0]\n'
    )
    msg = _load_error(tmp_path, text)
    assert "joint 'j1'" in msg and "axis" in msg and "[0.0, 0.0, 0.0]" in msg


def test_parallel_universal_axes(tmp_path):
    text = _toml(["a"], [("u", "universal", "world", "a")]).replace(
        'child = "a"\n', 'child = "a"\naxis = [1, 0, 0]\naxis2 = [2, 0, 0]\n'
    )
    msg = _load_error(tmp_path, text)
    assert "joint 'u'" in msg and "parallel" in msg


def test_non_symmetric_inertia(tmp_path):
    text = _toml(["a"], [("j1", "revolute", "world", "a")]).replace(
        "inertia = [0.1, 0.1, 0.1]", "inertia = [[0.1, 0.02, 0.0], [0.0, 0.1, 0.0], [0.0, 0.0, 0.1]]", 1
    )
    msg = _load_error(tmp_path, text)
    assert "body #1 'a'" in msg or "body 'a'" in msg
    assert "not symmetric" in msg and "0.02" in msg


def test_negative_eigenvalue_inertia(tmp_path):
    text = _toml(["a"], [("j1", "revolute", "world", "a")]).replace(
        "inertia = [0.1, 0.1, 0.1]", "inertia = [0.1, 0.1, 0.1, 0.3, 0.0, 0.0]", 1
    )
    msg = _load_error(tmp_path, text)
    assert "body 'a'" in msg and "positive" in msg and "eigenvalues" in msg
    assert "-0.2" in msg or "-0.1999" in msg  # the offending eigenvalue 0.1 - 0.3


def test_negative_mass(tmp_path):
    text = _toml(["a"], [("j1", "revolute", "world", "a")]).replace("mass = 1.0", "mass = -2.0", 1)
    msg = _load_error(tmp_path, text)
    assert "body 'a'" in msg and "-2.0" in msg


def test_loop_through_fixed_joints_only(tmp_path):
    text = _toml(["a", "b"], [("f1", "fixed", "world", "a"), ("f2", "fixed", "a", "b"), ("f3", "fixed", "b", "world")])
    msg = _load_error(tmp_path, text)
    assert "joint 'f" in msg and "fixed" in msg


def test_toml_unknown_key(tmp_path):
    text = _toml(["a"], [("j1", "revolute", "world", "a")]).replace('child = "a"\n', 'child = "a"\naxsi = [0, 0, 1]\n')
    msg = _load_error(tmp_path, text)
    assert "joint #1 'j1'" in msg and "axsi" in msg and "unknown key" in msg


def test_toml_unknown_top_level_key(tmp_path):
    msg = _load_error(tmp_path, "nmae = 'x'\n" + CHAIN)
    assert "top level" in msg and "nmae" in msg


def test_toml_syntax_error(tmp_path):
    msg = _load_error(tmp_path, CHAIN + "\n[[joint]\nname = 'x'\n")
    assert "TOML syntax error" in msg and "line" in msg


def test_missing_file(tmp_path):
    path = tmp_path / "nope.toml"
    with pytest.raises(jm.ModelError) as e:
        jm.load(path)
    assert str(path) in str(e.value) and "not found" in str(e.value)


def test_unknown_parent_body(tmp_path):
    msg = _load_error(tmp_path, _toml(["a"], [("j1", "revolute", "wrold", "a")]))
    assert "joint 'j1'" in msg and "wrold" in msg


def test_builder_errors_without_file():
    g = Graph()
    g.add_body("a", 1.0, inertia=[1, 1, 1])
    with pytest.raises(jm.ModelError, match="body 'a'.*duplicate"):
        g.add_body("a")
    with pytest.raises(jm.ModelError, match="joint 'j'.*unknown joint type 'ball'"):
        g.add_joint("j", "ball", "world", "a")
    with pytest.raises(jm.ModelError, match="inertia must be positive definite"):
        g.add_body("m", 1.0)
    with pytest.raises(jm.ModelError, match="triangle"):
        g.add_body("t", 1.0, inertia=[1.0, 1.0, 3.0])
    # a small real body (a 1 g, 2 mm sensor) is not "zero inertia"
    small = g.add_body("sensor", 1e-3, inertia=[4e-10, 4e-10, 4e-10])
    assert small.inertia[0, 0] == 4e-10


# ----------------------------------------------------------------------------- cut selection


def _graph(n_bodies, joints, actuated=(), cut=None, types=None):
    """Build a graph from (parent, child) index pairs (-1 = world)."""
    g = Graph(name="g")
    names = [f"b{i}" for i in range(n_bodies)]
    for n in names:
        g.add_body(n, 1.0, inertia=[0.1, 0.1, 0.1])
    for k, (p, c) in enumerate(joints):
        pn = "world" if p < 0 else names[p]
        cn = "world" if c < 0 else names[c]
        jt = (types or {}).get(k, "revolute")
        g.add_joint(
            f"j{k}",
            jt,
            pn,
            cn,
            parent_pose=jm.pose([0.1 * k, 0.0, 0.0]),
            actuated=k in actuated,
            cut=(cut or {}).get(k),
        )
    return g


def _check_tree(g: Graph, mech):
    """Spanning tree: one tree joint per moving body, parents precede children, every body
    reaches the world, cut count = joints - bodies(with world) + 1, tree + cuts = all joints."""
    t = mech.topo
    nb = len(g.bodies) - 1
    assert len(t.joint_names) == nb == mech.nb
    assert sorted(t.body_names) == sorted(b for b in g.bodies if b != "world")
    assert len(t.cut_names) == len(g.joints) - len(g.bodies) + 1
    assert sorted(t.joint_names + t.cut_names) == sorted(g.joints)
    for i in range(nb):
        assert t.parent[i] < i  # parents first (DFS order), world = -1
        k, steps = i, 0
        while k >= 0:
            k, steps = t.parent[k], steps + 1
        assert steps == t.depth[i] + 1
    # every tree joint really connects its body to its parent in the graph
    for i, jn in enumerate(t.joint_names):
        j = g.joints[jn]
        par = "world" if t.parent[i] < 0 else t.body_names[t.parent[i]]
        assert {j.parent, j.child} == {par, t.body_names[i]}


GRAPHS = {
    # two independent four-bars hanging from the world
    "two_loops": (6, [(-1, 0), (0, 1), (1, 2), (-1, 2), (-1, 3), (3, 4), (4, 5), (-1, 5)]),
    # two loops sharing bodies 1 and 2 (a six-bar / Watt chain)
    "shared": (5, [(-1, 0), (0, 1), (1, 2), (2, -1), (1, 3), (3, 4), (4, 2)]),
    # nested: a loop inside a loop plus a loop closing to the world through a long branch
    "nested": (7, [(-1, 0), (0, 1), (1, 2), (2, 3), (3, -1), (1, 4), (4, 2), (0, 5), (5, 6), (6, 3), (2, 5)]),
    # a complete graph K5 on world + 4 bodies: 6 independent loops
    "complete": (4, [(a, b) for a, b in itertools.combinations(range(-1, 4), 2)]),
    "tree_only": (3, [(-1, 0), (0, 1), (0, 2)]),
}


@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_automatic_cuts_span(name):
    nb, joints = GRAPHS[name]
    g = _graph(nb, joints)
    _check_tree(g, jm.compile(g))


@pytest.mark.parametrize("name", ["two_loops", "shared", "nested", "complete"])
def test_actuated_joints_stay_in_tree(name):
    nb, joints = GRAPHS[name]
    rng = np.random.default_rng(len(joints))
    for _ in range(4):
        # any set of actuated joints that is itself a forest can stay in the tree
        act = set()
        for k in rng.permutation(len(joints)):
            if _is_forest([joints[i] for i in act | {int(k)}]) and len(act) < 3:
                act.add(int(k))
        g = _graph(nb, joints, actuated=act)
        mech = jm.compile(g)
        _check_tree(g, mech)
        for k in act:
            assert f"j{k}" in mech.topo.joint_names
        assert set(mech.topo.actuated) == {f"j{k}" for k in act}


def _is_forest(edges) -> bool:
    parent = {}

    def find(x):
        while parent.get(x, x) != x:
            x = parent[x]
        return x

    for a, b in edges:
        ra, rb = find(a), find(b)
        if ra == rb:
            return False
        parent[ra] = rb
    return True


@pytest.mark.parametrize("name", ["two_loops", "shared", "nested", "complete"])
def test_pinned_cuts_and_tree_joints(name):
    nb, joints = GRAPHS[name]
    g = _graph(nb, joints)
    auto = jm.compile(g)
    # pin a current tree joint as a cut, via the compile argument and via the joint flag
    victim = next(j for j in auto.topo.joint_names if _still_connected(joints, int(j[1:])))
    for how in ("arg", "flag"):
        if how == "arg":
            mech = jm.compile(g, cuts=[victim])
        else:
            g2 = _graph(nb, joints, cut={int(victim[1:]): True})
            mech = jm.compile(g2)
        assert victim in mech.topo.cut_names
        _check_tree(g, mech)
    # pin a current cut into the tree
    keep = auto.topo.cut_names[0]
    for how in ("arg", "flag"):
        mech = (
            jm.compile(g, tree=[keep]) if how == "arg" else jm.compile(_graph(nb, joints, cut={int(keep[1:]): False}))
        )
        assert keep in mech.topo.joint_names
        _check_tree(g, mech)


def _still_connected(joints, drop: int) -> bool:
    adj = {}
    for k, (a, b) in enumerate(joints):
        if k != drop:
            adj.setdefault(a, []).append(b)
            adj.setdefault(b, []).append(a)
    seen, todo = {-1}, [-1]
    while todo:
        for y in adj.get(todo.pop(), []):
            if y not in seen:
                seen.add(y)
                todo.append(y)
    return len(seen) == len({x for e in joints for x in e})


def test_spherical_joints_are_cut_first():
    """A loop of revolutes with one spherical joint: the spherical joint becomes the cut
    (3 rows instead of 5)."""
    nb, joints = 3, [(-1, 0), (0, 1), (1, 2), (2, -1)]
    g = _graph(nb, joints, types={1: "spherical"})
    mech = jm.compile(g)
    assert mech.topo.cut_names == ("j1",)
    assert mech.topo.loop_types == ("point",) and mech.n_rows == 3


def test_impossible_pins():
    nb, joints = GRAPHS["two_loops"]
    g = _graph(nb, joints)
    with pytest.raises(jm.ModelError, match="j3.*closes a loop"):
        jm.compile(g, tree=["j0", "j1", "j2", "j3"])  # closes the first loop
    with pytest.raises(jm.ModelError, match="nope"):
        jm.compile(g, cuts=["nope"])
    with pytest.raises(jm.ModelError, match="disconnected|not connected"):
        jm.compile(g, cuts=["j0", "j3"])  # cuts body b0..b2 off the world
    g.add_coupling("c", {"j1": 1.0, "j5": -1.0})
    with pytest.raises(jm.ModelError, match="j1"):
        jm.compile(g, cuts=["j1"])  # coupled joints need their coordinate


def test_free_joint_cannot_close_a_loop():
    g = _graph(2, [(-1, 0), (0, 1), (1, -1)], types={0: "free", 1: "free", 2: "free"})
    with pytest.raises(jm.ModelError, match="free joint cannot close a loop"):
        jm.compile(g)
