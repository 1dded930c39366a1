"""Assembly and tracking against closed forms (Freudenstein four-bar, Stewart leg lengths),
statuses for bad inputs, and implicit gradients against central finite differences."""

import logging
import tomllib

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _shared import assemble_batch as _shared_assemble
from _shared import assemble_each
from scipy.spatial.transform import Rotation

import jaxmech as jm
from jaxmech import assembly as A

# ----------------------------------------------------------------------------- references


def wrap(x):
    return (np.asarray(x) + np.pi) % (2 * np.pi) - np.pi


def freudenstein(th2, a, b, c, d, branch):
    """Closed-form four-bar (Norton, Design of Machinery, eqs. 4.10): rocker angle theta4 from
    the Freudenstein equation K1 cos t4 - K2 cos t2 + K3 = cos(t2 - t4), coupler angle from the
    joint B. Returns our joint coordinates (crank, coupler - crank, rocker - coupler)."""
    K1, K2, K3 = d / a, d / c, (a * a - b * b + c * c + d * d) / (2 * a * c)
    Aq = np.cos(th2) - K1 - K2 * np.cos(th2) + K3
    Bq = -2 * np.sin(th2)
    Cq = K1 - (K2 + 1) * np.cos(th2) + K3
    th4 = 2 * np.arctan2(-Bq + branch * np.sqrt(Bq * Bq - 4 * Aq * Cq), 2 * Aq)
    Bx, By = d + c * np.cos(th4), c * np.sin(th4)
    th3 = np.arctan2(By - a * np.sin(th2), Bx - a * np.cos(th2))
    return np.stack([th2, wrap(th3 - th2), wrap(th4 - th3)], -1)


FB = dict(a=0.1, b=0.35, c=0.3, d=0.4)  # configs/four_bar.toml


def nearest_branch(q, th, **lengths):
    """Closed form on the assembly branch closest to the configuration q (its first row)."""
    refs = [freudenstein(th, **lengths, branch=b) for b in (1, -1)]
    return min(refs, key=lambda R: np.abs(wrap(np.atleast_2d(q)[0] - R[0])).max())


@pytest.fixture(scope="module")
def four_bar(configs_dir):
    return jm.load(configs_dir / "four_bar.toml")


@pytest.fixture(scope="module")
def solve():
    """One compiled batched assembly per topology; the model is an argument (no recompiles for
    changed lengths)."""
    return jm.jit(jax.vmap(lambda m, q: jm.assemble(m, q), in_axes=(None, 0)))


PAD = 250  # every batched call uses this batch size, so each topology compiles once


def run(solve, mech, guesses):
    """Assemble a batch of any size in chunks of PAD (padded with q0) with one compiled solve."""
    g = np.asarray(guesses, dtype=float)
    outs = []
    for k in range(0, len(g), PAD):
        chunk = g[k : k + PAD]
        n = len(chunk)
        padded = np.concatenate([chunk, np.tile(np.asarray(mech.q0), (PAD - n, 1))])
        outs.append(jax.tree.map(lambda x, n=n: np.asarray(x)[:n], solve(mech, jnp.asarray(padded))))
    return jax.tree.map(lambda *xs: np.concatenate(xs), *outs)


def with_lengths(mech, a, b, c):
    """The four-bar with crank a, coupler b, rocker c (same topology, new array leaves)."""
    jc, jr = mech.joint_names.index("coupler"), mech.joint_names.index("rocker_coupler")
    Xp = mech.X_parent.at[jc, 0, 3].set(a).at[jr, 0, 3].set(b)
    Xc = mech.X_child_inv.at[jr, 0, 3].set(-c)
    return eqx.tree_at(lambda m: (m.X_parent, m.X_child_inv), mech, (Xp, Xc))


# ----------------------------------------------------------------------------- four-bar


