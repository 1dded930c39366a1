"""Closure residuals and analytic Jacobians.

Reference: ``jax.jacfwd`` of the residual along ``integrate`` (``closure_jacobian_autodiff`` /
``check_jacobian``), on a "zoo" mechanism with every constraint type: cut joints of each kind
(loops through spherical and free joints, through the world, reversed tree joints) and explicit
constraints (point, weld, revolute, cylindrical, universal, prismatic, pose on a subset of axes,
distance, coupling) whose loops nest and share bodies. Also cycle-local evaluation
(``loops=``), block sparsity, and jit(vmap) over 8,192 states.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _shared import load, normal, random_configurations

import jaxmech as jm
from jaxmech import lie

RNG = np.random.default_rng(11)
TYPES = ("point", "weld", "revolute", "cylindrical", "universal", "prismatic", "pose", "distance", "coupling")


def _rp(scale=0.2):
    return jm.pose(RNG.normal(size=3) * scale, rpy=RNG.normal(size=3) * 0.5)


def _unit():
    a = RNG.normal(size=3)
    return a / np.linalg.norm(a)


def _tree(g: jm.Graph) -> None:
    for b in "abcdefgh":
        g.add_body(b, 1.0, inertia=[0.1, 0.1, 0.1], frames={f"{b}_site": _rp()})
    g.add_joint("ja", "revolute", "world", "a", parent_pose=_rp(), child_pose=_rp(), axis=_unit(), q0=0.3)
    g.add_joint("jb", "spherical", "b", "a", parent_pose=_rp(), child_pose=_rp())  # reversed in the tree
    g.add_joint("jc", "prismatic", "b", "c", parent_pose=_rp(), child_pose=_rp(), axis=_unit(), q0=0.1)
    g.add_joint("jd", "universal", "world", "d", parent_pose=_rp(), child_pose=_rp(), axis=_unit(), axis2=_perp())
    g.add_joint("je", "cylindrical", "e", "d", parent_pose=_rp(), child_pose=_rp(), axis=_unit())  # reversed
    g.add_joint(
        "jf", "free", "world", "f", parent_pose=_rp(), child_pose=_rp(), q0=[0.3, -0.2, 0.4, 1.0, 0.0, 0.0, 0.0]
    )
    g.add_joint("jg", "revolute", "f", "g", parent_pose=_rp(), child_pose=_rp(), axis=_unit(), q0=-0.4)
    g.add_joint(
        "jh", "universal", "h", "e", parent_pose=_rp(), child_pose=_rp(), axis=_unit(), axis2=_perp()
    )  # reversed universal


def _perp():
    a = _unit()
    return np.cross(a, _unit())


# cut joints: (name, type, parent, child) -- pinned as cuts
CUTS = [
    ("cut_rev", "revolute", "c", "e"),  # loop through the spherical joint jb
    ("cut_uni", "universal", "g", "c"),  # loop through the free joint jf
    ("cut_pri", "prismatic", "h", "world"),  # loop through the world
    ("cut_cyl", "cylindrical", "h", "b"),  # shares bodies with cut_rev / cut_pri
    ("cut_sph", "spherical", "g", "e"),  # point cut
    ("cut_fix", "fixed", "c", "h"),  # weld cut
]
# explicit constraints: (name, type, frame/body a, frame/body b, extra)
CONS = [
    ("c_point", "point", "c_site", "g_site", {}),
    ("c_weld", "weld", "world", "g", {}),
    ("c_rev", "revolute", "a_site", "h_site", {}),
    ("c_cyl", "cylindrical", "e", "f_site", {}),
    ("c_uni", "universal", "d_site", "c", {}),
    ("c_pri", "prismatic", "world", "h_site", {}),
    ("c_pose", "pose", "e_site", "f", {"axes": (True, False, True, False, True, True)}),
    ("c_pose2", "pose", "b", "world", {"axes": (False, False, False, True, True, False)}),
    ("c_dist", "distance", "b_site", "h_site", {}),
]


def _zoo() -> jm.Mechanism:
    """Build the zoo with cut/constraint frames chosen so that every loop closes at q0 (the log
    rows then stay far from the pi ambiguity on the perturbed states below)."""
    g = jm.Graph(name="zoo")
    _tree(g)
    tree = jm.compile(g)
    Tb = np.asarray(jm.jit(jm.forward_kinematics)(tree, tree.q0))
    owner = g.frame_owner()

    def T(name):  # world pose of a body / site / the world at q0
        if name == "world":
            return np.eye(4)
        if name in owner:
            return Tb[tree.body_names.index(owner[name])] @ g.bodies[owner[name]].frames[name]
        return Tb[tree.body_names.index(name)]

    for name, t, p, c in CUTS:
        P = _rp()
        C = np.linalg.inv(T(c)) @ T(p) @ P  # joint frames coincide at q0
        kw = {"axis": _unit()} if t in ("revolute", "prismatic", "cylindrical") else {}
        if t == "universal":
            kw = {"axis": _unit(), "axis2": _perp()}
        g.add_joint(name, t, p, c, parent_pose=P, child_pose=C, cut=True, **kw)
    for name, t, a, b, kw in CONS:
        Pa = _rp()
        Pb = np.linalg.inv(T(b)) @ T(a) @ Pa
        if t == "distance":
            Pb = _rp()
            kw = dict(kw, length=float(np.linalg.norm((T(b) @ Pb)[:3, 3] - (T(a) @ Pa)[:3, 3])))
        g.add_constraint(name, t, a, b, pose_a=Pa, pose_b=Pb, **kw)
    g.add_coupling("c_coup", {"ja": 1.0, "jg": -0.5, "jc": 2.0}, offset=0.25)
    return jm.compile(g)


@pytest.fixture(scope="module")
def zoo():
    mech = _zoo()
    both = jm.jit(lambda m, q: (jm.closure_residual_and_jacobian(m, q), jm.closure_jacobian_autodiff(m, q)))
    vs = normal(0, (12, mech.nv)) * jnp.asarray([0.3, 0.6, 1.0] * 4)[:, None]
    qs = [mech.q0] + [jm.integrate(mech, mech.q0, v) for v in vs]
    qs += list(random_configurations(mech, 4, 1))
    evals = [both(mech, q) for q in qs]
    return dict(mech=mech, qs=qs, evals=evals, both=both)


def test_zoo_structure(zoo):
    mech = zoo["mech"]
    t = mech.topo
    assert set(t.cut_names) == {c[0] for c in CUTS}
    assert set(t.joint_types) >= {"revolute", "spherical", "prismatic", "universal", "cylindrical", "free"}
    assert any(t.joint_reversed)
    types = dict(zip(t.loop_names, t.loop_types, strict=True))
    assert types["cut_fix"] == "weld" and types["cut_sph"] == "point"
    assert {ty for ty in t.loop_types} | {"coupling"} == set(TYPES)
    # rows per element type
    expect = {"point": 3, "weld": 6, "revolute": 5, "cylindrical": 4, "universal": 4, "prismatic": 5, "distance": 1}
    for n, ty in types.items():
        rows = [r for r in t.row_names if r.split(":")[0] == n]
        assert len(rows) == (expect[ty] if ty != "pose" else (4 if n == "c_pose" else 2)), n
    assert mech.n_rows == len(t.row_names)
    # the loops close at q0
    (r0, _), _ = zoo["evals"][0]
    np.testing.assert_allclose(np.asarray(r0)[: t.coupling_rows], 0.0, atol=1e-12)


@pytest.mark.parametrize("ctype", TYPES)
def test_analytic_jacobian_vs_autodiff(zoo, ctype):
    mech = zoo["mech"]
    t = mech.topo
    names = [n for n, ty in zip(t.loop_names, t.loop_types, strict=True) if ty == ctype]
    names += list(t.coupling_names) if ctype == "coupling" else []
    assert names
    rows = jm.closure_rows(mech, names)
    worst = 0.0
    for (r, Ja), Jd in zoo["evals"]:
        Ja, Jd = np.asarray(Ja)[rows], np.asarray(Jd)[rows]
        assert np.all(np.isfinite(Ja)) and np.all(np.isfinite(np.asarray(r)))
        rel = np.abs(Ja - Jd).max() / max(1.0, np.abs(Jd).max())
        worst = max(worst, rel)
    assert worst <= 1e-9, (ctype, worst)


def test_check_jacobian_api(configs_dir):
    four = jm.load(configs_dir / "four_bar.toml")
    check = jm.jit(jm.check_jacobian)
    for q in random_configurations(four, 3, 2, scale=3.0):
        out = check(four, q)
        assert float(out["max_rel"]) <= 1e-9


def test_residual_is_what_it_says(zoo):
    """Independent evaluation of a few rows from world frame poses (no closure code)."""
    mech = zoo["mech"]
    q = zoo["qs"][5]
    (r, _), _ = zoo["evals"][5]
    r = np.asarray(r)
    rn = mech.topo.row_names
    Tall = np.asarray(jm.jit(jm.forward_kinematics)(mech, q))
    T = lambda n: Tall[mech.body_names.index(n)]  # noqa: E731
    # distance: |p_b - p_a| - length, with the constraint frames = site frames @ extra poses
    k = list(mech.topo.loop_names).index("c_dist")
    pa = (T("b") @ np.asarray(mech.cut_pose_a[k]))[:3, 3]  # cut_pose_a = site pose @ extra offset
    pb = (T("h") @ np.asarray(mech.cut_pose_b[k]))[:3, 3]
    np.testing.assert_allclose(r[rn.index("c_dist:d")], np.linalg.norm(pb - pa) - float(mech.cut_length[k]), atol=1e-13)
    # point: p of Delta = R_a^T (p_b - p_a)
    k = list(mech.topo.loop_names).index("c_point")
    Ta = T("c") @ np.asarray(mech.cut_pose_a[k])
    Tb = T("g") @ np.asarray(mech.cut_pose_b[k])
    idx = [rn.index(f"c_point:{a}") for a in "xyz"]
    np.testing.assert_allclose(r[idx], Ta[:3, :3].T @ (Tb[:3, 3] - Ta[:3, 3]), atol=1e-13)
    # weld: Log(Ta^-1 Tb) against scipy's logm
    import scipy.linalg as sla

    k = list(mech.topo.loop_names).index("c_weld")
    Ta = np.asarray(mech.cut_pose_a[k])
    Tb = T("g") @ np.asarray(mech.cut_pose_b[k])
    L = np.real(sla.logm(np.linalg.inv(Ta) @ Tb))
    idx = [rn.index(f"c_weld:{a}") for a in ("rx", "ry", "rz", "x", "y", "z")]
    np.testing.assert_allclose(
        r[idx], np.concatenate([np.asarray(lie.vee(jnp.asarray(L[:3, :3]))), L[:3, 3]]), atol=1e-10
    )
    # coupling
    qq = np.asarray(q)
    val = qq[mech.q_slice("ja")][0] - 0.5 * qq[mech.q_slice("jg")][0] + 2.0 * qq[mech.q_slice("jc")][0] + 0.25
    np.testing.assert_allclose(r[rn.index("c_coup:c")], val, atol=1e-14)


def _loop_columns(mech: jm.Mechanism, name: str) -> set[int]:
    """Velocity columns a loop can depend on, from the tree alone: the joints on the two paths
    from the bodies' lowest common ancestor."""
    t = mech.topo
    a, b = t.loop_bodies[list(t.loop_names).index(name)]

    def chain(x):
        out = []
        while x >= 0:
            out.append(int(x))
            x = t.parent[x]
        return out

    ca, cb = chain(a), chain(b)
    path = set(ca) ^ set(cb)
    cols = set()
    for body in path:
        sl = mech.v_slice(t.joint_names[body])
        cols.update(range(sl.start, sl.stop))
    return cols


