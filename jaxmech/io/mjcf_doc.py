"""The MJCF document that :func:`jaxmech.export_mjcf` builds: number formatting, the elements
written so far, and names made unique per kind (MuJoCo wants the joints, sites, tendons,
equalities and actuators each uniquely named). The export stages (:mod:`.export_tree`,
:mod:`.export_closures`, :mod:`.export_actuators`) all write through one :class:`MjcfDoc`."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass, field

import numpy as np


def fmt(x) -> str:
    """The numbers of ``x`` (scalar or array), space-separated, each round-tripping exactly."""
    return " ".join(f"{float(v):.17g}" for v in np.ravel(x))


def quat_wxyz(R) -> np.ndarray:
    """MuJoCo's ``(w, x, y, z)`` quaternion of rotation matrix ``R`` (3, 3)."""
    from scipy.spatial.transform import Rotation

    x, y, z, w = Rotation.from_matrix(np.asarray(R)).as_quat()
    return np.array([w, x, y, z])


@dataclass
class MjcfDoc:
    """The MJCF under construction: the element of each body index written as a MuJoCo body
    (``-1`` the worldbody), the host and pose (4, 4) in the host's frame of each body merged into
    another (``place``), the ``<equality>``, ``<tendon>`` and ``<actuator>`` sections, the
    MuJoCo joint name of each velocity / coordinate index it wrote (hinge and slide joints only),
    the site name of each named frame (``frame_site``, by frame index) and, by site name, its body
    index and pose (4, 4) in that body (``frame_at``), and the names used so far, by kind
    (``joint``, ``site``, ``tendon``, ``equality``, ``actuator``)."""

    elems: dict[int, ET.Element]
    eq: ET.Element
    tendon: ET.Element
    act: ET.Element
    v_joint: dict[int, str] = field(default_factory=dict)
    q_joint: dict[int, str] = field(default_factory=dict)
    frame_site: dict[int, str] = field(default_factory=dict)
    frame_at: dict[str, tuple[int, np.ndarray]] = field(default_factory=dict)
    used: dict[str, set[str]] = field(default_factory=dict)
    place: dict[int, tuple[int, np.ndarray]] = field(default_factory=dict)

    def unique(self, kind: str, nm: str) -> str:
        """``nm``, or ``nm_<k>`` with the smallest ``k >= 1`` that is free, if a ``kind`` element of
        that name was already written (MuJoCo wants names unique per kind); the name is taken."""
        used = self.used.setdefault(kind, set())
        out, k = nm, 0
        while out in used:
            k += 1
            out = f"{nm}_{k}"
        used.add(out)
        return out

    def site(self, body: int, nm: str, T: np.ndarray) -> str:
        """A site named ``nm`` (made unique) on ``body`` (index, ``-1`` world) at pose ``T`` (4, 4) in
        the body's frame (a merged body's sites go on its host, re-expressed); returns its name."""
        nm = self.unique("site", nm)
        body = int(body)
        if body in self.place:
            body, Tb = self.place[body]
            T = Tb @ T
        ET.SubElement(self.elems[body], "site", name=nm, pos=fmt(T[:3, 3]), quat=fmt(quat_wxyz(T[:3, :3])))
        return nm

    def frame_site_at(self, body: int, T: np.ndarray, names: tuple[str, ...]) -> str | None:
        """The first of ``names`` that is a named frame's site on ``body`` (index, ``-1`` world) at
        pose ``T`` (4, 4, to 1e-9) in the body's frame, else ``None``."""
        for nm in names:
            b, Tf = self.frame_at.get(nm, (None, None))
            if b == int(body) and np.allclose(Tf, T, rtol=0.0, atol=1e-9):
                return nm
        return None
