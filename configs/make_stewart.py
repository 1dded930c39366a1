"""Generate ``configs/stewart.toml`` and ``configs/stewart_graph.toml`` from the RoboCompiler
six-UPS Stewart platform graph (``cmg.physical-joint-graph/1.0``, the authors' file shipped as
``configs/stewart_physical_graph.json``; its format: ``configs/paper_robots.md``).

Joint model of the source file: ``T_B = T_A T_AJ M(axis, q) inv(T_BJ)``, which is jaxmech's
``T_child = T_parent parent_pose M(q) inv(child_pose)`` with ``parent_pose = T_AJ`` and
``child_pose = T_BJ``. Numbers (masses, inertias, joint frames, axes, limits) are copied verbatim;
rotations are written as unit quaternions (w, x, y, z).

Two variants are written:

* ``stewart.toml`` -- free-platform model: the platform hangs on a ``free`` joint from the world,
  each leg is world -> yoke (revolute u_x) -> barrel (revolute u_y) -> rod (prismatic, actuated)
  and the six rod -> platform spherical joints are pinned as cuts (6 x 3 = 18 point rows).
  nq = 7 + 18 = 25, nv = 24, mobility 24 - 18 = 6.
* ``stewart_graph.toml`` -- the graph as published: all 25 joints (no free joint, no pins); the
  compiler picks the spanning tree and the cuts (5 spherical cuts, 15 rows, 5 loops, mobility 6).

Both carry an EXACTLY closed ``q0`` at the nominal platform pose ``POSE`` below, computed
analytically: for leg i with base point b_i (the U-joint centre, translation of T_AJ of u_x),
U-joint frame R_i (rotation of that T_AJ) and platform point a_i (translation of T_BJ of cut_i),
the leg vector is ``d = p + R_p a_i - b_i``; the prismatic coordinate is ``|d|`` (the rod origin
carries the spherical centre and slides along the barrel z axis, which passes through b_i), and
the U angles solve ``Rx(alpha) Ry(beta) e_z = R_i^T d / |d|``: beta = asin(u_x),
alpha = atan2(-u_y, u_z). Spherical joints (graph variant) get the quaternion of
``inv(T_rod T_AJ) T_platform T_BJ``.

Run:  python configs/make_stewart.py [path/to/stewart_physical_graph.json]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
# A copy of the authors' file (configs/stewart_physical_graph.json) kept with the tests' data.
SOURCE = Path(__file__).resolve().parents[1] / "tests" / "data" / "stewart_physical_graph.json"
#: Nominal platform pose (world frame): position (m) and roll-pitch-yaw (rad, URDF order).
#: A generic pose near the home height 0.60 m, so q0 exercises every coordinate.
POSE_XYZ = (0.03, -0.02, 0.62)
POSE_RPY = (0.04, -0.03, 0.08)


def rpy_matrix(r, p, y):
    cr, sr, cp, sp, cy, sy = np.cos(r), np.sin(r), np.cos(p), np.sin(p), np.cos(y), np.sin(y)
    return np.array(
        [
            [cy * cp, cy * sp * sr - sy * cr, cy * sp * cr + sy * sr],
            [sy * cp, sy * sp * sr + cy * cr, sy * sp * cr - cy * sr],
            [-sp, cp * sr, cp * cr],
        ]
    )


def quat_of(R):
    """Unit quaternion (w, x, y, z), w >= 0, of a rotation matrix (Shepperd's method)."""
    R = np.asarray(R, dtype=float)
    tr = np.trace(R)
    if tr > 0:
        s = 2.0 * np.sqrt(1.0 + tr)
        q = [0.25 * s, (R[2, 1] - R[1, 2]) / s, (R[0, 2] - R[2, 0]) / s, (R[1, 0] - R[0, 1]) / s]
    else:
        i = int(np.argmax(np.diag(R)))
        j, k = (i + 1) % 3, (i + 2) % 3
        s = 2.0 * np.sqrt(1.0 + R[i, i] - R[j, j] - R[k, k])
        q = np.zeros(4)
        q[0] = (R[k, j] - R[j, k]) / s
        q[1 + i] = 0.25 * s
        q[1 + j] = (R[j, i] + R[i, j]) / s
        q[1 + k] = (R[k, i] + R[i, k]) / s
    q = np.asarray(q, dtype=float)
    q = q / np.linalg.norm(q)
    return q if q[0] >= 0 else -q


def quat_matrix(q):
    w, x, y, z = np.asarray(q, dtype=float) / np.linalg.norm(q)
    return np.array(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
            [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
            [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
        ]
    )


def rot(axis, a):
    c, s = np.cos(a), np.sin(a)
    if axis == "x":
        return np.array([[1, 0, 0], [0, c, -s], [0, s, c]])
    return np.array([[c, 0, s], [0, 1, 0], [-s, 0, c]])


def fmt(x) -> str:
    if isinstance(x, (list, tuple, np.ndarray)):
        return "[" + ", ".join(fmt(v) for v in x) + "]"
    if isinstance(x, (bool, np.bool_)):
        return "true" if x else "false"
    if isinstance(x, str):
        return f'"{x}"'
    v = float(x)
    return "0.0" if v == 0 else repr(v)


def placement(T, prefix):
    """TOML keys for a 4x4 placement (xyz and, if not identity, quat)."""
    T = np.asarray(T, dtype=float)
    out = []
    if np.any(T[:3, 3] != 0):
        out.append(f"{prefix}xyz = {fmt(T[:3, 3])}")
    if np.abs(T[:3, :3] - np.eye(3)).max() > 0:
        out.append(f"{prefix}quat = {fmt(quat_of(T[:3, :3]))}")
    return out


def as_written(T):
    """The placement exactly as the loader will rebuild it from the written quaternion."""
    T = np.asarray(T, dtype=float).copy()
    if np.abs(T[:3, :3] - np.eye(3)).max() > 0:
        R = quat_matrix(quat_of(T[:3, :3]))
        U, _, Vt = np.linalg.svd(R)  # the loader re-orthonormalizes (graph.Graph._pose)
        T[:3, :3] = U @ Vt
    return T


def nominal_q0(data):
    """Joint values {joint id: q0 list} closing every loop exactly at the nominal pose."""
    joints = {j["id"]: j for j in data["joints"]}
    Tp = np.eye(4)
    Tp[:3, :3] = quat_matrix(quat_of(rpy_matrix(*POSE_RPY)))
    Tp[:3, 3] = POSE_XYZ
    q0 = {}
    n_legs = sum(1 for j in joints if j.endswith("_u_x"))
    for i in range(n_legs):
        ux, uy, pr, cut = (
            joints[f"leg_{i}_{s}"] if s != "cut" else joints[f"cut_{i}"] for s in ("u_x", "u_y", "length", "cut")
        )
        assert ux["body_a"] == "world" and np.allclose(ux["axis"], [1, 0, 0]) and np.allclose(uy["axis"], [0, 1, 0])
        assert np.allclose(pr["axis"], [0, 0, 1]) and cut["body_b"] == "platform"
        for j in (uy, pr):  # the leg's inner placements are identities: the U centre is on the leg axis
            assert np.allclose(j["T_AJ"], np.eye(4)) and np.allclose(j["T_BJ"], np.eye(4))
        assert np.allclose(ux["T_BJ"], np.eye(4)) and np.allclose(cut["T_AJ"], np.eye(4))
        Tb = as_written(ux["T_AJ"])
        a_i = np.asarray(cut["T_BJ"], dtype=float)[:3, 3]
        d = Tp[:3, :3] @ a_i + Tp[:3, 3] - Tb[:3, 3]
        L = float(np.linalg.norm(d))
        u = Tb[:3, :3].T @ d / L
        beta = float(np.arcsin(u[0]))
        alpha = float(np.arctan2(-u[1], u[2]))
        q0[ux["id"]] = [alpha]
        q0[uy["id"]] = [beta]
        q0[pr["id"]] = [L]
        for jid, v in ((ux["id"], alpha), (uy["id"], beta), (pr["id"], L)):
            lim = joints[jid].get("limits")
            if lim and not lim["lower"] <= v <= lim["upper"]:
                raise SystemExit(f"nominal pose violates the limits of {jid}: {v} not in {lim}")
        R_rod = Tb[:3, :3] @ rot("x", alpha) @ rot("y", beta)
        q0[cut["id"]] = list(quat_of(R_rod.T @ Tp[:3, :3]))  # T_AJ, T_BJ rotations are identities
    q0["platform_free"] = list(Tp[:3, 3]) + list(quat_of(Tp[:3, :3]))
    return q0


def body_block(b, frames):
    I = np.asarray(b["inertia_kg_m2"], dtype=float)
    inertia = list(np.diag(I)) if np.allclose(I, np.diag(np.diag(I))) else I.tolist()
    out = [
        "[[body]]",
        f'name = "{b["id"]}"',
        f"mass = {fmt(b['mass_kg'])}",
        f"com = {fmt(b['com_m'])}",
        f"inertia = {fmt(inertia)}",
    ]
    if frames:
        items = ", ".join(f"{k} = {{ xyz = {fmt(v)} }}" for k, v in frames.items())
        out.append(f"frames = {{ {items} }}")
    return out


def joint_block(j, q0, actuated=False, cut=None, name=None):
    out = [
        "[[joint]]",
        f'name = "{name or j["id"]}"',
        f'type = "{j["type"]}"',
        f'parent = "{j["body_a"]}"',
        f'child = "{j["body_b"]}"',
    ]
    if "axis" in j and j["type"] in ("revolute", "prismatic"):
        out.append(f"axis = {fmt(j['axis'])}")
    out += placement(j.get("T_AJ", np.eye(4)), "parent_")
    out += placement(j.get("T_BJ", np.eye(4)), "child_")
    if j.get("limits"):
        out += [f"lower = {fmt(j['limits']['lower'])}", f"upper = {fmt(j['limits']['upper'])}"]
    if actuated:
        out.append("actuated = true")
    if cut is not None:
        out.append(f"cut = {fmt(cut)}")
    v = q0[j["id"]] if j["id"] in q0 else None
    if v is not None:
        out.append(f"q0 = {fmt(v[0]) if len(v) == 1 else fmt(v)}")
    return out


HEADER = """\
# {title}
# GENERATED by configs/make_stewart.py -- edit the generator, not this file.
# Numbers (masses, inertias, joint frames, axes, limits) copied from the RoboCompiler paper's
# six-UPS Stewart platform graph, the authors' file configs/stewart_physical_graph.json
# (schema cmg.physical-joint-graph/1.0, id stewart_6ups_physical); rotations of the joint frames
# written as unit quaternions (w, x, y, z). parent_* = T_AJ, child_* = T_BJ of the source.
# q0 is an exactly closed configuration at the nominal platform pose
#   position {xyz} m, roll-pitch-yaw {rpy} rad
# (leg lengths and U-joint angles solved in closed form by the generator).
{extra}"""


def write(data, path_free: Path, path_graph: Path) -> None:
    q0 = nominal_q0(data)
    bodies = [b for b in data["bodies"] if b["id"] != "world"]
    actuated = {a["joint_id"] for a in data["actuators"]}
    legs = sorted({j["id"].split("_")[1] for j in data["joints"] if j["id"].startswith("leg_")})

    def frames_of(b):
        bid = b["id"]
        if bid == "platform":
            return {"platform_center": [0.0, 0.0, 0.0]}
        if bid.startswith("leg_") and bid.endswith("_barrel"):
            return {f"leg_{bid.split('_')[1]}_base": [0.0, 0.0, 0.0]}
        if bid.startswith("leg_") and bid.endswith("_rod"):
            return {f"leg_{bid.split('_')[1]}_top": [0.0, 0.0, 0.0]}
        return {}

    def ports():
        out = []
        for i in legs:
            out += ["[[port]]", f'name = "leg_{i}"', 'type = "joint"', f'joint = "leg_{i}_length"', ""]
        return out

    g = data.get("gravity_m_s2", [0.0, 0.0, -9.81])
    for path, variant in ((path_free, "free"), (path_graph, "graph")):
        if variant == "free":
            title = "Six-UPS Stewart platform, free-platform model (platform on a free joint, 6 spherical cuts)."
            extra = (
                "# Tree: world -free-> platform -fixed-> payload; world -u_x-> yoke -u_y-> barrel -prismatic->\n"
                "# rod per leg. The rod->platform spherical joints are pinned as cuts: 18 point rows,\n"
                "# nq = 25, nv = 24, mobility 6 (the six leg lengths are actuated).\n"
            )
            name = "stewart"
        else:
            title = "Six-UPS Stewart platform, the published graph as it stands (25 joints, 21 bodies with world)."
            extra = (
                "# No free joint and no pins: the compiler chooses the spanning tree (one spherical joint\n"
                "# stays in the tree) and cuts the other five spherical joints: 5 loops, 15 point rows,\n"
                "# nv = 21, mobility 6.\n"
            )
            name = "stewart_graph"
        lines = [HEADER.format(title=title, xyz=list(POSE_XYZ), rpy=list(POSE_RPY), extra=extra)]
        lines += [f'name = "{name}"', f"gravity = {fmt(g)}", ""]
        for b in bodies:
            lines += body_block(b, frames_of(b)) + [""]
        if variant == "free":
            lines += [
                "[[joint]]",
                'name = "platform_free"',
                'type = "free"',
                'parent = "world"',
                'child = "platform"',
                f"q0 = {fmt(q0['platform_free'])}",
                "",
            ]
        for j in data["joints"]:
            cut = True if (variant == "free" and j["type"] == "spherical") else None
            lines += joint_block(j, q0, actuated=j["id"] in actuated, cut=cut) + [""]
        lines += ports()
        path.write_text("\n".join(lines).rstrip() + "\n")


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    src = Path(argv[0]) if argv else SOURCE
    data = json.loads(src.read_text())
    write(data, HERE / "stewart.toml", HERE / "stewart_graph.toml")
    print(f"wrote {HERE / 'stewart.toml'} and {HERE / 'stewart_graph.toml'} from {src}")


if __name__ == "__main__":
    main()
