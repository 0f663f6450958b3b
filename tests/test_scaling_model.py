"""The projection's model and its calibration, as pure functions: each term recovered from
synthetic data that has it (the wait for the slowest rank from simulated ranks, the
overhead per step from points at several batches, the exposed allreduce from a breakdown,
the hierarchical allreduce from sweeps over nodes and NICs), the model giving its base
back at the base's own scale, coverage on synthetic published rows whose truth is known,
and the published table as kept (sources, large scales, the gradients' sizes)."""

import math

import numpy as np
import pytest

from dlscale.engine.results.projection import calibration, commfit, projected, stated
from dlscale.engine.results.projection import scaling_model as sm


def test_the_expected_maximum_of_n_normals():
    # 1/sqrt(pi) for two; tabulated values (Harter 1961) for the rest
    for n, want in ((1, 0.0), (2, 0.5642), (3, 0.8463), (10, 1.5388), (100, 2.5076)):
        assert sm.expected_max(n) == pytest.approx(want, abs=2e-4)
    seq = [sm.expected_max(n) for n in (2, 8, 64, 512, 4096)]
    assert seq == sorted(seq)


@pytest.mark.parametrize("sigma,n", [(0.03, 8), (0.08, 64), (0.05, 512)])
def test_the_wait_for_the_slowest_rank_is_the_simulated_one(sigma, n):
    """Ranks whose steps jitter independently (normal, coefficient of variation sigma),
    each step waiting for the slowest: the simulated mean step is the model's."""
    rng = np.random.default_rng(1)
    steps = (1.0 + sigma * rng.standard_normal((4000, n))).max(axis=1)
    net = sm.Net([10**6], (0.0, 1e-12), (0.0, 1e-12))
    terms = sm.Terms(sigma, 0.0, 0.0)
    base = sm.Base(1, 32, 1.0)
    got = sm.step(sm.fix_base(base, terms, net), terms, net, base, 1, n, 32)
    assert float(got["step"]) == pytest.approx(steps.mean(), rel=0.003)
    assert got[sm.WAIT] == pytest.approx(sigma * sm.expected_max(n))


def test_the_overhead_per_step_is_recovered_from_points_at_several_batches():
    t0, u = 0.004, 0.0005
    batches = [16, 32, 64, 128]
    fit = stated.overhead_fit(batches, [t0 + b * u for b in batches])
    assert fit is not None and fit[:2] == pytest.approx((t0, u)) and fit[2] == ""  # not clamped
    # strong scaling: the per-device throughput then falls as the generating model's
    net = sm.Net([10**6], (0.0, 1e-15), None)
    terms = sm.Terms(0.0, fit[0], 0.0)
    base = sm.Base(1, 128, t0 + 128 * u)
    fixed = sm.fix_base(base, terms, net)
    for b in (8, 32):
        got = sm.step(fixed, terms, net, base, 1, 1, b)
        assert float(got["step"]) == pytest.approx(t0 + b * u)
        assert got[sm.SMALL_BATCH] == pytest.approx(t0 * (1 - b / 128))


def test_the_exposed_allreduce_grows_as_strong_scaling_shrinks_the_batch():
    """A base whose breakdown says how much of its allreduce showed: the hidden share
    scales with the compute it hides behind, so a smaller batch exposes more."""
    micro, comm, exposed = 0.100, 0.040, 0.010  # 30 ms hidden behind 100 ms
    net = sm.Net([4 * 10**7], (0.0, comm / (1.5 * 4e7)), None)  # 40 ms over 4 ranks
    terms = sm.Terms(0.0, 0.0, 0.5)  # the overlap stated is not used: measured wins
    base = sm.Base(4, 64, micro + exposed, exposed_comm_s=exposed, comm_s=comm)
    fixed = sm.fix_base(base, terms, net)
    assert fixed.hide * fixed.micro_s == pytest.approx(comm - exposed)
    at_base = sm.step(fixed, terms, net, base, 1, 4, 64)
    assert float(at_base["step"]) == pytest.approx(micro + exposed)
    half = sm.step(fixed, terms, net, base, 1, 4, 32)
    assert half[sm.INTRA_COMM] == pytest.approx(comm - (comm - exposed) / 2)
    eight = sm.step(fixed, terms, net, base, 1, 4, 8)
    assert eight[sm.INTRA_COMM] > half[sm.INTRA_COMM] > at_base[sm.INTRA_COMM]