def test_four_bar_matches_freudenstein_on_both_branches(four_bar, solve):
    th = np.linspace(-np.pi, np.pi, 1000, endpoint=False)
    rng = np.random.default_rng(0)
    for branch in (1, -1):
        ref = freudenstein(th, **FB, branch=branch)
        guess = ref + rng.uniform(-0.3, 0.3, ref.shape)
        guess[:, 0] = th
        r = run(solve, four_bar, guess)
        assert np.all(np.asarray(r.status) == A.CONVERGED)
        assert np.abs(wrap(np.asarray(r.q) - ref)).max() <= 1e-10
        assert np.asarray(r.residual).max() <= 1e-12
        assert np.all(np.asarray(r.rank) == 2)


def test_nan_guess_does_not_poison_batch(four_bar, solve):
    th = np.linspace(0.0, 1.0, 6)
    ref = freudenstein(th, **FB, branch=1)
    guess = ref + 0.1
    guess[:, 0] = th
    guess[2] = np.nan
    guess[4, 1] = np.inf
    r = run(solve, four_bar, guess)
    st = np.asarray(r.status)
    np.testing.assert_array_equal(st, [0, 0, A.NONFINITE_INPUT, 0, A.NONFINITE_INPUT, 0])
    assert np.all(np.isfinite(np.asarray(r.q)))
    np.testing.assert_allclose(np.asarray(r.q)[2], np.asarray(four_bar.q0))
    good = st == 0
    assert np.abs(wrap(np.asarray(r.q)[good] - ref[good])).max() <= 1e-10
    assert "non-finite" in r.message()[2]


def test_non_grashof_dead_centre_is_singular(four_bar, solve):
    a, b, c, d = 0.3, 0.25, 0.2, 0.4  # s + l = 0.6 > p + q = 0.55: triple rocker
    mech = with_lengths(four_bar, a, b, c)
    th_max = np.arccos((a * a + d * d - (b + c) ** 2) / (2 * a * d))  # coupler and rocker collinear
    A_ = a * np.array([np.cos(th_max), np.sin(th_max)])
    u = np.array([d, 0.0]) - A_
    toggle = np.array([th_max, wrap(np.arctan2(u[1], u[0]) - th_max), np.pi])
    np.testing.assert_allclose(np.asarray(jm.closure_residual(mech, jnp.asarray(toggle))), 0.0, atol=1e-12)
    inside = freudenstein(np.array([0.5 * th_max]), a, b, c, d, 1)[0]
    guesses = np.stack([toggle, toggle + [0, 1e-6, -1e-6], toggle + [1e-3, 0, 0], inside + [0, 0.1, -0.1]])
    r = run(solve, mech, guesses)
    st = np.asarray(r.status)
    assert st[0] == A.SINGULAR and st[1] == A.SINGULAR
    from jaxmech.active_set import partition

    p = np.asarray(partition(mech).passive)
    for i in (0, 1, 3):  # rcond: numpy's 1 / cond_1 of the selected passive rows, tiny at the toggle
        C = np.asarray(jm.closure_jacobian(mech, jnp.asarray(np.asarray(r.q)[i])))
        ref = 1.0 / np.linalg.cond(C[np.asarray(r.rows)[i]][:, p], 1)
        np.testing.assert_allclose(np.asarray(r.rcond)[i], ref, rtol=1e-8, atol=1e-14)
    assert np.asarray(r.rcond)[0] < A.AssemblyOptions().rcond_min < 1e-3 < np.asarray(r.rcond)[3]
    assert st[2] != A.CONVERGED  # crank beyond its range: no closure
    assert st[3] == A.CONVERGED
    assert np.abs(wrap(np.asarray(r.q)[3] - inside)).max() <= 1e-10
    assert np.all(np.isfinite(np.asarray(r.q)))


def test_active_set_statuses_and_throw(four_bar):
    q = jnp.asarray(freudenstein(np.array([0.3]), **FB, branch=1)[0])
    under = jm.assemble(four_bar, q, active=[])
    assert int(under.status) == A.UNDERDETERMINED
    with pytest.raises(jm.AssemblyError, match="over-determined"):
        jm.assemble(four_bar, q, active=["crank", "coupler"], throw=True)
    with pytest.raises(ValueError, match="bad active"):
        jm.assemble(four_bar, q, active=["no_such_joint"])
    with pytest.raises(TypeError, match="unknown assembly options"):
        jm.assemble(four_bar, q, tolerance=1.0)


