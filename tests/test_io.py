"""Loaders: MJCF (vs MuJoCo's own kinematics), URDF (vs Pinocchio), SDF (vs an independent
product-of-exponentials evaluation of the file's poses), CMG JSON, side-car TOML, bad input."""

from __future__ import annotations

import json
import warnings
import xml.etree.ElementTree as ET
from pathlib import Path

import jax
import jax.numpy as jnp
import mujoco
import numpy as np
import pytest
from _shared import random_configurations

import jaxmech as jm
from jaxmech.io import resolve_resource
from jaxmech.io.urdf import read_urdf

DATA = Path(__file__).parent / "data"
CONFIGS = Path(__file__).resolve().parents[1] / "configs"
STEWART_JSON = DATA / "stewart_physical_graph.json"  # copy of the RoboCompiler six-UPS graph (reference-robots)
ERD = "example-robot-data:"

fk = jm.jit(jm.forward_kinematics)
res_fn = jm.jit(jm.closure_residual)
resjac_fn = jm.jit(jm.closure_residual_and_jacobian)


def _unit_quats(m, qpos):
    for j in range(m.njnt):
        if m.jnt_type[j] in (0, 1):
            a = m.jnt_qposadr[j] + (3 if m.jnt_type[j] == 0 else 0)
            qpos[a : a + 4] /= np.linalg.norm(qpos[a : a + 4])
    return qpos


# ----------------------------------------------------------------------------- MJCF


@pytest.fixture(scope="module")
def features():
    path = DATA / "mjcf_features.xml"
    spec = mujoco.MjSpec.from_file(str(path))
    for g in spec.geoms:  # MuJoCo itself cannot load the missing mesh: replace it for the reference
        if g.type == mujoco.mjtGeom.mjGEOM_MESH:
            g.type = mujoco.mjtGeom.mjGEOM_SPHERE
            g.size = [0.01, 0, 0]
            g.meshname = ""
            g.density, g.mass = 0.0, 0.0
    for me in list(spec.meshes):
        spec.delete(me)
    m = spec.compile()
    return jm.load(path), m, mujoco.MjData(m)


def test_mjcf_sizes_q0_and_masses(features):
    mech, m, _ = features
    assert (mech.nq, mech.nv) == (m.nq, m.nv)
    np.testing.assert_array_equal(np.array(mech.q0), m.qpos0)  # q0 is qpos0 (ref=0.3, -0.2, 0.7 included)
    for b in range(1, m.nbody):
        i = mech.body_names.index(mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_BODY, b))
        assert float(mech.mass[i]) == pytest.approx(m.body_mass[b], abs=1e-15)
    assert float(mech.mass.sum()) == pytest.approx(m.body_mass.sum(), abs=1e-12)
    # q layout equals qpos layout joint by joint
    for j in range(m.njnt):
        sl = mech.q_slice(mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_JOINT, j))
        assert sl.start == m.jnt_qposadr[j]
    assert np.allclose(np.array(mech.gravity), m.opt.gravity)
    assert set(mech.topo.actuated) == {"h", "j1"}
    assert mech.topo.port_names == ("actuator0", "m1")
    assert float(mech.port_gear[0]) == 3.0
    assert float(mech.armature[mech.v_slice("j1")][0]) == pytest.approx(0.01)  # class default
    assert float(mech.damping[mech.v_slice("j3")][0]) == pytest.approx(0.1)


def test_mjcf_kinematics_match_mujoco(features):
    mech, m, d = features
    rng = np.random.default_rng(0)
    err = serr = 0.0
    for _ in range(30):
        qp = _unit_quats(m, m.qpos0 + rng.normal(size=m.nq))
        d.qpos[:] = qp
        mujoco.mj_kinematics(m, d)
        T = np.array(fk(mech, jnp.array(qp)))
        for b in range(1, m.nbody):
            i = mech.body_names.index(mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_BODY, b))
            err = max(err, np.abs(T[i][:3, 3] - d.xpos[b]).max(), np.abs(T[i][:3, :3] - d.xmat[b].reshape(3, 3)).max())
        for s in range(m.nsite):
            k = mech.topo.frame_names.index(mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_SITE, s))
            b = int(mech.topo.frame_body[k])
            Ts = (T[b] if b >= 0 else np.eye(4)) @ np.array(mech.frame_pose[k])
            serr = max(
                serr, np.abs(Ts[:3, 3] - d.site_xpos[s]).max(), np.abs(Ts[:3, :3] - d.site_xmat[s].reshape(3, 3)).max()
            )
    assert err < 1e-12 and serr < 1e-12


