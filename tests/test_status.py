"""One status numbering for every result (jaxmech/status.py)."""

import jax.numpy as jnp
import numpy as np

import jaxmech as jm
from jaxmech import assembly, constrained, reduction
from jaxmech.status import MESSAGES, Status


def test_one_numbering_across_modules():
    assert assembly.CONVERGED == reduction.OK == constrained.OK == Status.OK == 0
    assert assembly.SINGULAR == reduction.SINGULAR == Status.SINGULAR == 2
    assert reduction.INCONSISTENT == constrained.INCONSISTENT == Status.INCONSISTENT
    assert constrained.NONFINITE == Status.NONFINITE != assembly.NONFINITE_INPUT
    assert jm.Status is Status
    codes = [int(s) for s in Status]
    assert codes == list(range(len(codes)))  # dense, so tables index by code


def test_every_module_words_every_code():
    for table in (assembly.STATUS_MESSAGES, reduction.STATUS_MESSAGES, constrained.STATUS_MESSAGES, MESSAGES):
        assert sorted(int(k) for k in table) == [int(s) for s in Status]
        assert all(isinstance(m, str) and m for m in table.values())
    assert jm.STATUS_MESSAGES is assembly.STATUS_MESSAGES
    assert assembly.STATUS_MESSAGES[Status.OK] == "converged"
    assert reduction.STATUS_MESSAGES[Status.SINGULAR].startswith("singular")


def test_codes_are_plain_ints_in_traced_code():
    x = jnp.arange(3)
    st = jnp.where(x > 1, Status.NONFINITE, jnp.where(x > 0, Status.INCONSISTENT, Status.OK)).astype(jnp.int32)
    np.testing.assert_array_equal(st, [0, 8, 9])
    assert [constrained.STATUS_MESSAGES[int(k)] for k in st][0] == "success"