def test_block_sparsity(zoo):
    mech = zoo["mech"]
    for name in mech.topo.loop_names:
        rows = jm.closure_rows(mech, [name])
        outside = sorted(set(range(mech.nv)) - _loop_columns(mech, name))
        for (_, Ja), Jd in zoo["evals"][:6]:
            assert np.all(np.asarray(Ja)[np.ix_(rows, outside)] == 0.0), name
            assert np.abs(np.asarray(Jd)[np.ix_(rows, outside)]).max(initial=0.0) == 0.0, name
    # the coupling row touches exactly its joints
    rows = jm.closure_rows(mech, ["c_coup"])
    (_, Ja), _ = zoo["evals"][1]
    nz = set(np.nonzero(np.asarray(Ja)[rows[0]])[0])
    assert nz == {mech.v_slice(j).start for j in ("ja", "jg", "jc")}


SUBSETS = [
    ["cut_rev"],
    ["c_pose", "cut_sph"],
    ["c_coup"],
    ["c_dist", "c_weld", "cut_fix", "c_coup"],
    ["cut_pri", "cut_cyl", "c_rev", "c_pri", "c_uni"],
]


@pytest.mark.parametrize("subset", SUBSETS, ids=["+".join(s) for s in SUBSETS])
def test_cycle_local_evaluation(zoo, subset):
    mech = zoo["mech"]
    rows = jm.closure_rows(mech, subset)
    expect = sum(sum(1 for r in mech.topo.row_names if r.split(":")[0] == n) for n in subset)
    assert len(rows) == expect
    assert all(mech.topo.row_names[i].split(":")[0] in subset for i in rows)
    f = jm.jit(lambda m, q: (jm.closure_residual(m, q, loops=subset), jm.closure_jacobian(m, q, loops=subset)))
    for q, ((r, J), _) in list(zip(zoo["qs"], zoo["evals"], strict=True))[:4]:
        rs, Js = f(mech, q)
        assert rs.shape == (len(rows),) and Js.shape == (len(rows), mech.nv)
        # a different XLA program from the full evaluation: XLA fuses (and may contract a*b+c into
        # one rounding) per program, so the rows agree to an ulp, not bit for bit; the old
        # written-out frame products also differed by an ulp once fused another way (session 37)
        np.testing.assert_allclose(np.asarray(rs), np.asarray(r)[rows], atol=1e-15, rtol=0)
        np.testing.assert_allclose(np.asarray(Js), np.asarray(J)[rows], atol=1e-15, rtol=0)