def test_mjcf_equalities_match_mujoco(features):
    """Connect/weld anchors on body2 are MuJoCo's (computed at qpos0): closed at qpos0, and the
    residuals equal MuJoCo's own constraint violation (efc_pos) at random states."""
    mech, m, d = features
    names = mech.topo.row_names
    r0 = np.array(res_fn(mech, mech.q0))
    for pre in ("body_connect:", "weld:"):
        assert np.abs(r0[[k for k, n in enumerate(names) if n.startswith(pre)]]).max() < 1e-12
    rng = np.random.default_rng(1)
    eq = mujoco.mjtConstraint.mjCNSTR_EQUALITY
    for _ in range(10):
        qp = _unit_quats(m, m.qpos0 + 0.3 * rng.normal(size=m.nq))
        d.qpos[:] = qp
        mujoco.mj_forward(m, d)
        r = np.array(res_fn(mech, jnp.array(qp)))
        for e, pre in ((0, "body_connect:"), (1, "site_connect:")):
            rows = np.nonzero((d.efc_type == eq) & (d.efc_id == e))[0]
            ours = r[[k for k, nm in enumerate(names) if nm.startswith(pre)]]
            assert np.linalg.norm(ours) == pytest.approx(np.linalg.norm(d.efc_pos[rows]), abs=1e-12)
        # weld: Log rows are not a point difference; compare the weld frames' origins instead
        li = mech.topo.loop_names.index("weld")
        (ba, bb), T = mech.topo.loop_bodies[li], np.array(fk(mech, jnp.array(qp)))
        pa = (T[ba] @ np.array(mech.cut_pose_a[li]))[:3, 3]
        pb = (T[bb] @ np.array(mech.cut_pose_b[li]))[:3, 3]
        rows = np.nonzero((d.efc_type == eq) & (d.efc_id == 2))[0]
        np.testing.assert_allclose(pa - pb, d.efc_pos[rows[:3]], atol=1e-12)
        # joint equality (linear polycoef): MuJoCo's own violation, sign included
        rows = np.nonzero((d.efc_type == eq) & (d.efc_id == 3))[0]
        assert r[names.index("jeq:c")] == pytest.approx(d.efc_pos[rows[0]], abs=1e-12)


BODIES = ("base", "a", "c", "other")


@jm.jit
def body_twists(mech, q, v):
    return jnp.stack([jm.frame_jacobian(mech, q, n, "local") @ v for n in BODIES])


def test_mujoco_velocity_converters(features):
    mech, m, d = features
    rng = np.random.default_rng(2)
    for _ in range(5):
        qp = _unit_quats(m, m.qpos0 + rng.normal(size=m.nq))
        qv = rng.normal(size=m.nv)
        d.qpos[:], d.qvel[:] = qp, qv
        mujoco.mj_forward(m, d)
        v = jm.mujoco_qvel_to_v(mech, jnp.array(qp), jnp.array(qv))
        np.testing.assert_allclose(np.array(jm.v_to_mujoco_qvel(mech, jnp.array(qp), v)), qv, atol=1e-14)
        twists = np.array(body_twists(mech, jnp.array(qp), v))
        for k, bn in enumerate(BODIES):
            bid = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, bn)
            out = np.zeros(6)
            mujoco.mj_objectVelocity(m, d, mujoco.mjtObj.mjOBJ_XBODY, bid, out, 1)  # body frame (rot, lin)
            np.testing.assert_allclose(twists[k], out, atol=1e-12)


def test_mjcf_config_files_are_closed_at_qpos0():
    for name in ("four_bar", "stewart"):
        mech = jm.load(CONFIGS / f"{name}.xml")
        m = mujoco.MjModel.from_xml_path(str(CONFIGS / f"{name}.xml"))
        np.testing.assert_array_equal(np.array(mech.q0), m.qpos0)
        assert np.abs(np.array(res_fn(mech, jnp.array(m.qpos0)))).max() <= 1e-12
        d = mujoco.MjData(m)
        mujoco.mj_forward(m, d)
        assert np.abs(d.efc_pos[d.efc_type == mujoco.mjtConstraint.mjCNSTR_EQUALITY]).max() <= 1e-12