def test_track_four_bar_1000_steps(four_bar, caplog):
    n = 1000
    th = np.linspace(0.0, 4 * np.pi, n)
    # an eager call: the first step is jm.assemble's own compiled program (compiled here if no test
    # before did), the continuation one program per topology and path length (jaxmech._entry), the
    # one test_reduction.py's velocity-lift check also runs (same length), from the persistent cache
    first = jm.assemble(four_bar, four_bar.q0.at[0].set(th[0]))
    path = jnp.asarray(th[:, None])
    with jax.log_compiles(), caplog.at_level(logging.WARNING):
        res = jm.track(four_bar, four_bar.q0, path)
    compiled = {
        r.getMessage().split()[1]
        for r in caplog.records
        if r.levelno >= logging.WARNING and r.getMessage().startswith("Compiling")
    }
    assert compiled <= {"jit(_first_guess)", "jit(_track_rest)", "jit(stage)"}, compiled  # no second acquisition
    np.testing.assert_array_equal(np.asarray(res.q[0]), np.asarray(first.q))
    assert np.all(np.asarray(res.status) == A.CONVERGED)
    assert np.asarray(res.residual).max() <= 1e-10
    # continuous motion stays on the branch of the first (homotopy-acquired) configuration
    ref = nearest_branch(np.asarray(res.q), wrap(th), **FB)
    assert np.abs(wrap(np.asarray(res.q) - ref)).max() <= 1e-10
    assert int(np.asarray(res.fallback)[1:].sum()) == 0  # no re-acquisition needed


def test_implicit_gradients_match_central_differences(four_bar, solve):
    q0 = jnp.asarray(freudenstein(np.array([0.7]), **FB, branch=1)[0])
    jr = four_bar.joint_names.index("rocker_coupler")

    def f(mech, c):
        return jm.assemble(mech, q0.at[0].set(c)).q

    def fd_batch(mechs, cs):
        qs = jnp.broadcast_to(q0, (len(cs), 3)).at[:, 0].set(jnp.asarray(cs))
        return [run(solve, m, qs[k : k + 1]).q[0] for k, m in enumerate(mechs)]

    h = 1e-5
    c0 = 0.7
    mech_p = eqx.tree_at(lambda m: m.X_parent, four_bar, four_bar.X_parent.at[jr, 0, 3].add(h))
    mech_m = eqx.tree_at(lambda m: m.X_parent, four_bar, four_bar.X_parent.at[jr, 0, 3].add(-h))
    qcp, qcm, qlp, qlm = fd_batch([four_bar, four_bar, mech_p, mech_m], [c0 + h, c0 - h, c0, c0])
    fd_c, fd_l = (qcp - qcm) / (2 * h), (qlp - qlm) / (2 * h)

    dmech = jax.tree.map(jnp.zeros_like, four_bar)
    dmech_l = eqx.tree_at(lambda m: m.X_parent, dmech, dmech.X_parent.at[jr, 0, 3].set(1.0))

    @jm.jit
    def derivs(m, c, dm, dc):
        """Forward mode along (dm, dc) and reverse mode (the gradient of the rocker angle, the
        transpose of the same linearization, as in jax.grad): one compiled program."""
        q, lin = jax.linearize(f, m, c)
        return lin(dm, dc), jax.linear_transpose(lin, m, c)(jnp.zeros_like(q).at[2].set(1.0))

    jvp = lambda m, c, dm, dc: derivs(m, c, dm, dc)[0]  # noqa: E731
    jv_c = np.asarray(jvp(four_bar, c0, dmech, 1.0))
    jv_l = np.asarray(jvp(four_bar, c0, dmech_l, 0.0))
    for jv, fd in ((jv_c, fd_c), (jv_l, fd_l)):
        assert np.abs(jv - fd).max() <= 1e-6 * np.abs(fd).max()
    # cut placements: ground pivot (cut_pose_a, world side) and rocker-side pivot (cut_pose_b)
    for field in ("cut_pose_a", "cut_pose_b"):
        get = lambda m, field=field: getattr(m, field)  # noqa: E731
        mp = eqx.tree_at(get, four_bar, get(four_bar).at[0, 0, 3].add(h))
        mm = eqx.tree_at(get, four_bar, get(four_bar).at[0, 0, 3].add(-h))
        qp, qm = fd_batch([mp, mm], [c0, c0])
        fd = (qp - qm) / (2 * h)
        jv = np.asarray(jvp(four_bar, c0, eqx.tree_at(get, dmech, get(dmech).at[0, 0, 3].set(1.0)), 0.0))
        assert np.abs(fd).max() > 0.1
        assert np.abs(jv - fd).max() <= 1e-6 * np.abs(fd).max()
    assert jv_c[0] == pytest.approx(1.0)
    # reverse mode (grad of the rocker angle) agrees with forward mode
    gm, gc = derivs(four_bar, c0, dmech, 0.0)[1]
    assert float(gc) == pytest.approx(jv_c[2], rel=1e-10)
    assert float(gm.X_parent[jr, 0, 3]) == pytest.approx(jv_l[2], rel=1e-10)


