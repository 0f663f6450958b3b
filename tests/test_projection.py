"""Past the measured scales: the alpha-beta fit recovers known links from noisy sweeps, a
synthetic study's projection matches the model that generated it, the held-out check
computes its error and flags a miss, and `dlscale project` refuses bad input in one line."""

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_efficiency_results import add, add_comm, breakdown

from conftest import dlscale
from dlscale.engine.results import commfit, projection
from dlscale.engine.tracking.store import Store

BUCKETS = [1_049_000, 29_888]
ALPHA = 40e-6  # s per latency step
INTRA_GBPS, INTER_GBPS = 20.0, 4.0
LOCAL_S = 0.25  # a node's step without communication (per-device batch 32)
BATCH = 32


def model_time(nbytes, n, nodes, buckets=None):
    gbps = INTRA_GBPS if nodes == 1 else INTER_GBPS
    return commfit.allreduce_time(ALPHA, 1 / (gbps * 1e9), buckets or [nbytes], n)


# --- the fit ---------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("alpha,gbps", [(5e-6, 100.0), (40e-6, 4.0), (1e-3, 0.5)])
def test_the_fit_recovers_latency_and_bandwidth_from_noisy_sweeps(seed, alpha, gbps):
    rng = np.random.default_rng(seed)
    samples = [
        commfit.Sample("r", "f", 2, n, int(s), t * (1 + 0.03 * rng.standard_normal()))
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
    base = projection.Base(2, 32, projection.Mean(64 / step_s, 0.05 * 64 / step_s, 3), None, None)
    one = projection.Mean(32 / step_s, 0.05 * 32 / step_s, 3)
    for nodes in (2, 16, 1024):
        got = projection.project(base, one, links, BUCKETS, nodes, 2, samples=200, seed=seed)
        for name in ("step_time_s", "throughput", "speedup", "efficiency"):
            e = got[name]
            assert all(math.isfinite(v) for v in (e.value, e.low, e.high)), (name, e)
            assert e.low <= e.value * (1 + 1e-9) and e.value <= e.high * (1 + 1e-9), (name, e)


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


def step_of(nodes, rpn):
    """The generating model: no overlap (all the allreduce exposed)."""
    return LOCAL_S + model_time(0, nodes * rpn, nodes, BUCKETS)


def add_point(store, tmp_path, nodes, rpn, factor=1.0):
    n = nodes * rpn
    c = model_time(0, n, nodes, BUCKETS)
    x = n * BATCH / step_of(nodes, rpn) * factor
    reps = [breakdown(x * f, LOCAL_S, c) for f in (0.99, 1.0, 1.01)]
    add(store, tmp_path, reps, nodes=nodes, ranks_per_node=rpn, per_device_batch=BATCH)


@pytest.fixture
def study(tmp_path):
    store = Store(tmp_path)
    for nodes, rpn in ((1, 1), (1, 2), (2, 2), (4, 2)):
        add_point(store, tmp_path, nodes, rpn)
        if nodes * rpn > 1:
            add_sweep(store, tmp_path, nodes, rpn, noise=0.02, seed=nodes)
    return store


def test_a_synthetic_studys_projection_matches_its_generating_model(study):
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
    base_x = BATCH / step_of(1, 1)
    for (nodes, rpn), r in projected.items():
        n = nodes * rpn
        want = n * BATCH / step_of(nodes, rpn)
        x = r["throughput"]
        assert x["value"] == pytest.approx(want, rel=0.03)
        assert x["ci95_low"] <= want <= x["ci95_high"]
        assert r["efficiency"]["value"] == pytest.approx(want / base_x / n, rel=0.03)
        assert r["stated"] is False and any("inter-node link: measured" in i for i in r["inputs"])
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
    (fam,) = projection.projections(store, "e", to=4, stated=stated)
    got = [r for r in fam["rows"] if r["kind"] == "projected"]
    assert [r["nodes"] for r in got] == [2, 4] and all(r["stated"] for r in got)
    for r in got:
        want = r["ranks"] * BATCH / step_of(r["nodes"], 2)
        assert r["throughput"]["value"] == pytest.approx(want, rel=0.03)
        assert any("stated, not measured" in i for i in r["inputs"])
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
    rows = [c for c in cells if len(c) == 8]  # the table's rows, not the chart's
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
        (["-e", "e"], "give --to NODES"),
        (["-e", "e", "--to", "4", "--profile", "missing.toml"], "missing.toml"),
        (["-e", "e", "--format", "xml", "--to", "4"], "Invalid value for '--format'"),
    ],
)
def test_bad_input_exits_2_in_one_line(study, tmp_path, args, says):
    proc = dlscale("project", *args, home=tmp_path)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert says in proc.stderr and "Traceback" not in proc.stderr


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