def _rank(mech, q):
    r, J = resjac_fn(mech, q)
    s = np.linalg.svd(np.array(J), compute_uv=False)
    return int((s > 1e-9 * s[0]).sum())


def test_mjcf_configs_reproduce_toml_versions():
    """four_bar.xml / stewart.xml (<connect>) vs the TOML versions: same kinematics, same point
    rows (stewart: all 18; four-bar: the x, y, z rows of the TOML's revolute cut) and rank."""
    for name, rows in (("four_bar", ("rocker_ground:x", "rocker_ground:y", "rocker_ground:z")), ("stewart", None)):
        mt, mx = jm.load(CONFIGS / f"{name}.toml"), jm.load(CONFIGS / f"{name}.xml")
        assert (mt.nq, mt.nv) == (mx.nq, mx.nv)
        moving = [n for n, t in zip(mt.joint_names, mt.topo.joint_types, strict=True) if t != "fixed"]
        assert moving == [n for n, t in zip(mx.joint_names, mx.topo.joint_types, strict=True) if t != "fixed"]
        rows = rows or mt.topo.row_names
        assert len(mx.topo.row_names) == len(rows)
        for q in random_configurations(mt, 3, 3, scale=0.3):
            (rt, Jt), (rx, Jx) = resjac_fn(mt, q), resjac_fn(mx, q)
            idx = [mt.topo.row_names.index(n) for n in rows]
            np.testing.assert_allclose(np.array(rx), np.array(rt)[idx], atol=1e-12)
            np.testing.assert_allclose(np.array(Jx), np.array(Jt)[idx], atol=1e-12)
            assert _rank(mt, q) == _rank(mx, q)
        assert _rank(mt, mt.q0 if name == "stewart" else mx.q0) == _rank(mx, mx.q0)


# ----------------------------------------------------------------------------- URDF vs Pinocchio


def _pin_compare(mech, path, floating, n=100):
    import pinocchio as pin

    model = (
        pin.buildModelFromUrdf(str(path), pin.JointModelFreeFlyer()) if floating else pin.buildModelFromUrdf(str(path))
    )
    data = model.createData()
    assert (mech.nq, mech.nv) == (model.nq, model.nv)
    # Pinocchio's total mass leaves out links welded to the universe; compare the moving mass
    # and, separately, the universe's merged inertia.
    fixed_mass = sum(float(mech.mass[i]) for i in range(len(mech.body_names)) if _welded(mech, i))
    assert float(mech.mass.sum()) - fixed_mass == pytest.approx(pin.computeTotalMass(model), abs=1e-12)
    assert fixed_mass == pytest.approx(model.inertias[0].mass, abs=1e-12)
    qs = random_configurations(mech, n, 0)
    Ts = np.array(jax.vmap(fk, in_axes=(None, 0))(mech, qs))
    links = [f.name for f in model.frames if f.type == pin.FrameType.BODY]
    assert set(links) <= set(mech.body_names)
    err = 0.0
    for k in range(n):
        q = np.array(qs[k])
        qp = np.zeros(model.nq)
        for j in range(1, model.njoints):
            sl = mech.q_slice(model.names[j])
            a = model.idx_qs[j]
            if model.nqs[j] == 7:  # free flyer: (x, y, z, qx, qy, qz, qw)
                qp[a : a + 7] = np.concatenate([q[sl][:3], q[sl][4:], q[sl][3:4]])
            else:
                qp[a : a + model.nqs[j]] = q[sl]
        pin.framesForwardKinematics(model, data, qp)
        for ln in links:
            M = data.oMf[model.getFrameId(ln, pin.FrameType.BODY)]
            T = Ts[k, mech.body_names.index(ln)]
            err = max(err, np.abs(T[:3, :3] - M.rotation).max(), np.abs(T[:3, 3] - M.translation).max())
    assert err < 1e-10, err
    return err


def _welded(mech, i):
    while i >= 0:
        if mech.topo.joint_types[i] != "fixed":
            return False
        i = int(mech.topo.parent[i])
    return True