# ----------------------------------------------------------------------------- Stewart platform


@pytest.fixture(scope="module")
def stewart(configs_dir):
    return jm.load(configs_dir / "stewart.toml")


@pytest.fixture(scope="module")
def stewart_geometry(configs_dir):
    """Leg base points (world) and platform attachment points (platform frame) read from the
    TOML source, independent of the compiled model."""
    cfg = tomllib.loads((configs_dir / "stewart.toml").read_text())
    J = {j["name"]: j for j in cfg["joint"]}
    base = np.array([J[f"leg_{i}_u_x"]["parent_xyz"] for i in range(6)])
    att = np.array([J[f"cut_{i}"]["child_xyz"] for i in range(6)])
    return base, att


def leg_lengths(geom, pos, quat_wxyz):
    base, att = geom
    R = Rotation.from_quat(np.asarray(quat_wxyz)[[1, 2, 3, 0]]).as_matrix()
    return np.linalg.norm(pos + att @ R.T - base, axis=1)


def test_stewart_forward_kinematics_from_perturbed_guesses(stewart, stewart_geometry):
    mech = stewart
    q0 = np.asarray(mech.q0)
    lq = [mech.q_slice(f"leg_{i}_length").start for i in range(6)]
    np.testing.assert_allclose(q0[lq], leg_lengths(stewart_geometry, q0[:3], q0[3:7]), atol=1e-12)
    rng = np.random.default_rng(0)
    B = 32
    scale = np.full(mech.nv, 0.5)  # rad
    fv = mech.v_indices(["platform_free"])
    scale[fv[3:]] = 0.2  # m
    scale[[mech.v_slice(f"leg_{i}_length").start for i in range(6)]] = 0.0  # actuated: exact
    dv = rng.uniform(-1, 1, (B, mech.nv)) * scale
    guesses = np.array(jm.jit(jax.vmap(jm.integrate, (None, None, 0)))(mech, jnp.asarray(q0), jnp.asarray(dv)))
    guesses[5] = np.nan
    free = eqx.tree_at(
        lambda m: (m.lower, m.upper), mech, (jnp.full_like(mech.lower, -jnp.inf), jnp.full_like(mech.upper, jnp.inf))
    )
    unreachable = q0.copy()
    unreachable[lq] = [0.5] * 5 + [3.0]  # leg 5 longer than any closure allows
    guesses[7] = unreachable
    solve_st = _shared_assemble  # the session's padded batched assembly (tests/_shared.py)
    r = solve_st(free, jnp.asarray(guesses))
    r = jax.tree.map(np.asarray, r)
    st = np.asarray(r.status)
    assert st[5] == A.NONFINITE_INPUT and st[7] not in (A.CONVERGED, A.NONFINITE_INPUT)
    good = np.setdiff1d(np.arange(B), [5, 7])
    ok = st[good] == A.CONVERGED
    assert ok.mean() >= 0.9, f"success rate {ok.mean():.2f}, statuses {st}"
    Q = np.asarray(r.q)
    assert np.all(np.isfinite(Q))
    assert np.asarray(r.residual)[good][ok].max() <= 1e-12
    # forward kinematics: the converged states reproduce the platform pose of q0 (same branch)
    d = np.asarray(jm.jit(jax.vmap(jm.difference, (None, None, 0)))(mech, jnp.asarray(q0), jnp.asarray(Q[good][ok])))
    assert np.abs(d).max() <= 1e-9
    # the bounded model reports the over-long leg as out of bounds
    rb = solve_st(mech, jnp.asarray(np.concatenate([guesses[[0, 7]], np.tile(q0, (B - 2, 1))])))
    np.testing.assert_array_equal(np.asarray(rb.status)[:2], [A.CONVERGED, A.OUT_OF_BOUNDS])