def test_unknown_loop_name(zoo):
    with pytest.raises(KeyError, match="nope"):
        jm.closure_residual(zoo["mech"], zoo["qs"][0], loops=["nope"])


@pytest.mark.parametrize("n", [256, pytest.param(8192, marks=pytest.mark.slow)])
def test_batched_jit_vmap(zoo, n):
    mech = zoo["mech"]
    qs = random_configurations(mech, n, 3)  # numpy draws: no threefry program for the zoo (2 s)
    f = jm.jit(jax.vmap(jm.closure_residual_and_jacobian, in_axes=(None, 0)))
    r, J = f(mech, qs)
    assert r.shape == (n, mech.n_rows) and J.shape == (n, mech.n_rows, mech.nv)
    assert bool(jnp.all(jnp.isfinite(r))) and bool(jnp.all(jnp.isfinite(J)))
    # batched equals single
    (r1, J1), _ = zoo["both"](mech, qs[77])
    np.testing.assert_allclose(np.asarray(r[77]), np.asarray(r1), atol=1e-13)
    np.testing.assert_allclose(np.asarray(J[77]), np.asarray(J1), atol=1e-12)


@pytest.mark.slow  # the zoo's float32 program (~4 s); the float32 tier runs by default in tests/test_dynamics.py
def test_float32_runs(zoo):
    """The float32 tier: same shapes, finite, close to float64 at a closed state's neighbourhood."""
    mech = zoo["mech"]
    m32 = jax.tree_util.tree_map(lambda x: x.astype(jnp.float32) if hasattr(x, "dtype") else x, mech)
    q = zoo["qs"][1]
    r32, J32 = jm.jit(jm.closure_residual_and_jacobian)(m32, q.astype(jnp.float32))
    (r, J), _ = zoo["evals"][1]
    assert r32.dtype == jnp.float32 and J32.dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(r32), np.asarray(r), atol=1e-4)
    np.testing.assert_allclose(np.asarray(J32), np.asarray(J), atol=1e-4)