def test_panda_urdf_matches_pinocchio():
    path = resolve_resource(ERD + "panda_description/urdf/panda.urdf")
    mech = jm.compile(read_urdf(path))
    _pin_compare(mech, path, floating=False)
    assert mech.topo.row_names == ("panda_finger_joint2__mimic:c",)  # mimic -> coupling
    q = jnp.array(mech.q0).at[mech.q_slice("panda_finger_joint1")].set(0.03)
    assert float(res_fn(mech, q)[0]) == pytest.approx(-0.03)  # q2 - 1.0 * q1 - 0
    lo, hi = np.array(mech.lower), np.array(mech.upper)
    sl = mech.q_slice("panda_joint4")
    assert (lo[sl][0], hi[sl][0]) == (-3.0718, -0.0698)


def test_go2_urdf_floating_matches_pinocchio():
    path = resolve_resource(ERD + "go2_description/urdf/go2.urdf")
    mech = jm.compile(read_urdf(path, floating=True))
    assert mech.joint_names[0] == "root_joint" and mech.topo.joint_types[0] == "free"
    _pin_compare(mech, path, floating=True)


def test_sidecar_tomls():
    import pinocchio as pin

    panda = jm.load(CONFIGS / "panda.toml")
    path = resolve_resource(ERD + "panda_description/urdf/panda.urdf")
    model = pin.buildModelFromUrdf(str(path))
    data = model.createData()
    q = random_configurations(panda, 1, 5)[0]
    qp = np.zeros(model.nq)
    for j in range(1, model.njoints):
        qp[model.idx_qs[j]] = float(q[panda.q_slice(model.names[j])][0])
    pin.framesForwardKinematics(model, data, qp)
    M = data.oMf[model.getFrameId("panda_hand_tcp")]  # the URDF's own TCP link = our "tool" frame
    T = np.array(jm.frame_pose(panda, q, "tool"))
    np.testing.assert_allclose(T[:3, 3], M.translation, atol=1e-12)
    np.testing.assert_allclose(T[:3, :3], M.rotation, atol=1e-12)
    assert len(panda.topo.actuated) == 8
    go2 = jm.load(CONFIGS / "go2.toml")
    assert (go2.nq, go2.nv) == (19, 18) and {"FL_sole", "RR_foot_center"} <= set(go2.topo.frame_names)
    assert len(go2.topo.actuated_v) == 12


# ----------------------------------------------------------------------------- SDF (Cassie)


@pytest.fixture(scope="module")
def cassie():
    path = resolve_resource(ERD + "cassie_description/robots/cassie_v2.sdf")
    return jm.load(CONFIGS / "cassie.toml"), path


def _sdf_pose(text):
    from jaxmech.graph import pose

    a = np.array([float(x) for x in text.split()])
    return pose(a[:3], rpy=a[3:])


def test_cassie_sdf_structure(cassie):
    mech, path = cassie
    root = ET.parse(path).getroot()
    links = root.findall("model/link")
    joints = root.findall("model/joint")
    assert len(mech.body_names) == len(links) == 23
    assert mech.joint_names[0] == "root_joint" and mech.topo.joint_types[0] == "free"
    assert len(mech.topo.loop_names) == 4 and set(mech.topo.loop_types) == {"point"}
    assert set(mech.topo.loop_names) == {j.get("name") for j in joints if j.get("type") == "ball"}
    nball = sum(j.get("type") == "ball" for j in joints)
    assert (mech.nq, mech.nv) == (7 + len(joints) - nball, 6 + len(joints) - nball)
    total = sum(float(ln.find("inertial/mass").text) for ln in links)
    assert float(mech.mass.sum()) == pytest.approx(total, abs=1e-12)
    np.testing.assert_allclose(np.array(mech.q0[:7]), [0, 0, 1.01, 1, 0, 0, 0])
    assert np.abs(np.array(res_fn(mech, mech.q0))).max() < 1e-12  # the file's poses close its loops
    assert {"left_sole", "right_sole"} <= set(mech.topo.frame_names)


