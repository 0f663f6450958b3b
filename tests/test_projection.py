"""Past the measured scales: the alpha-beta fit recovers known links from noisy sweeps, a
synthetic study's projection matches the model that generated it (its hierarchical
allreduce and its jitter), the held-out check computes its error and flags a miss,
projections from stated figures and from a declared framework's [comm] parameters run end
to end through the CLI, and `dlscale project` refuses bad input in one line."""

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_efficiency_results import add, add_comm, breakdown

from conftest import dlscale
from dlscale.engine.results.projection import bounds, calibration, commfit, projected
from dlscale.engine.results.projection import project as projection
from dlscale.engine.results.projection import scaling_model as sm
from dlscale.engine.tracking.store import Store

BUCKETS = [1_049_000, 29_888]
ALPHA = 40e-6  # s per latency step
INTRA_GBPS, INTER_GBPS = 20.0, 4.0
LOCAL_S = 0.25  # a node's step without communication (per-device batch 32)
BATCH = 32


def model_time(nbytes, n, nodes, buckets=None):
    """The hierarchical allreduce: over the node's ranks, then across the nodes."""
    b = buckets or [nbytes]
    inside = commfit.allreduce_time(ALPHA, 1 / (INTRA_GBPS * 1e9), b, n // nodes)
    return inside + commfit.allreduce_time(ALPHA, 1 / (INTER_GBPS * 1e9), b, nodes)


# --- the fit ---------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("alpha,gbps", [(5e-6, 100.0), (40e-6, 4.0), (1e-3, 0.5)])
def test_the_fit_recovers_latency_and_bandwidth_from_noisy_sweeps(seed, alpha, gbps):
    rng = np.random.default_rng(seed)
    samples = [  # one rank a node: the nodes' ring alone
        commfit.Sample("r", "f", n, n, int(s), t * (1 + 0.03 * rng.standard_normal()))
        for n in (2, 4, 8)
        for s in np.geomspace(4096, 1e8, 8)
        for t in [commfit.allreduce_time(alpha, 1 / (gbps * 1e9), [int(s)], n)]
    ]
    link = commfit.fit(samples, commfit.INTER)
    assert link is not None and link.source == commfit.MEASURED and link.points == 24
    assert link.bandwidth_gbps == pytest.approx(gbps, rel=0.03)
    assert link.latency_s == pytest.approx(alpha, rel=0.1)
    lo, hi = link.bandwidth_interval()
    assert lo < link.bandwidth_gbps < hi
    # the interval is honest: within 4 standard errors of the truth (3% noise)
    assert abs(link.latency_s - alpha) < 4 * link.latency_se()


def test_too_few_sizes_fit_the_bandwidth_alone_and_say_so():
    samples = [
        commfit.Sample("r", "f", 2, 2, 10**6, 10**6 / 5e9),
        commfit.Sample("r", "f", 2, 2, 10**7, 10**7 / 5e9),
    ]
    link = commfit.fit(samples, commfit.INTER)
    assert link.latency_s == 0 and link.bandwidth_gbps == pytest.approx(5.0)
    assert "too few for a latency" in link.note
    assert commfit.fit([], commfit.INTER) is None


S_ALPHA, S_INV = 1e-12, 1e-24  # variances of the order a fit gives: s^2 and (s/B)^2
COVARIANCES = {
    "none": [[0, 0], [0, 0]],
    "bandwidth alone": [[0, 0], [0, S_INV]],
    "latency alone": [[S_ALPHA, 0], [0, 0]],
    "independent": [[S_ALPHA, 0], [0, S_INV]],
    "correlated": [[S_ALPHA, -0.9e-18], [-0.9e-18, S_INV]],
    "perfectly correlated": [[S_ALPHA, -1e-18], [-1e-18, S_INV]],
    "rounded past singular": [[S_ALPHA, -1e-18 * (1 + 1e-9)], [-1e-18 * (1 + 1e-9), S_INV]],
    "asymmetric by rounding": [[S_ALPHA, -0.5e-18], [-0.5e-18 * (1 + 1e-12), S_INV]],
}


@pytest.mark.parametrize("name", COVARIANCES)
def test_draws_follow_any_covariance_a_fit_can_give_singular_ones_included(name):
    cov = np.array(COVARIANCES[name], dtype=float)
    link = commfit.Link(commfit.INTER, 5e-5, 4.0, tuple(map(tuple, cov)), commfit.MEASURED, ())
    alpha, inv = link.sample(np.random.default_rng(1), 20_000)
    assert np.isfinite(alpha).all() and np.isfinite(inv).all() and len(alpha) == 20_000
    # alpha's spread is far below its mean here, so the physical clipping never bites
    raw = np.column_stack([alpha, inv])
    assert raw.mean(axis=0) == pytest.approx([5e-5, link.inv_bandwidth], rel=0.01)
    got = np.cov(raw.T)
    for i in range(2):
        if cov[i, i]:
            assert got[i, i] == pytest.approx(cov[i, i], rel=0.05)
        else:  # no spread: every draw is the fit's value
            assert np.ptp(raw[:, i]) == 0
    if cov[0, 0] and cov[1, 1]:
        want_r = cov[0, 1] / np.sqrt(cov[0, 0] * cov[1, 1])
        assert got[0, 1] / np.sqrt(got[0, 0] * got[1, 1]) == pytest.approx(want_r, abs=0.02)


# Any sweep a benchmark can record: sizes from a byte to a GB, 2 to 64 ranks, times from a
# microsecond to minutes, in any relation to each other (noise, a link faster for small
# messages, one size only, one point twice).
SWEEP = st.lists(
    st.tuples(
        st.integers(1, 10**9),
        st.sampled_from([2, 4, 8, 64]),
        st.floats(1e-6, 300, allow_nan=False, allow_infinity=False),
    ),
    min_size=1,
    max_size=12,
).flatmap(lambda pts: st.lists(st.sampled_from(pts), min_size=len(pts), max_size=len(pts) + 3))


@given(sweep=SWEEP, step_s=st.floats(1e-3, 100), seed=st.integers(0, 2**16))
@settings(max_examples=60, deadline=None, database=None)
def test_any_recorded_sweep_fits_and_projects_without_error(sweep, step_s, seed):
    """The class of the CI failure (a singular covariance ending `project` in LinAlgError):
    whatever sweep the benchmark recorded, the fit gives a physical link or none, its draws
    are finite, and every projected estimate is finite and inside its own interval."""
    samples = [commfit.Sample("r", "f", 2, n, b, t) for b, n, t in sweep]
    link = commfit.fit(samples, commfit.INTER)
    if link is None:
        return
    assert link.latency_s >= 0 and 0 < link.bandwidth_gbps < math.inf
    alpha, inv = link.sample(np.random.default_rng(seed), 200)
    assert np.isfinite(alpha).all() and np.isfinite(inv).all() and (inv > 0).all()
    links = {commfit.INTRA: link, commfit.INTER: link}
    cal = calibration.calibrated()
    setup = projected.Setup(
        2,
        32,
        projected.Mean(64 / step_s, 0.05 * 64 / step_s, 3),
        links,
        BUCKETS,
        sm.Terms(cal.jitter_cv, cal.overhead_s, cal.overlap),
        cal,
        baseline=projected.Mean(32 / step_s, 0.05 * 32 / step_s, 3),
    )
    for nodes in (2, 16, 1024):
        got = projected.project(setup, nodes, 2, samples=200, seed=seed)
        for name in ("step_time_s", "throughput", "speedup", "efficiency"):
            e = got[name]
            assert all(math.isfinite(v) for v in (e.value, e.low, e.high)), (name, e)
            assert 0 < e.low < e.value < e.high, (name, e)


# --- a synthetic study -----------------------------------------------------------------


def add_sweep(store, tmp_path, nodes, rpn, noise=0.0, seed=0):
    rng = np.random.default_rng(seed)
    n = nodes * rpn
    sweep = []
    for s in np.geomspace(16_000, sum(BUCKETS), 8).astype(int):
        t = model_time(int(s), n, nodes) * (1 + noise * rng.standard_normal())
        sweep.append({"bytes": int(s), "time_s": t, "rounds": 10})
    step = model_time(0, n, nodes, BUCKETS)
    add_comm(
        store,
        tmp_path,
        step,
        1.0,
        record={"buckets": BUCKETS, "sweep": sweep},
        nodes=nodes,
        ranks_per_node=rpn,
        per_device_batch=BATCH,
    )


def step_of(nodes, rpn, jitter=0.0):
    """The generating model: each rank's step jitters (coefficient of variation `jitter`),
    the step waits for the slowest, and the allreduce is all exposed."""
    n = nodes * rpn
    return LOCAL_S * (1 + jitter * sm.expected_max(n)) + model_time(0, n, nodes, BUCKETS)


def add_point(store, tmp_path, nodes, rpn, factor=1.0, jitter=0.0):
    n = nodes * rpn
    c = model_time(0, n, nodes, BUCKETS)
    x = n * BATCH / step_of(nodes, rpn, jitter) * factor
    reps = [
        {**breakdown(x * f, LOCAL_S * (1 + jitter * sm.expected_max(n)), c), "step_time_cv": jitter}
        for f in (0.99, 1.0, 1.01)
    ]
    add(store, tmp_path, reps, nodes=nodes, ranks_per_node=rpn, per_device_batch=BATCH)


def make_study(tmp_path, jitter=0.0):
    store = Store(tmp_path)
    for nodes, rpn in ((1, 1), (1, 2), (2, 2), (4, 2)):
        add_point(store, tmp_path, nodes, rpn, jitter=jitter)
        if nodes * rpn > 1:
            add_sweep(store, tmp_path, nodes, rpn, noise=0.02, seed=nodes)
    return store


@pytest.fixture
def study(tmp_path):
    return make_study(tmp_path)


@pytest.mark.parametrize("jitter", [0.0, 0.05])
def test_a_synthetic_studys_projection_matches_its_generating_model(tmp_path, jitter):
    """Generated with a hierarchical allreduce (20 GB/s in the node, 4 across) and, in the
    second study, ranks whose steps jitter 5%: the fit, the measured jitter and the
    breakdown's exposed allreduce give the generating model back at 8 to 64 nodes."""
    study = make_study(tmp_path, jitter)
    (fam,) = projection.projections(study, "e", to=64)
    rows = {(r["nodes"], r["ranks_per_node"]): r for r in fam["rows"]}
    assert {k for k, r in rows.items() if r["kind"] == "measured"} == {
        (1, 1),
        (1, 2),
        (2, 2),
        (4, 2),
    }
    projected = {k: r for k, r in rows.items() if r["kind"] == "projected"}
    assert set(projected) == {(8, 2), (16, 2), (32, 2), (64, 2)}
    base_x = BATCH / step_of(1, 1, jitter)
    for (nodes, rpn), r in projected.items():
        n = nodes * rpn
        want = n * BATCH / step_of(nodes, rpn, jitter)
        x = r["throughput"]
        assert x["value"] == pytest.approx(want, rel=0.03)
        assert x["ci95_low"] <= want <= x["ci95_high"]
        assert r["efficiency"]["value"] == pytest.approx(want / base_x / n, rel=0.03)
        assert r["stated"] is False and r["link"] == "measured fit"
    said = "\n".join(fam["inputs"])
    assert "inter-node link: measured" in said and "jitter" in said
    assert "measured: the step-time CV of pytorch-ddp 1x1" in said
    assert "overlap (share of a step's compute the allreduce can hide behind): measured" in said
    top = projection.largest(fam)
    assert top["dominant"]["term"] == (sm.WAIT if jitter else sm.INTER_COMM)
    assert fam["links"]["inter-node"]["bandwidth_gbps"] == pytest.approx(INTER_GBPS, rel=0.05)
    held = fam["held_out"]
    assert (held["nodes"], held["ranks_per_node"]) == (4, 2)
    assert abs(held["error"]) < 0.03 and held["outside_interval"] is False


def test_the_held_out_check_flags_a_miss_beyond_its_interval(tmp_path):
    store = Store(tmp_path)
    for nodes, rpn, factor in ((1, 1, 1.0), (1, 2, 1.0), (2, 2, 1.0), (4, 2, 0.6)):
        add_point(store, tmp_path, nodes, rpn, factor)
        if nodes * rpn > 1:
            add_sweep(store, tmp_path, nodes, rpn, noise=0.02, seed=nodes)
    (fam,) = projection.projections(store, "e", to=8)
    held = fam["held_out"]
    assert held["error"] == pytest.approx(1 / 0.6 - 1, rel=0.05)
    assert held["outside_interval"] is True
    # its comm benchmark was left out of the fit that projected it
    assert "from" in held and "pytorch-ddp 4x2" not in held["from"]


def test_a_tier_not_measured_uses_the_stated_figures_and_says_so(tmp_path):
    store = Store(tmp_path)
    for nodes, rpn in ((1, 1), (1, 2)):
        add_point(store, tmp_path, nodes, rpn)
    add_sweep(store, tmp_path, 1, 2, noise=0.01)
    (fam,) = projection.projections(store, "e", to=4)
    assert all("why" in r for r in fam["rows"] if r["kind"] == "projected")
    stated = {
        commfit.INTER: commfit.Link(
            commfit.INTER, ALPHA, INTER_GBPS, ((0, 0), (0, 0)), commfit.STATED, ("p.toml",)
        )
    }
    (fam,) = projection.projections(store, "e", to=4, stated_links=stated)
    got = [r for r in fam["rows"] if r["kind"] == "projected"]
    assert [r["nodes"] for r in got] == [2, 4] and all(r["stated"] for r in got)
    for r in got:
        want = r["ranks"] * BATCH / step_of(r["nodes"], 2)
        assert r["throughput"]["value"] == pytest.approx(want, rel=0.03)
        # only the tier that was measured is called a measured fit
        assert r["link"] == "intra-node: measured fit; inter-node: stated, not measured"
    assert any("inter-node link: stated, not measured" in i for i in fam["inputs"])
    assert fam["held_out"] is None  # two scales: nothing to hold out


# --- the command -------------------------------------------------------------------------


SIZES = np.geomspace(16_000, sum(BUCKETS), 8)


def degenerate_sweeps(kind):
    """Sweeps whose fit has no latency spread: two sizes only, or times that put the
    fitted latency below zero (a fast link's small messages beat the line through the
    large ones). Either way the bandwidth is fitted alone."""
    if kind == "two sizes":
        return lambda n, nodes: [(s, model_time(s, n, nodes)) for s in (100_000, sum(BUCKETS))]

    def below_zero(n, nodes):
        inv = 1 / ((INTRA_GBPS if nodes == 1 else INTER_GBPS) * 1e9)
        wire = [commfit.allreduce_time(0.0, inv, [int(s)], n) for s in SIZES]
        return [(int(s), t - wire[0] / 2) for s, t in zip(SIZES, wire, strict=True)]

    return below_zero


@pytest.mark.parametrize("kind", ["two sizes", "latency below zero"])
def test_a_fit_without_a_latency_projects_and_reports(tmp_path, kind):
    """A CI run met this: the bandwidth-only fit's covariance has no Cholesky factor, and
    `project` and `report` ended in an internal error."""
    store = Store(tmp_path)
    sweeps = degenerate_sweeps(kind)
    for nodes, rpn in ((1, 1), (1, 2), (2, 1)):
        add_point(store, tmp_path, nodes, rpn)
        if nodes * rpn > 1:
            sweep = [{"bytes": s, "time_s": t, "rounds": 10} for s, t in sweeps(nodes * rpn, nodes)]
            assert all(e["time_s"] > 0 for e in sweep)
            add_comm(
                store,
                tmp_path,
                model_time(0, nodes * rpn, nodes, BUCKETS),
                1.0,
                record={"buckets": BUCKETS, "sweep": sweep},
                nodes=nodes,
                ranks_per_node=rpn,
                per_device_batch=BATCH,
            )
    store.save_experiment("e", "spec.toml", "[experiment]\n", "0" * 12)
    (fam,) = json.loads(
        dlscale(
            "project", "-e", "e", "--to", "8", "--format", "json", home=tmp_path, check=0
        ).stdout
    )
    link = fam["links"]["inter-node"]
    assert link["latency_us"] == 0 and "bandwidth fitted alone" in link["note"]
    projected = [r for r in fam["rows"] if r["kind"] == "projected"]
    assert {4, 8} <= {r["nodes"] for r in projected}
    for r in projected:
        x = r["throughput"]
        assert 0 < x["ci95_low"] <= x["value"] <= x["ci95_high"] < float("inf")
    dlscale("report", "-e", "e", "--out", str(tmp_path / "out"), home=tmp_path, check=0)
    assert (tmp_path / "out" / "projection.json").exists()


def test_project_prints_measured_and_projected_rows_and_the_held_out_check(study, tmp_path):
    shown = dlscale("project", "-e", "e", "--to", "16", home=tmp_path, check=0).stdout
    cells = [[c.strip() for c in x.split("│")[1:-1]] for x in shown.splitlines() if "│" in x]
    rows = [c for c in cells if len(c) == 7]  # the table's rows, not the chart's
    # every row of the table says which it is
    assert [(r[0], r[2]) for r in rows] == [
        ("1x1", "measured"),
        ("1x2", "measured"),
        ("2x2", "measured"),
        ("4x2", "measured"),
        ("8x2", "projected"),
        ("16x2", "projected"),
    ]
    assert "held-out check: 4x2 projected from" in shown and "within its interval" in shown
    assert "(projected)" in shown and "(measured)" in shown  # the chart's two series
    fams = json.loads(
        dlscale(
            "project", "-e", "e", "--to", "16", "--format", "json", home=tmp_path, check=0
        ).stdout
    )
    assert all(r["kind"] in ("measured", "projected") for f in fams for r in f["rows"])
    assert [r["nodes"] for r in fams[0]["rows"] if r["kind"] == "projected"] == [8, 16]


@pytest.mark.parametrize(
    "args,says",
    [
        (["--to", "0"], "Invalid value for '--to'"),
        (["--to", "x"], "Invalid value for '--to'"),
        (["-e", "nope", "--to", "4"], "no experiment 'nope'"),
        (["-e", "e", "--to", "4", "--profile", "missing.toml"], "missing.toml"),
        (["-e", "e", "--format", "xml", "--to", "4"], "Invalid value for '--format'"),
    ],
)
def test_bad_input_exits_2_in_one_line(study, tmp_path, args, says):
    proc = dlscale("project", *args, home=tmp_path)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert says in proc.stderr and "Traceback" not in proc.stderr


def test_without_to_or_a_profile_it_projects_to_8x_the_largest_measured(study, tmp_path):
    """One rule for the reach (the command, the report and the TUI alike): --to, else the
    partition of the profile the runs kept, else 8 x the largest measured node count,
    said under the table."""
    shown = dlscale("project", "-e", "e", home=tmp_path, check=0).stdout
    assert "projected up to 32 nodes (8 x the largest measured" in " ".join(shown.split())
    fams = json.loads(
        dlscale("project", "-e", "e", "--format", "json", home=tmp_path, check=0).stdout
    )
    assert max(r["nodes"] for f in fams for r in f["rows"]) == 32


def test_two_experiments_and_no_name_is_refused_naming_them(study, tmp_path):
    add_point(study, tmp_path, 1, 1)  # experiment "e"
    add(study, tmp_path, [breakdown(100, 0.1, 0.0)], experiment="other")
    proc = dlscale("project", "--to", "4", home=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "name one with --experiment: e, other" in proc.stderr


def test_a_bad_interconnect_is_named_by_file_line_and_field(study, tmp_path):
    profile = tmp_path / "cluster.toml"
    profile.write_text(
        'name = "c"\n[[partitions]]\nname = "p"\nnodes = 8\ncpus_per_node = 4\n'
        "[interconnect]\ninjection_gbps = -5\nlatency_us = 2\n"
    )
    proc = dlscale("project", "-e", "e", "--profile", str(profile), home=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert f"{profile}:7: interconnect.injection_gbps" in proc.stderr
    # a good one: its size is the default --to, its link is used and marked stated
    profile.write_text(profile.read_text().replace("-5", "25"))
    fams = json.loads(
        dlscale(
            "project",
            "-e",
            "e",
            "--profile",
            str(profile),
            "--format",
            "json",
            home=tmp_path,
            check=0,
        ).stdout
    )
    assert max(r["nodes"] for r in fams[0]["rows"]) == 8


# --- stated figures, declared frameworks, what the base cannot hold --------------------


A100 = ["--intra-gbps", "300", "--inter-gbps", "25", "--nics-per-node", "8"]


def test_stated_figures_project_end_to_end_through_the_cli(tmp_path):
    """What a user knows, no store: one A100's ResNet-50 figure and the links; the scales
    inside a node first, then nodes, every input said where it came from."""
    args = ["project", "--throughput", "256=2470", "--model", "resnet50", *A100]
    args += ["--devices-per-node", "8", "--to", "32"]
    (fam,) = json.loads(dlscale(*args, "--format", "json", home=tmp_path, check=0).stdout)
    scales = [(r["nodes"], r["ranks_per_node"], r["kind"]) for r in fam["rows"]]
    assert scales == [(1, 1, "stated"), (1, 2, "projected"), (1, 4, "projected")] + [
        (n, 8, "projected") for n in (1, 2, 4, 8, 16, 32)
    ]
    said = "\n".join(fam["inputs"])
    assert "stated: --model resnet50, 25,557,032 parameters" in said
    assert "--inter-gbps 25 x --nics-per-node 8" in said and "default: calibrated" in said
    assert "leave one source out" in said
    effs = []
    for r in fam["rows"][1:]:
        for k in ("throughput", "speedup", "efficiency"):
            v = r[k]
            assert 0 < v["ci95_low"] < v["value"] < v["ci95_high"], (r["ranks"], k, v)
        effs.append(r["efficiency"]["value"])
        assert r["link"] == "stated, not measured" and r["dominant"]["term"] in sm.TERMS
    assert effs == sorted(effs, reverse=True) and effs[-1] < 1
    shown = dlscale(*args, home=tmp_path, check=0).stdout
    assert "at 32x8 (projected): step" in shown and "dominant beyond compute" in shown
    assert "(stated)" in shown and "(projected, stated link)" in shown  # the chart's series


@pytest.mark.parametrize(
    "model,unit",
    [(m.id, m.unit) for m in calibration.gradients().values()]
    + [(None, "samples")],  # a bare --parameters: no model to say what a sample is
)
def test_stated_figures_count_in_the_models_own_unit(tmp_path, model, unit):
    """The unit follows the model: an image model's throughput is images/s in the table's
    column, every input and the JSON; "samples" only where no model says what is counted."""
    gradient = ["--model", model] if model else ["--parameters", "1000000"]
    args = ["project", "--throughput", "64=900", *gradient, *A100, "--to", "2"]
    shown = dlscale(*args, home=tmp_path, check=0).stdout
    assert f"{unit}/s [95%]" in shown, shown
    inputs = [line for line in shown.splitlines() if line.startswith("input: ")]
    assert any(f"{unit}/s per device" in line for line in inputs), inputs
    assert unit == "samples" or "samples/s" not in shown
    (fam,) = json.loads(dlscale(*args, "--format", "json", home=tmp_path, check=0).stdout)
    assert fam["unit"] == unit
    said = dlscale(*args, "--unit", "tokens", home=tmp_path, check=0).stdout
    assert "tokens/s [95%]" in said and f"{unit}/s" not in said  # a stated --unit wins


def test_strong_scaling_from_two_stated_batches_fits_the_overhead(tmp_path):
    args = ["project", "--throughput", "408=3331", "--throughput", "51=2600", "--model"]
    args += ["resnet50", "--gradient-dtype", "fp16", "--measured-on", "8", *A100]
    args += ["--scaling", "strong", "--global-batch", "3264", "--to", "8", "--format", "json"]
    (fam,) = json.loads(dlscale(*args, home=tmp_path, check=0).stdout)
    assert "fitted on the stated throughputs at batches 408, 51" in "\n".join(fam["inputs"])
    last = fam["rows"][-1]
    assert (last["nodes"], last["per_device_batch"]) == (8, 51)
    # per device, about the stated figure at batch 51 (less the waits and the allreduce)
    per_device = last["throughput"]["value"] / 64
    assert 0.75 * 2600 < per_device < 2600


@pytest.mark.parametrize(
    "args,says",
    [
        (["--throughput", "x"], "is not BATCH=THROUGHPUT"),
        (["--throughput", "256=-3", "--model", "resnet50"], "out of range; a throughput is"),
        (["--throughput", "256=2470", "--to", "4"], "give the gradient too"),
        (["--throughput", "256=9", "--model", "nope", "--to", "2"], "not a model dlscale knows"),
        (["--throughput", "256=9", "--model", "resnet50", "--scaling", "strong"], "--global-batch"),
        (["--throughput", "256=9", "--model", "resnet50"], "nothing to project"),
        (["--throughput", "256=9", "--model", "resnet50", "--overlap", "1"], "--overlap"),
        (["--throughput", "256=9", "--parameters", "0"], "--parameters"),
        (["-e", "e", "--throughput", "256=9", "--model", "resnet50"], "drop -e"),
    ],
)
def test_bad_stated_figures_exit_2_in_one_line(study, tmp_path, args, says):
    proc = dlscale("project", *args, home=tmp_path)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert says in proc.stderr and "Traceback" not in proc.stderr


def test_a_declared_framework_projects_from_its_comm_parameters_and_a_stated_interconnect(
    tmp_path,
):
    """No 2-rank benchmark ran: the declaration's [comm] parameters give the gradient and
    the profile's [interconnect] the links."""
    store = Store(tmp_path)
    custom = {"unit": "tokens", "comm": {"parameters": 2_000_000}}
    for rpn, x in ((1, 100.0), (2, 190.0)):
        reps = [{"throughput": x * f} for f in (0.99, 1.01)]
        add(
            store, tmp_path, reps, framework="mine", ranks_per_node=rpn, training={"custom": custom}
        )
    profile = tmp_path / "cluster.toml"
    profile.write_text(
        'name = "c"\n[[partitions]]\nname = "p"\nnodes = 16\ncpus_per_node = 4\n'
        "[interconnect]\ninjection_gbps = 10\nintra_node_gbps = 50\n"
    )
    (fam,) = json.loads(
        dlscale(
            "project", "-e", "e", "--profile", str(profile), "--format", "json",
            home=tmp_path, check=0,
        ).stdout
    )  # fmt: skip
    assert "why" not in fam, fam["why"]
    said = "\n".join(fam["inputs"])
    assert "stated: [frameworks.mine.comm] parameters, 2,000,000 as fp32" in said
    got = [r for r in fam["rows"] if r["kind"] == "projected"]
    assert max(r["nodes"] for r in got) == 16
    assert all(r["stated"] and r["throughput"]["value"] > 0 for r in got)


def test_an_allreduce_longer_than_the_whole_step_is_said_and_compute_kept(tmp_path):
    """The benchmark timed 7.7 ms for a step measured at 5.1 ms: the projection says so,
    what it means, and keeps the base's step as compute instead of dropping it."""
    store = Store(tmp_path)
    step = 0.0051
    add(store, tmp_path, [{"throughput": 8 / 0.004}] * 2)
    add(store, tmp_path, [{"throughput": 16 / step}] * 2, ranks_per_node=2)
    inv = 0.0077 / sum(BUCKETS)
    sweep = [{"bytes": int(s), "time_s": float(s) * inv} for s in np.geomspace(1e4, 1e6, 6)]
    add_comm(
        store, tmp_path, 0.0077, 0.1, record={"buckets": BUCKETS, "sweep": sweep},
        ranks_per_node=2,
    )  # fmt: skip
    (fam,) = projection.projections(store, "e", to=4, per_node=4)
    (note,) = fam["notes"]
    assert "longer than its whole measured step (5.1 ms)" in note
    assert "comm benchmark's 7.7 ms" in note and "timed a slower one" in note
    one_by_four = next(r for r in fam["rows"] if (r["nodes"], r["ranks_per_node"]) == (1, 4))
    assert one_by_four["terms_s"][sm.COMPUTE] == pytest.approx(step, rel=0.05)
    shown = dlscale(
        "project", "-e", "e", "--to", "1", "--devices-per-node", "4", home=tmp_path, check=0
    ).stdout
    assert "the base's allreduce" in shown


def test_a_measured_points_interval_is_the_results_tables_and_never_below_zero(tmp_path):
    """One interval of a measured point everywhere: the projection's measured rows show
    `dlscale results`' mean ± CI95 (its low end at 0 at the least), the baseline's speedup
    is 1 exactly, and another point's is Fieller's over both points' repetitions."""
    from dlscale.engine.results import analysis, stats

    store = Store(tmp_path)
    add(store, tmp_path, [{"throughput": x} for x in (10.0, 100.0, 1000.0)])
    add(store, tmp_path, [{"throughput": x} for x in (20.0, 300.0)], ranks_per_node=2)
    (fam,) = projection.projections(store, "e", to=2)
    shown = {r["ranks"]: r for r in analysis.results(store, "e")}
    for r in fam["rows"]:
        if r["kind"] == "measured":
            res = shown[r["ranks"]]
            x = r["throughput"]
            assert x["value"] == res["throughput"]
            assert x["ci95_low"] == max(0.0, res["throughput"] - res["throughput_ci95"])
            assert x["ci95_high"] == res["throughput"] + res["throughput_ci95"]
            for k in ("throughput", "speedup", "efficiency"):
                high = r[k]["ci95_high"]
                assert 0 <= r[k]["ci95_low"] <= r[k]["value"] <= (high if high else float("inf"))
    one = next(r for r in fam["rows"] if r["ranks"] == 1)
    assert one["speedup"] == {"value": 1.0, "ci95_low": 1.0, "ci95_high": 1.0}
    two = next(r for r in fam["rows"] if r["ranks"] == 2)
    expected = stats.fieller([10.0, 100.0, 1000.0], [20.0, 300.0])
    assert two["speedup"]["ci95_low"] == pytest.approx(expected.low)


def test_report_takes_a_profile_for_the_links_it_states(tmp_path):
    store = Store(tmp_path)
    for rpn in (1, 2):
        add_point(store, tmp_path, 1, rpn)
    add_sweep(store, tmp_path, 1, 2, noise=0.01)
    store.save_experiment("e", "spec.toml", "[experiment]\n", "0" * 12)
    profile = tmp_path / "cluster.toml"
    profile.write_text(
        'name = "c"\n[[partitions]]\nname = "p"\nnodes = 4\ncpus_per_node = 4\n'
        "[interconnect]\ninjection_gbps = 4\n"
    )
    out = tmp_path / "out"
    dlscale(
        "report", "-e", "e", "--profile", str(profile), "--out", str(out), home=tmp_path, check=0
    )
    (fam,) = json.loads((out / "projection.json").read_text())
    got = [r for r in fam["rows"] if r["kind"] == "projected" and r["nodes"] > 1]
    assert [r["nodes"] for r in got] == [2, 4] and all("throughput" in r for r in got)
    assert all(
        r["link"] == "intra-node: measured fit; inter-node: stated, not measured" for r in got
    )
    assert "partition p of" in (out / "report.md").read_text()


# --- the report ----------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["md", "html"])
def test_the_report_has_the_section_and_its_figure(tmp_path, fmt):
    from test_report import check_figures, check_png, md_table

    from dlscale.engine.results.report import document as reporting

    store = Store(tmp_path)
    for nodes, rpn, factor in ((1, 1, 1.0), (1, 2, 1.0), (2, 2, 1.0), (4, 2, 0.6)):
        add_point(store, tmp_path, nodes, rpn, factor)
        if nodes * rpn > 1:
            add_sweep(store, tmp_path, nodes, rpn, noise=0.02, seed=nodes)
    store.save_experiment("e", "spec.toml", "[experiment]\n", "0" * 12)
    rep = reporting.build(store, "e", tmp_path / "out", fmt)
    text = rep.path.read_text()
    table = rep.tables["projection"]
    assert table.title == "Scaling beyond what was measured"
    kinds = [(r[0], r[2]) for r in table.rows]  # one family: no family column
    assert kinds[:4] == [
        ("1x1", "measured"),
        ("1x2", "measured"),
        ("2x2", "measured"),
        ("4x2", "measured"),
    ]
    # no profile was kept: 8 x the largest measured node count, said so
    assert kinds[4:] == [("8x2", "projected"), ("16x2", "projected"), ("32x2", "projected")]
    assert any("no cluster profile was kept" in n for n in table.notes)
    (alert,) = table.alerts  # the 4x2 point was measured 40% below the model
    assert "held-out check: 4x2" in alert and "OUTSIDE its interval" in alert
    check_figures(rep)  # every series visibly drawn in its own colour, as the others
    fig = {f.name: f for f in rep.figures}["projection-efficiency"]
    assert any("(projected)" in k for k in fig.series) and "ideal" in fig.series
    check_png(fig.path)
    assert {f.name: f for f in rep.figures}["projection-throughput"].series[
        "held-out check (missed)"
    ]
    if fmt == "md":
        assert (
            md_table(text, "Scaling beyond what was measured")[0]["measured/projected"]
            == "measured"
        )
        assert f"**{alert}**" in text and "figures/projection-efficiency.png" in text
    else:
        assert f'<p class="note alert">{alert}</p>' in text
    assert json.loads((tmp_path / "out" / "projection.json").read_text())[0]["held_out"][
        "outside_interval"
    ]


def test_sweep_entries_that_are_not_a_size_and_a_time_are_left_out_and_named(tmp_path):
    store = Store(tmp_path)
    good = [{"bytes": s, "time_s": model_time(s, 2, 2)} for s in (10**4, 10**5, 10**6)]
    bad = ["x", {"bytes": -1, "time_s": 1.0}, {"bytes": 100, "time_s": "a"}, {"time_s": 1.0}]
    add_comm(
        store,
        tmp_path,
        0.01,
        1.0,
        record={"buckets": BUCKETS, "sweep": good + bad},
        nodes=2,
        ranks_per_node=1,
    )
    data = commfit.measurements(store, "e")
    assert len(data.samples) == 3
    assert [n.split(": ")[1] for n in data.skipped] == [
        f"comm.sweep[{i}] is not a size and time" for i in (3, 4, 5, 6)
    ]
    link = data.links("pytorch-ddp")[commfit.INTER]
    assert link.bandwidth_gbps == pytest.approx(INTER_GBPS, rel=1e-6)


async def test_the_results_screen_draws_the_projection_and_says_a_missed_check_in_red(tmp_path):
    """Issue 26, item 4 in the TUI: m reaches the projection (its own series past the
    measured scales), and a held-out check that missed its interval is said in red."""
    from test_tui_results import show_projection

    from dlscale.engine.session import Session
    from dlscale.tui.app import DlscaleApp
    from test_tui import field, until

    store = Store(tmp_path)
    for nodes, rpn, factor in ((1, 1, 1.0), (1, 2, 1.0), (2, 2, 1.0), (4, 2, 0.6)):
        add_point(store, tmp_path, nodes, rpn, factor)
        if nodes * rpn > 1:
            add_sweep(store, tmp_path, nodes, rpn, noise=0.02, seed=nodes)
    store.close()
    app = DlscaleApp(Session(tmp_path, "local"), watch=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await show_projection(pilot)
        await until(
            pilot,
            lambda: field(app, "held-out").display,
            what=[n.message for n in app._notifications],
        )
        box = field(app, "held-out")
        assert box.has_class("missed") and "MISSED" in str(box.render())
        assert "OUTSIDE its interval" in str(box.render())


def _noisy_study(home, spread: float, gain: float) -> Store:
    """The synthetic study with its 1-device point's repetitions `spread` apart (relative)
    and the 2-rank point at `gain` times ideal."""
    store = Store(home)
    x1 = BATCH / step_of(1, 1)
    reps = [breakdown(x1 * (1 + spread * f), LOCAL_S, 0.0) for f in (-1.0, 0.0, 1.0)]
    add(store, home, reps, nodes=1, ranks_per_node=1, per_device_batch=BATCH)
    add_point(store, home, 1, 2, factor=gain * 2 * x1 / (2 * BATCH / step_of(1, 2)))
    add_sweep(store, home, 1, 2, noise=0.02, seed=1)
    add_sweep(store, home, 2, 2, noise=0.02, seed=2)
    return store


@settings(max_examples=12, deadline=None)
@given(spread=st.floats(0.0, 0.8), gain=st.floats(0.4, 1.0))
def test_speedup_and_efficiency_stop_at_ideal_without_evidence_of_more(
    tmp_path_factory, spread, gain
):
    """Issue 49: a noisy 1-device point stretched the upper bounds (efficiency 0.50 [0.26,
    2.52]); whatever the noise, no speedup or efficiency interval, measured or projected,
    reaches past ideal without a point measured super-linear, and a noisy base says how
    much it varies."""
    home = tmp_path_factory.mktemp("ideal")
    store = _noisy_study(home, spread, gain)
    (fam,) = projection.projections(store, "e", to=4)
    rows = [r for r in fam["rows"] if "efficiency" in r]
    assert {r["kind"] for r in rows} == {"measured", "projected"}
    for r in rows:
        eff, sp = r["efficiency"], r["speedup"]
        assert eff["ci95_low"] <= eff["value"] <= eff["ci95_high"] <= max(1.0, eff["value"])
        assert sp["ci95_high"] <= max(float(r["ranks"]), sp["value"]) + 1e-9
    said = " ".join(fam["bounds"])
    half = bounds.noisy_baseline(analysis_baseline(store)) if spread else []
    assert ("varies ±" in said) == bool(half), said


def analysis_baseline(store):
    from dlscale.engine.results import analysis

    (pt,) = [p for p in analysis.points(store, "e") if p.devices == 1]
    return pt


def test_a_point_measured_super_linear_keeps_bounds_past_ideal_and_says_why(tmp_path):
    store = _noisy_study(tmp_path, 0.0, 1.3)  # 2 ranks at 1.3x ideal, tight: evidence
    (fam,) = projection.projections(store, "e", to=4)
    assert any("super-linear scaling measured at 1x2" in line for line in fam["bounds"])
    two = next(r for r in fam["rows"] if r["kind"] == "measured" and r["ranks"] == 2)
    assert two["efficiency"]["ci95_low"] > 1
    shown = dlscale("project", "-e", "e", "--to", "4", home=tmp_path, check=0).stdout
    assert "super-linear scaling measured at 1x2" in shown