# --- the report ----------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["md", "html"])
def test_the_report_has_the_section_and_its_figure(tmp_path, fmt):
    from test_report import check_figures, check_png, md_table

    from dlscale.engine.results import report as reporting

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
    kinds = [(r[1], r[3]) for r in table.rows]
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


@pytest.mark.parametrize("seed", range(40))
def test_the_projection_returns_the_base_at_its_own_scale_and_never_gains_with_more_nodes(seed):
    """Any base, link and overlap: projected back to the base's own scale it gives the
    base's measurement; weak scaling past it, the step never shortens, so efficiency
    never rises and throughput never falls."""
    rng = np.random.default_rng(seed)
    g = int(rng.choice([1, 2, 4, 8]))
    buckets = [int(b) for b in rng.integers(10**3, 10**8, size=int(rng.integers(1, 6)))]
    links = {
        tier: commfit.Link(
            tier,
            float(rng.uniform(0, 1e-4)),
            float(rng.uniform(0.5, 300)),
            ((0.0, 0.0), (0.0, 0.0)),
            commfit.STATED,
            ("x",),
        )
        for tier in commfit.TIERS
    }
    c_g = links[commfit.INTRA].time_s(buckets, g)
    step = c_g + float(rng.uniform(0.01, 1.0))
    exposed = None if rng.random() < 0.3 else float(rng.uniform(0, c_g))
    x = g * 32 / step
    base = projection.Base(g, 32, projection.Mean(x, 0.0, 1), exposed, None)
    one = projection.Mean(float(rng.uniform(0.5, 1.5)) * 32 / step, 0.0, 1)
    at_base = projection.project(base, one, links, buckets, 1, g, samples=10)
    assert at_base["throughput"].value == pytest.approx(x, rel=1e-9)
    last = at_base
    for nodes in (2, 4, 16, 128, 1024):
        got = projection.project(base, one, links, buckets, nodes, g, samples=10)
        assert got["step_time_s"].value >= last["step_time_s"].value * (1 - 1e-12)
        assert got["efficiency"].value <= last["efficiency"].value * (1 + 1e-12)
        assert got["throughput"].value >= last["throughput"].value * (1 - 1e-12)
        last = got


async def test_the_results_screen_draws_the_projection_and_says_a_missed_check_in_red(tmp_path):
    """Issue 26, item 4 in the TUI: m reaches the projection (its own series past the
    measured scales), and a held-out check that missed its interval is said in red."""
    from dlscale.engine.session import Session
    from dlscale.tui.app import DlscaleApp
    from dlscale.tui.results import PROJECTED
    from test_tui import field, until

    store = Store(tmp_path)
    for nodes, rpn, factor in ((1, 1, 1.0), (1, 2, 1.0), (2, 2, 1.0), (4, 2, 0.6)):
        add_point(store, tmp_path, nodes, rpn, factor)
        if nodes * rpn > 1:
            add_sweep(store, tmp_path, nodes, rpn, noise=0.02, seed=nodes)
    store.close()
    app = DlscaleApp(Session(tmp_path, "local"), watch=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("f4")
        await until(pilot, lambda: app.screen.results, 20, "the results")
        while app.screen.metric != PROJECTED:
            await pilot.press("m")
        await until(
            pilot,
            lambda: field(app, "held-out").display,
            30,
            [n.message for n in app._notifications],
        )
        box = field(app, "held-out")
        assert box.has_class("missed") and "MISSED" in str(box.render())
        assert "OUTSIDE its interval" in str(box.render())