def test_cassie_tree_matches_product_of_exponentials(cassie):
    """World pose of every link at 100 random configurations against an independent evaluation:
    the space-frame product of exponentials built from the SDF's model-frame link poses and the
    joints' axes (joint frame = child link pose @ joint pose, axis in the joint frame)."""
    from scipy.spatial.transform import Rotation

    mech, path = cassie
    root = ET.parse(path).getroot()
    P0 = {ln.get("name"): _sdf_pose(ln.find("pose").text) for ln in root.findall("model/link")}
    screws = {}
    for j in root.findall("model/joint"):
        if j.get("type") != "revolute":
            continue
        pe = j.find("pose")
        J = P0[j.findtext("child")] @ (_sdf_pose(pe.text) if pe is not None else np.eye(4))
        w = J[:3, :3] @ np.array([float(x) for x in j.find("axis/xyz").text.split()])
        w /= np.linalg.norm(w)
        screws[j.get("name")] = (w, J[:3, 3])

    def exp_screw(w, p, th):
        T = np.eye(4)
        R = Rotation.from_rotvec(w * th).as_matrix()
        T[:3, :3], T[:3, 3] = R, p - R @ p
        return T

    qs = random_configurations(mech, 100, 7)
    Ts = np.array(jax.vmap(fk, in_axes=(None, 0))(mech, qs))
    t = mech.topo
    err = 0.0
    for k in range(100):
        q = np.array(qs[k])
        G = {}
        for i, bn in enumerate(mech.body_names):  # parents come first
            jn = mech.joint_names[i]
            if t.joint_types[i] == "free":
                w, x, y, z = q[3:7]
                Tf = np.eye(4)
                Tf[:3, :3] = Rotation.from_quat([x, y, z, w]).as_matrix()
                Tf[:3, 3] = q[:3]
                G[i] = Tf @ np.linalg.inv(P0[bn])
            else:
                w, p = screws[jn]
                th = q[mech.q_slice(jn)][0]
                G[i] = G[int(t.parent[i])] @ exp_screw(w, p, -th if t.joint_reversed[i] else th)
            err = max(err, np.abs(G[i] @ P0[bn] - Ts[k, i]).max())
    assert err < 1e-10, err


@pytest.mark.slow  # ~3 s; `jaxmech info` runs by default on the four-bar and the Stewart (tests/test_cli.py)
def test_cassie_info_cli(cassie, monkeypatch):
    from typer.testing import CliRunner

    from jaxmech import cli

    # rich reads COLUMNS when the module-level console is made (at the first import of the CLI,
    # maybe by another test in this process): widen it so joint names are not wrapped.
    monkeypatch.setattr(cli.console, "width", 200)
    out = CliRunner().invoke(cli.app, ["info", str(CONFIGS / "cassie.toml")], env={"COLUMNS": "200"})
    assert out.exit_code == 0, out.output
    for word in ("root_joint", "free", "left-plantar-foot-joint", "right-pitch-rod-joint", "point"):
        assert word in out.output


# ----------------------------------------------------------------------------- CMG JSON


def _feasible(mech, q, fixed=()):
    q = jnp.array(q)
    free = [i for i in range(mech.nv) if i not in fixed]
    for _ in range(40):
        r, J = resjac_fn(mech, q)
        dv = np.zeros(mech.nv)
        dv[free] = -np.linalg.lstsq(np.array(J)[:, free], np.array(r), rcond=None)[0]
        q = jm.integrate(mech, q, jnp.array(dv))
    return q


def test_stewart_json_loads_with_5_loops_mobility_6():
    mech = jm.load(STEWART_JSON)
    assert len(mech.body_names) == 20 and len(mech.topo.loop_names) == 5  # 21 bodies with the world
    assert len(mech.joint_names) + len(mech.topo.cut_names) == 25
    q = _feasible(mech, mech.q0)
    assert np.abs(np.array(res_fn(mech, q))).max() < 1e-12
    assert mech.nv - _rank(mech, q) == 6
    assert len(mech.topo.actuated_v) == 6 and mech.topo.port_names[0] == "leg_0_length"


def _write(tmp_path, name, data):
    p = tmp_path / name
    p.write_text(json.dumps(data))
    return p


def test_cmg_variants(tmp_path):
    src = json.loads((DATA / "cmg_variants.json").read_text())
    mech = jm.load(DATA / "cmg_variants.json")
    t = mech.topo
    assert mech.joint_names[0] == "floating_root" and t.joint_types[0] == "free"
    assert set(t.loop_names) == {"tip_pin", "wrist_u"} and "arm_mimic" in t.coupling_names
    assert {"foot", "sole"} <= set(t.frame_names)
    assert float(mech.q0[mech.q_slice("shoulder")][0]) == 0.4  # seed
    assert float(mech.armature[mech.v_slice("shoulder")][0]) == 0.02
    assert float(mech.port_gear[t.port_names.index("shoulder")]) == 50.0
    np.testing.assert_allclose(np.array(mech.gravity), src["gravity_m_s2"])
    # mimic: elbow = 0.5 shoulder + 0.1
    q = mech.q0.at[mech.q_slice("shoulder")].set(0.2).at[mech.q_slice("elbow")].set(0.2)
    assert float(res_fn(mech, q)[t.row_names.index("arm_mimic:c")]) == pytest.approx(0.2 - 0.5 * 0.2 - 0.1)