def test_the_hierarchical_allreduce_is_recovered_from_sweeps_over_nodes():
    """Sweeps over 2 to 16 nodes of 4 ranks, timed as the node's links then its NICs (4 of
    12.5 GB/s): the intra-node fit, then the nodes' fit with it taken off, give both."""
    intra = commfit.Link(commfit.INTRA, 5e-6, 150.0, ((0, 0), (0, 0)), commfit.MEASURED, ())
    node = 4 * 12.5
    rng = np.random.default_rng(0)
    samples = [
        commfit.Sample("r", "f", 1, 4, int(s), intra.time_s([int(s)], 4))
        for s in np.geomspace(10**4, 10**8, 8)
    ]
    for nodes in (2, 4, 16):
        for s in np.geomspace(10**4, 10**8, 8):
            t = intra.time_s([int(s)], 4) + commfit.allreduce_time(
                2e-5, 1 / (node * 1e9), [int(s)], nodes
            )
            samples.append(
                commfit.Sample("r", "f", nodes, 4 * nodes, int(s), t * (1 + 0.01 * rng.normal()))
            )
    data = commfit.CommData(samples)
    links = data.links("f")
    assert links[commfit.INTRA].bandwidth_gbps == pytest.approx(150, rel=0.01)
    assert links[commfit.INTER].bandwidth_gbps == pytest.approx(node, rel=0.03)
    assert links[commfit.INTER].latency_s == pytest.approx(2e-5, rel=0.15)


@pytest.mark.parametrize("seed", range(30))
def test_the_model_gives_its_base_back_and_never_gains_with_more_nodes(seed):
    """Any base (with a breakdown or without, an allreduce longer than the step included),
    any terms and links: at the base's own scale the step is the base's; weak scaling past
    it, the step never shortens."""
    rng = np.random.default_rng(seed)
    g = int(rng.choice([1, 2, 4, 8]))
    net = sm.Net(
        [int(b) for b in rng.integers(10**3, 10**8, size=int(rng.integers(1, 4)))],
        (float(rng.uniform(0, 1e-4)), 1 / (float(rng.uniform(0.5, 300)) * 1e9)),
        (float(rng.uniform(0, 1e-4)), 1 / (float(rng.uniform(0.5, 300)) * 1e9)),
    )
    c = float(net.allreduce_s(1, g)[0])
    step = float(rng.uniform(0.2, 3.0)) * max(c, 1e-3)  # sometimes shorter than c
    exposed = None if rng.random() < 0.5 else float(rng.uniform(0, min(c, step) * 0.9))
    terms = sm.Terms(float(rng.uniform(0, 0.1)), float(rng.uniform(0, 0.02)), rng.uniform(0, 0.9))
    base = sm.Base(g, 32, step, exposed_comm_s=exposed)
    fixed = sm.fix_base(base, terms, net)
    got = sm.step(fixed, terms, net, base, 1, g, 32)
    assert float(got["step"]) == pytest.approx(step, rel=1e-9)
    if c >= step and exposed is None and g > 1:
        assert fixed.notes and "longer than its whole measured step" in fixed.notes[0]
    last = step
    for nodes in (2, 4, 64, 1024):
        t = float(sm.step(fixed, terms, net, base, nodes, g, 32)["step"])
        assert t >= last * (1 - 1e-12)
        last = t


# --- intervals ---------------------------------------------------------------------------


def _setup(rng, se=0.0, n=1):
    cal = calibration.calibrated()
    x = float(rng.uniform(10, 1e4))
    lk = {
        t: commfit.Link(t, 1e-5, float(rng.uniform(1, 300)), ((0, 0), (0, 0)), commfit.STATED, ())
        for t in commfit.TIERS
    }
    return projected.Setup(
        int(rng.choice([1, 2, 8])),
        32,
        projected.Mean(x, se * x, n),
        lk,
        [10**6, 25 * 10**6],
        sm.Terms(cal.jitter_cv, cal.overhead_s, cal.overlap),
        cal,
        baseline=projected.Mean(x / 2, se * x / 2, n),
        scaling=str(rng.choice(["weak", "strong"])),
        global_batch=4096,
    )


@pytest.mark.parametrize("seed", range(20))
def test_every_interval_is_positive_of_width_and_holds_its_value(seed):
    """Stated single figures (no spread at all) or noisy measurements: every projected
    interval has a width, never goes below zero, and holds its central value."""
    rng = np.random.default_rng(seed)
    setup = _setup(rng, se=float(rng.choice([0.0, 0.3])), n=int(rng.choice([1, 3])))
    for nodes, per_node in ((1, 2), (1, 8), (4, 8), (128, 8)):
        got = projected.project(setup, nodes, per_node, samples=300)
        if "why" in got:
            continue
        for k in ("step_time_s", "throughput", "speedup", "efficiency"):
            e = got[k]
            assert 0 < e.low < e.value < e.high < math.inf, (k, e)


# --- calibration ---------------------------------------------------------------------------


