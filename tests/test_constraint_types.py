"""The constraint-type registry and the joint-type enum: one object per type, and the compiled
tables (row names, coordinate counts) agree with it and with Pinocchio's joint models."""

from __future__ import annotations

import numpy as np
import pinocchio as pin
import pytest
from _shared import load
from test_closure import _zoo

import jaxmech as jm
from jaxmech.constraint_types import ROW_TYPES, ConstraintType, row_type
from jaxmech.graph import CONSTRAINT_ROWS, JOINT_NQ, JOINT_NV, JointType


def test_every_constraint_type_has_one_row_type():
    assert set(ROW_TYPES) == {t.value for t in ConstraintType} == set(CONSTRAINT_ROWS)
    for name, rt in ROW_TYPES.items():
        assert rt.name == name and CONSTRAINT_ROWS[name] == rt.n_rows
    assert ConstraintType.POINT == "point" and row_type("point").labels == ("x", "y", "z")
    with pytest.raises(ValueError, match="unknown constraint type 'ball'.*point"):
        row_type("ball")


def test_compiled_row_names_come_from_the_row_types():
    zoo = _zoo()
    names = list(zoo.topo.row_names)
    for g in zoo.topo.groups:
        labels = ROW_TYPES[g.type].labels or np.array(ROW_TYPES["weld"].labels)[g.rows]
        r = len(g.rows)
        for i, loop in enumerate(g.names):
            got = names[g.row_offset + i * r : g.row_offset + (i + 1) * r]
            assert got == [f"{loop}:{lab}" for lab in labels]
    assert {g.type for g in zoo.topo.groups} >= set(ConstraintType) - {"coupling"}


def test_joint_type_counts_match_pinocchio_and_the_compiled_model():
    models = {
        "revolute": pin.JointModelRZ(),
        "prismatic": pin.JointModelPZ(),
        "spherical": pin.JointModelSpherical(),
        "free": pin.JointModelFreeFlyer(),
    }
    for t, jmodel in models.items():
        assert (JointType(t).nq, JointType(t).nv) == (jmodel.nq, jmodel.nv)
    assert JOINT_NQ == {t.value: t.nq for t in JointType} and JOINT_NV == {t.value: t.nv for t in JointType}
    mech = load("stewart")
    topo = mech.topo
    for i, t in enumerate(topo.joint_types):
        jt = JointType(t)
        assert mech.q_slice(topo.joint_names[i]).stop - int(topo.q_start[i]) == jt.nq
        assert mech.v_slice(topo.joint_names[i]).stop - int(topo.v_start[i]) == jt.nv
    assert sum(JointType(t).nv for t in topo.joint_types) == mech.nv
    assert sum(JointType(t).nq for t in topo.joint_types) == mech.nq
    with pytest.raises(jm.ModelError, match="unknown joint type 'hinge'"):
        jm.Graph().add_joint("j", "hinge", "world", "b")