def test_cmg_universal_cut_semantics(tmp_path):
    """A universal loop cut: frame 2 = frame 1 Rx(a) Ry(b) closes it; a twist about z does not."""
    from scipy.spatial.transform import Rotation

    R1 = Rotation.from_euler("xyz", [0.3, -0.2, 0.5]).as_matrix()
    data = {
        "schema": "cmg.physical-joint-graph/1.0",
        "id": "u",
        "ground": "base",
        "bodies": [{"id": "b", "mass_kg": 1.0, "com_m": [0, 0, 0], "inertia_com_kg_m2": np.eye(3).tolist()}],
        "joints": [
            {
                "id": "ball",
                "type": "spherical",
                "body_a": "base",
                "body_b": "b",
                "T_AJ": np.eye(4).tolist(),
                "T_BJ": np.eye(4).tolist(),
            }
        ],
        "loop_cuts": [
            {
                "id": "u",
                "type": "universal",
                "body1": "base",
                "body2": "b",
                "point1_m": [0, 0, 0],
                "point2_m": [0, 0, 0],
                "frame1_R": R1.tolist(),
                "frame2_R": R1.tolist(),
            }
        ],
    }
    mech = jm.load(_write(tmp_path, "u.json", data))

    def at(R):
        x, y, z, w = Rotation.from_matrix(R).as_quat()
        return np.array(res_fn(mech, jnp.array([w, x, y, z])))

    Rx = Rotation.from_euler("x", 0.7).as_matrix()
    Ry = Rotation.from_euler("y", -0.4).as_matrix()
    assert np.abs(at(R1 @ Rx @ Ry @ R1.T)).max() < 1e-14
    assert np.abs(at(R1 @ Rotation.from_euler("z", 0.3).as_matrix() @ R1.T)).max() > 0.1


# ----------------------------------------------------------------------------- bad input


def test_bad_input_errors(tmp_path):
    cases = []
    bad_xml = tmp_path / "bad.xml"
    bad_xml.write_text("<mujoco><worldbody><body></mujoco>")
    cases.append((bad_xml, "bad.xml"))
    bad_urdf = tmp_path / "bad.urdf"
    bad_urdf.write_text("<robot name='r'><link name='a'></robot")
    cases.append((bad_urdf, "malformed XML"))
    planar = tmp_path / "planar.urdf"
    planar.write_text(
        "<robot name='r'><link name='a'/><link name='b'/><joint name='p' type='planar'>"
        "<parent link='a'/><child link='b'/></joint></robot>"
    )
    cases.append((planar, "joint 'p': unsupported URDF joint type 'planar'"))
    screw = tmp_path / "screw.sdf"
    screw.write_text(
        "<sdf version='1.7'><model name='m'><link name='a'/><link name='b'/>"
        "<joint name='sj' type='screw'><parent>a</parent><child>b</child></joint></model></sdf>"
    )
    cases.append((screw, "joint 'sj': unsupported SDF joint type 'screw'"))
    bad_sdf = tmp_path / "bad.sdf"
    bad_sdf.write_text("<sdf><model name='m'><link name='a'></model>")
    cases.append((bad_sdf, "malformed XML"))
    eq = tmp_path / "eq.xml"
    eq.write_text(
        "<mujoco><worldbody><body name='a'><joint/><geom size='0.1'/></body></worldbody>"
        "<equality><connect body1='a' body2='nobody' anchor='0 0 0'/></equality></mujoco>"
    )
    cases.append((eq, "nobody"))
    cases.append((tmp_path / "missing.urdf", "missing.urdf: file not found"))
    tree = _write(tmp_path, "tree.json", {"joints": [], "bodies": [], "tree": {"parent": {}}})
    cases.append((tree, "pre-computed tree"))
    helical = _write(
        tmp_path,
        "hel.json",
        {
            "bodies": [{"id": "b", "mass_kg": 1, "inertia_kg_m2": np.eye(3).tolist()}],
            "joints": [{"id": "h", "type": "helical", "body_a": "world", "body_b": "b"}],
        },
    )
    cases.append((helical, "joint #1 'h': unknown joint type 'helical'"))
    sidecar = tmp_path / "side.toml"
    sidecar.write_text('urdf = "example-robot-data:no_such_robot/robot.urdf"\n')
    cases.append((sidecar, "no file 'no_such_robot/robot.urdf'"))
    for path, msg in cases:
        with pytest.raises(jm.ModelError, match=None) as e:
            jm.load(path)
        assert msg in str(e.value), (path, str(e.value))
        assert path.name in str(e.value) or "no file" in msg