def _synthetic(truth, sources=8, per_source=6, noise=0.04, seed=0):
    """Published-looking rows made by the model with `truth` (its hidden terms), each
    source off by its own bias and each row by noise: what calibration must cover."""
    rng = np.random.default_rng(seed)
    cases = []
    for s in range(sources):
        bias = rng.normal(0, noise)
        g, per_node = int(rng.choice([1, 8])), 8
        for _ in range(per_source):
            nodes = int(rng.choice([1, 4, 32, 128])) if g == 8 else 1
            b_g = float(rng.choice([64, 256]))
            b_t = b_g if rng.random() < 0.5 else b_g / float(rng.choice([2, 8]))
            net = sm.Net([10**8], (0.0, 1 / 300e9), (0.0, 1 / 100e9))
            base = sm.Base(g, b_g, b_g * 1e-3 * (1 + rng.uniform(0, 0.2)))
            terms = sm.Terms(*truth)
            fixed = sm.fix_base(base, terms, net)
            step = sm.step(fixed, terms, net, base, nodes, per_node, b_t)["step"]
            x = nodes * per_node * b_t / float(step) * math.exp(bias + rng.normal(0, noise))
            row = calibration.Row.model_validate(
                {
                    "source": f"s{s}",
                    "system": "x",
                    "model": "m",
                    "what": "synthetic",
                    "gradient": "fp32",
                    "base": {"devices": g, "batch": b_g, "throughput": g * b_g / base.step_s},
                    "target": {"nodes": nodes, "devices_per_node": per_node, "batch": b_t},
                    "published": x,
                }
            )
            d = calibration.distance(g, nodes * per_node, b_g, b_t)
            cases.append(calibration.Case(row, base, net, nodes, per_node, d))
    return tuple(cases)


@pytest.mark.parametrize("seed", range(3))
def test_calibration_recovers_the_terms_and_covers_synthetic_truth(seed):
    """Rows whose truth is known (jitter 0.04, overhead 2 ms, overlap 0.5, 4% noise): the
    defaults fitted are near it, and leaving each source out, the projections are close
    and their 95% intervals hold the rows at about that rate."""
    truth = (0.04, 0.002, 0.5)
    cal = calibration.Calibrator(_synthetic(truth, seed=seed))
    fitted = cal.calibrate()
    assert fitted.jitter_cv == pytest.approx(0.04, abs=0.011)
    assert fitted.overhead_s == pytest.approx(0.002, abs=0.0021)
    rows = cal.check()
    inside = np.mean([r["inside"] for r in rows])
    assert 0.85 <= inside <= 1.0
    assert np.median([abs(r["error"]) for r in rows]) < 0.08
    assert all(0 < r["low"] < r["projected"] < r["high"] for r in rows)


def test_conformal_bounds_hold_their_share_of_fresh_draws():
    rng = np.random.default_rng(3)
    held = []
    for _ in range(200):
        cal = rng.normal(0.02, 0.05, 60)
        lo, hi = calibration.conformal(cal)
        fresh = rng.normal(0.02, 0.05, 200)
        held.append(np.mean((fresh >= lo) & (fresh <= hi)))
    assert 0.93 <= np.mean(held) <= 0.98
    lo, hi = calibration.conformal(np.zeros(10))  # a perfect model still gets a width
    assert lo < 0 < hi


# --- the published table -------------------------------------------------------------------


def test_the_published_table_meets_what_the_validation_needs():
    data = calibration.published()
    sources = {r.source for r in data.rows}
    assert len(data.rows) >= 8 and len(sources) >= 3
    assert sum(r.target.nodes * r.target.devices_per_node >= 256 for r in data.rows) >= 2
    assert sources <= {s.id for s in data.sources}
    assert all(s.where for s in data.sources) and all(s.where for s in data.systems)


def test_leave_one_source_out_meets_the_targets():
    rows = calibration.check()
    assert np.median([abs(r["error"]) for r in rows]) <= 0.10
    assert np.mean([r["inside"] for r in rows]) >= 0.90


def test_the_named_gradients_are_what_the_trainers_build():
    torch = pytest.importorskip("torch")
    from dlscale.trainers.torch_ddp.models import build

    named = calibration.gradients()
    for name, classes in [("resnet50", 1000), ("resnet101", 1000), ("resnet152", 1000)] + [
        (f"resnet{d}", 10) for d in (20, 32, 44, 56, 110)
    ]:
        if name in named:
            with torch.device("meta"):
                got = sum(p.numel() for p in build(name, classes).parameters())
            assert named[name].parameters == got, name


def test_ddp_sized_buckets_add_up():
    for total in (10, 2**20, 2**20 + 1, 102_228_128):
        got = stated.gradient_buckets(total)
        assert sum(got) == total and all(b > 0 for b in got)