def test_rcond_is_the_one_norm_condition_of_the_selected_block(stewart):
    """The result's ``rcond`` is 1 / cond_1 of the selected passive rows at the returned q, as
    numpy computes it from the closure Jacobian (and within n_p of the 2-norm value); a dead
    centre gives a tiny one and the singular status."""
    from jaxmech.active_set import partition

    mech = stewart
    p = np.asarray(partition(mech).passive)
    q = jnp.asarray(mech.q0)
    guesses = jnp.stack([jm.integrate(mech, q, 0.02 * jnp.sin(jnp.arange(mech.nv) + k)) for k in range(4)])
    r = jax.tree.map(np.asarray, _shared_assemble(mech, guesses))
    assert np.all(r.status == A.CONVERGED)
    for i in range(4):
        C = np.asarray(jm.closure_jacobian(mech, jnp.asarray(r.q[i])))
        Rp = C[r.rows[i]][:, p]
        ref = 1.0 / np.linalg.cond(Rp, 1)
        np.testing.assert_allclose(r.rcond[i], ref, rtol=1e-10)
        two = 1.0 / np.linalg.cond(Rp, 2)
        assert two / p.size <= r.rcond[i] <= two * p.size


def test_stewart_inverse_kinematics(stewart, stewart_geometry):
    mech = stewart
    q0 = np.asarray(mech.q0)
    lq = [mech.q_slice(f"leg_{i}_length").start for i in range(6)]
    rng = np.random.default_rng(1)
    B = 12
    G = np.tile(q0, (B, 1))
    R0 = Rotation.from_quat(q0[[4, 5, 6, 3]])
    for k in range(B):
        G[k, :3] = q0[:3] + rng.uniform(-0.05, 0.05, 3)
        G[k, 3:7] = (Rotation.from_rotvec(rng.uniform(-0.1, 0.1, 3)) * R0).as_quat()[[3, 0, 1, 2]]
    G[3] = np.nan
    G[4, 2] = 3.0  # platform 3 m up: legs would have to exceed their upper limit
    # state by state: the single-state program compiles in 2.6 s, a vmap of these 12 in 3.6 s (the
    # batched assembly is checked by test_stewart_forward_kinematics_from_perturbed_guesses)
    r = assemble_each(mech, G, active="platform_free")
    st = np.asarray(r.status)
    assert st[3] == A.NONFINITE_INPUT and st[4] == A.OUT_OF_BOUNDS
    good = np.setdiff1d(np.arange(B), [3, 4])
    assert np.all(st[good] == A.CONVERGED)
    Q = np.asarray(r.q)
    for k in good:
        np.testing.assert_allclose(Q[k, lq], leg_lengths(stewart_geometry, G[k, :3], G[k, 3:7]), rtol=0, atol=1e-12)
    assert np.asarray(r.residual)[good].max() <= 1e-12
    assert np.all(np.isfinite(Q))