@pytest.mark.parametrize(
    "which", [*(pytest.param(w, marks=pytest.mark.slow) for w in ("zoo", "excavator", "stewart_graph")), "four_bar"]
)
def test_world_pass_terms_match_the_public_rows_and_autodiff(which, request):
    """The forward dynamics' ``C`` and ``gamma`` (curvature.closure_terms_world, on the pass it
    shares with M and h) against the public closure Jacobian, assembly's defected rows at lam = 1,
    and the curvature by forward-mode differentiation of ``C(q (+) v t) v`` (an independent
    derivation of gamma), on every row type of the zoo at random (infeasible) states. The zoo
    (every row type; two ~13 s compiles) runs in the slow tier, the excavator (revolute cuts, five
    loops) and the graph Stewart (spherical cuts, ~8 s) too; the four-bar (a revolute cut) in the
    default tier."""
    mech = request.getfixturevalue("zoo")["mech"] if which == "zoo" else load(which)
    from jaxmech.assembly import defect_at, defected_residual_and_jacobian
    from jaxmech.curvature import closure_bias_autodiff, closure_terms_world
    from jaxmech.dynamics import _World

    def world(q, v):
        w = _World(mech, q)
        V, Ab = w.motion(v)
        C, g = closure_terms_world(mech, w.R, w.p, w.cols, V, Ab)
        r, J = jm.closure_residual_and_jacobian(mech, q)
        return C, g, r, J, jm.closure_bias(mech, q, v)

    def reference(q, v):
        r, J = defected_residual_and_jacobian(mech, q, 1.0, defect_at(mech, q))
        return J, closure_bias_autodiff(mech, q, v), r

    Q = jax.vmap(jm.integrate, (None, None, 0))(mech, mech.q0, 0.7 * normal(7, (16, mech.nv)))
    V = normal(8, (16, mech.nv))
    Cw, gw, rw, Jw, gp = jm.jit(jax.vmap(world))(Q, V)
    Cl, gl, rl = jm.jit(jax.vmap(reference))(Q, V)
    scale = float(jnp.max(jnp.abs(Cl)))
    assert float(jnp.max(jnp.abs(Cw - Cl))) <= 1e-12 * scale
    assert float(jnp.max(jnp.abs(Jw - Cl))) <= 1e-12 * scale
    assert float(jnp.max(jnp.abs(rw - rl))) <= 1e-12 * max(1.0, float(jnp.max(jnp.abs(rl))))
    assert float(jnp.max(jnp.abs(gw - gl))) <= 1e-11 * float(jnp.max(jnp.abs(gl)))
    np.testing.assert_allclose(np.asarray(gp), np.asarray(gw), rtol=0, atol=1e-13 * float(jnp.max(jnp.abs(gw))))