def test_missing_mesh_is_ignored():
    with pytest.warns(UserWarning, match="mesh geometry ignored"):
        mech = jm.load(DATA / "mjcf_features.xml")  # references this_mesh_does_not_exist.stl
    assert "other" in mech.body_names


# ----------------------------------------------------------------------------- loop_joint URDF, SDF 1.7


def test_urdf_loop_joint_matches_toml_four_bar():
    a, b = jm.load(DATA / "four_bar_loop.urdf"), jm.load(CONFIGS / "four_bar.toml")
    assert a.topo.loop_names == ("rocker_ground",) and a.topo.row_names == b.topo.row_names
    for q in random_configurations(b, 3, 0):
        np.testing.assert_allclose(np.array(res_fn(a, q)), np.array(res_fn(b, q)), atol=1e-14)


def test_sdf17_frames_relative_to_and_expressed_in():
    from scipy.spatial.transform import Rotation

    from jaxmech.graph import pose

    mech = jm.load(DATA / "frames17.sdf")
    assert mech.joint_names == ("mount", "hinge", "wrist") and mech.topo.free_q.size == 0
    sl = mech.q_slice("hinge")
    assert (float(mech.lower[sl][0]), float(mech.upper[sl][0])) == (-1.0, 2.0)
    base = pose([0, 0, 0.5], rpy=[0, 0, 0.3]) @ pose([0.1, 0, 0])
    arm0 = base @ pose([0.2, 0, 0], rpy=[0.4, 0, 0])
    pj = (base @ pose([0.2, 0.05, 0]))[:3, 3]
    k = mech.body_names.index("arm")
    np.testing.assert_allclose(np.array(mech.com[k]), [0.15, 0, 0], atol=1e-15)
    np.testing.assert_allclose(np.array(mech.inertia[k]), np.diag([0.01, 0.001, 0.01]), atol=1e-15)
    for th, al, be in ((0.0, 0.0, 0.0), (0.7, -0.3, 0.5), (-1.2, 0.9, -0.4)):
        q = jnp.array([th, al, be])
        S = pose(pj) @ pose(R=Rotation.from_euler("z", th).as_matrix()) @ pose(-pj)  # model-frame z axis
        arm = S @ arm0
        hand = arm @ pose([0.3, 0, 0]) @ pose(R=Rotation.from_euler("XY", [al, be]).as_matrix())
        T = np.array(fk(mech, q))
        np.testing.assert_allclose(T[k], arm, atol=1e-14)
        np.testing.assert_allclose(T[mech.body_names.index("hand")], hand, atol=1e-14)
        np.testing.assert_allclose(np.array(jm.frame_pose(mech, q, "tip")), arm @ pose([0.3, 0, 0]), atol=1e-14)


def test_load_reader_options():
    path = resolve_resource(ERD + "go2_description/urdf/go2.urdf")
    g = jm.read_graph(path, floating=True)
    assert g.joints["root_joint"].type == "free"
    with pytest.raises(jm.ModelError, match="do not apply to .toml"):
        jm.read_graph(CONFIGS / "four_bar.toml", floating=True)


def test_mujoco_testdata_model():
    """MuJoCo's own test model (defaults, classes, ball/free joints, weld, tendon and site
    actuators): same sizes, qpos0 and body poses as MuJoCo; its weld is closed at qpos0."""
    path = Path(mujoco.__file__).parent / "testdata" / "model.xml"
    assert path.exists(), f"{path}: MuJoCo's wheel ships its testdata"
    with pytest.warns(UserWarning, match="not a simple port|two-site tendons"):
        mech = jm.load(path)
    m = mujoco.MjModel.from_xml_path(str(path))
    d = mujoco.MjData(m)
    assert (mech.nq, mech.nv) == (m.nq, m.nv)
    np.testing.assert_array_equal(np.array(mech.q0), m.qpos0)
    rng = np.random.default_rng(4)
    for _ in range(3):
        qp = _unit_quats(m, m.qpos0 + rng.normal(size=m.nq))
        d.qpos[:] = qp
        mujoco.mj_kinematics(m, d)
        T = np.array(fk(mech, jnp.array(qp)))
        for b in range(1, m.nbody):
            i = mech.body_names.index(mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_BODY, b) or f"body{b}")
            np.testing.assert_allclose(T[i][:3, 3], d.xpos[b], atol=1e-12)
            np.testing.assert_allclose(T[i][:3, :3], d.xmat[b].reshape(3, 3), atol=1e-12)
    assert np.abs(np.array(res_fn(mech, mech.q0))).max() < 1e-12