# ----------------------------------------------------------------------------- partition, CLI


def test_uninvolved_coordinates_are_held(configs_dir, tmp_path):
    """A pendulum hanging off the crank is in no closure row: it is neither active nor solved."""
    src = (configs_dir / "four_bar.toml").read_text()
    src += """
[[body]]
name = "bob"
mass = 0.1
com = [0.0, -0.05, 0.0]
inertia = [1e-5, 1e-5, 1e-5]

[[joint]]
name = "pendulum"
type = "revolute"
parent = "crank"
child = "bob"
parent_xyz = [0.05, 0.0, 0.0]
axis = [0, 0, 1]
q0 = 0.25
"""
    (tmp_path / "fb_pendulum.toml").write_text(src)
    mech = jm.load(tmp_path / "fb_pendulum.toml")
    part = A.partition(mech)
    iv = int(mech.v_indices(["pendulum"])[0])
    assert iv in part.held and iv not in part.passive and iv not in part.active
    assert sorted(part.passive) == sorted(mech.v_indices(["coupler", "rocker_coupler"]).tolist())
    q = np.asarray(mech.q0).copy()
    q[mech.q_slice("crank")] = 0.9
    r = jm.assemble(mech, jnp.asarray(q))
    assert int(r.status) == A.CONVERGED
    assert float(r.q[mech.q_slice("pendulum")][0]) == 0.25
    got = np.asarray(r.q)[[mech.q_slice(n).start for n in ("crank", "coupler", "rocker_coupler")]]
    ref = nearest_branch(got, np.array([0.9]), **FB)[0]
    assert np.abs(wrap(got - ref)).max() <= 1e-10


def test_cli_assemble(tmp_path):
    from typer.testing import CliRunner

    from jaxmech.cli import app

    res = CliRunner().invoke(app, ["assemble", "four_bar", "--set", "crank=0.7"], terminal_width=200)
    assert res.exit_code == 0, res.output
    assert "converged" in res.output
    ref = freudenstein(np.array([0.7]), **FB, branch=-1)[0]  # the branch of q0
    assert f"{ref[1]:+.9f}" in res.output
    bad = CliRunner().invoke(app, ["assemble", "four_bar", "--set", "nope=1"])
    assert bad.exit_code != 0


@pytest.mark.slow
def test_cli_track_writes_csv_and_plot(tmp_path):
    from typer.testing import CliRunner

    from jaxmech.cli import app

    th = np.linspace(0.0, 2 * np.pi, 120)
    path = tmp_path / "path.csv"
    path.write_text("crank\n" + "\n".join(f"{t:.15g}" for t in th) + "\n")
    res = CliRunner().invoke(app, ["track", "four_bar", str(path), "--chunk", "50"], terminal_width=200)
    assert res.exit_code == 0, res.output
    rows = np.genfromtxt(tmp_path / "path_tracked.csv", delimiter=",", names=True)
    assert len(rows) == 120 and np.all(rows["status"] == 0) and rows["residual"].max() <= 1e-10
    got = np.stack([rows["crank"], rows["coupler"], rows["rocker_coupler"]], -1)
    ref = nearest_branch(got, wrap(th), **FB)
    assert np.abs(wrap(got - ref)).max() <= 1e-10
    assert (tmp_path / "path_tracked.png").stat().st_size > 10_000


