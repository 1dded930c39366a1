"""The actuators of :func:`jaxmech.export_mjcf` (the last export stage, after the joints and the
named frames' sites exist): with ports, a ``motor`` per joint port and a tendon ``motor`` on a
two-site spatial tendon per distance port; without ports, a ``motor`` per actuated coordinate."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import numpy as np

from .mjcf_doc import MjcfDoc


def emit_actuators(mech, doc: MjcfDoc) -> None:
    """The actuators: with ports, a ``motor`` per joint port (its gear) and a two-site spatial
    tendon with a tendon ``motor`` per distance port; without, a ``motor`` (gear 1) per actuated
    exported coordinate."""
    t = mech.topo
    driven = set()
    for k, pn in enumerate(t.port_names):
        gear = float(np.array(mech.port_gear)[k])
        if t.port_types[k] == "joint":
            vi = int(t.port_v[k])
            if vi in doc.v_joint:
                ET.SubElement(
                    doc.act, "motor", name=doc.unique("actuator", pn), joint=doc.v_joint[vi], gear=f"{gear:.17g}"
                )
                driven.add(vi)
        else:
            fa, fb = (int(x) for x in t.port_frames[k])
            tn = doc.unique("tendon", f"{pn}__tendon")
            sp = ET.SubElement(doc.tendon, "spatial", name=tn)
            ET.SubElement(sp, "site", site=doc.frame_site[fa])
            ET.SubElement(sp, "site", site=doc.frame_site[fb])
            ET.SubElement(doc.act, "motor", name=doc.unique("actuator", pn), tendon=tn, gear=f"{gear:.17g}")
    for vi in np.asarray(t.actuated_v, dtype=int) if not t.port_names else ():
        if int(vi) in doc.v_joint and int(vi) not in driven:
            jn = doc.v_joint[int(vi)]
            ET.SubElement(doc.act, "motor", name=doc.unique("actuator", f"{jn}__motor"), joint=jn)