def test_sdf16_use_parent_model_frame(tmp_path):
    from scipy.spatial.transform import Rotation

    from jaxmech.graph import pose

    p = tmp_path / "m16.sdf"
    p.write_text(
        "<sdf version='1.6'><model name='m16'>"
        "<link name='a'><pose>0 0 1 0 0 0.5</pose><inertial><mass>1</mass></inertial></link>"
        "<joint name='j' type='revolute'><parent>world</parent><child>a</child>"
        "<axis><xyz>1 0 0</xyz><use_parent_model_frame>true</use_parent_model_frame></axis></joint>"
        "<link name='b'><pose>0.3 0 1 0 0 0.5</pose><inertial><mass>1</mass></inertial></link>"
        "<joint name='k' type='revolute'><pose>0 0.1 0 0 0 0</pose><parent>a</parent><child>b</child>"
        "<axis><xyz>1 0 0</xyz></axis></joint></model></sdf>"
    )
    mech = jm.load(p)
    A0, B0 = pose([0, 0, 1], rpy=[0, 0, 0.5]), pose([0.3, 0, 1], rpy=[0, 0, 0.5])
    Rw = Rotation.from_euler("x", 0.4).as_matrix()  # model-frame x through the joint origin (0, 0, 1)
    S = pose([0, 0, 1]) @ pose(R=Rw) @ pose([0, 0, -1])
    Jb = B0 @ pose([0, 0.1, 0])  # joint k: in b's frame, axis = b's x (joint frame)
    Sb = Jb @ pose(R=Rotation.from_euler("x", -0.3).as_matrix()) @ np.linalg.inv(Jb)
    T = np.array(fk(mech, jnp.array([0.4, -0.3])))
    np.testing.assert_allclose(T[mech.body_names.index("a")], S @ A0, atol=1e-14)
    np.testing.assert_allclose(T[mech.body_names.index("b")], S @ Sb @ B0, atol=1e-14)


def test_sidecar_limits_replace_file_limits_and_q0_outside_limits_warns(tmp_path):
    """Cassie's SDF gives its foot joints limits that exclude the file's own reference pose: the
    compiler says so (file, joints, values), and a side-car [limits] table replaces them."""
    sdf = "example-robot-data:cassie_description/robots/cassie_v2.sdf"
    plain = tmp_path / "plain.toml"
    plain.write_text(f'sdf = "{sdf}"\n')
    with pytest.warns(
        UserWarning, match=r"plain.toml: reference position of loop joints outside their limits: .*'left-foot-op' 0 "
    ):
        jm.load(plain)
    fixed = tmp_path / "fixed.toml"
    joints = ["left-tarsus-crank-joint", "left-foot-op", "right-tarsus-crank-joint", "right-foot-op"]
    fixed.write_text(f'sdf = "{sdf}"\n[limits]\n' + "".join(f"{j} = [-inf, 0.5]\n" for j in joints))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        mech = jm.load(fixed)
    k = mech.joint_names.index("left-foot-op") + 6  # after the 7 q of the free root joint
    assert mech.lower[k] == -np.inf and mech.upper[k] == 0.5
    bad = tmp_path / "bad.toml"
    bad.write_text(f'sdf = "{sdf}"\n[limits]\nno-such-joint = [0, 1]\n')
    with pytest.raises(jm.ModelError, match="bad.toml.*limits.no-such-joint.*unknown joint"):
        jm.load(bad)
    bad.write_text(f'sdf = "{sdf}"\n[limits]\nleft-foot-op = [1, 0]\n')
    with pytest.raises(jm.ModelError, match="lower limit .* exceeds upper limit"):
        jm.load(bad)