@pytest.mark.slow
def test_track_falls_back_to_homotopy_and_batches(four_bar):
    """A 3 rad jump with a tight corrector budget forces re-acquisition by defect homotopy;
    several paths run batched with vmap. With 4 inner iterations per lambda step the
    re-acquisition across the jump takes about 160 iterations in all, so the total budget is
    raised from the default 150."""
    base = jnp.linspace(0.0, 1.0, 40)
    paths = jnp.stack([base.at[20:].add(3.0), base, -base])[..., None]
    res = jm.jit(jax.vmap(lambda p: jm.track(four_bar, four_bar.q0, p, max_inner=4, max_iter=400)))(paths)
    assert np.all(np.asarray(res.status) == A.CONVERGED)
    assert np.asarray(res.residual).max() <= 1e-10
    assert bool(np.asarray(res.fallback)[0, 20])
    for k in range(3):
        q = np.asarray(res.q)[k]
        err = [np.abs(wrap(q[i] - nearest_branch(q[i], q[i : i + 1, 0], **FB)[0])).max() for i in range(40)]
        assert max(err) <= 1e-10


def test_closure_rank_skips_its_qr_only_where_the_passive_block_has_full_row_rank():
    """``_closure_rank`` gives rank(C) in a vmapped batch that mixes states whose passive columns
    have full row rank (rank s without a QR) with states where they do not (the QR decides):
    compared with numpy's SVD rank of each matrix."""
    p = np.array([0, 1])
    mats = np.array(
        [
            [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]],  # passive block full rank: 2
            [[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]],  # passive rank 1, whole C rank 2
            [[1.0, 0.0, 0.0], [2.0, 0.0, 0.0]],  # rank 1 either way
            [[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]],  # rank 0
        ]
    )

    @jm.jit
    @jax.vmap
    def ranks(C):
        _, rank_p = A.select_rows_ranked(C[:, p], p.size, 1e-9)
        return rank_p, A._closure_rank(C, rank_p, 1e-9)

    rank_p, rank = ranks(jnp.asarray(mats))
    np.testing.assert_array_equal(np.asarray(rank_p), [2, 1, 1, 0])
    np.testing.assert_array_equal(np.asarray(rank), [np.linalg.matrix_rank(m) for m in mats])


def test_square_selection_runs_the_qr_only_where_rcond_cannot_certify_full_rank():
    """``_square_selection`` in a vmapped batch mixing well-conditioned square blocks (rows kept
    in order, rank n, no QR) with rank-deficient and barely invertible ones (the pivoted QR's rows
    and rank): every state equals the per-state pivoted-QR selection in rows (as a set) and rank,
    its ``Ji`` inverts the selected rows, and its ``rc`` is numpy's 1 / cond_1."""
    rng = np.random.default_rng(3)
    n = 5
    good = rng.standard_normal((n, n)) + 4 * np.eye(n)
    low = rng.standard_normal((n, 3)) @ rng.standard_normal((3, n))  # rank 3
    near = good.copy()
    near[4] = near[3] + 1e-7 * rng.standard_normal(n)  # rank n, but rc below 10 n rtol
    mats = np.stack([good, low, near, good[::-1]])

    @jm.jit
    @jax.vmap
    def pick(Cp):
        return A._square_selection(Cp, 1e-9)

    rows, rank, Ji, rc = jax.tree.map(np.asarray, pick(jnp.asarray(mats)))
    for i, m in enumerate(mats):
        ref_rows, ref_rank = jax.tree.map(np.asarray, A.select_rows_ranked(jnp.asarray(m), n, 1e-9))
        assert rank[i] == ref_rank == np.linalg.matrix_rank(m, tol=1e-9 * np.linalg.norm(m, 2))
        assert sorted(rows[i]) == list(range(n))
        if rank[i] == n and i != 2:  # certified: natural order, no QR
            np.testing.assert_array_equal(rows[i], np.arange(n))
        else:  # the QR ran: its pivot order
            np.testing.assert_array_equal(rows[i], ref_rows)
        if rank[i] == n:
            np.testing.assert_allclose(Ji[i] @ m[rows[i]], np.eye(n), atol=1e-6 if i == 2 else 1e-12)
            np.testing.assert_allclose(rc[i], 1.0 / np.linalg.cond(m, 1), rtol=1e-6)
    assert rank.tolist() == [n, 3, n, n] and rc[2] < 10 * n * 1e-9 < rc[0]
