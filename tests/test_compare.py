"""`dlscale compare`: points matched by configuration across sites, the ratio's Fieller
interval, Welch's test, env differences, unmatched points listed. Stores are built from the
quickstart's recorded records with their throughputs set, and one is carried by a bundle."""

import json
import math

import pytest
import scipy.stats
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import dlscale
from dlscale.engine.results import compare, stats
from dlscale.engine.tracking.store import Store
from tui_text import recorded_study


def _setting(throughputs: dict[tuple[int, int], list[float]], torch: str | None = None):
    """An edit for recorded_study: each point's (nodes, ranks) repetitions get these
    throughputs in turn; the env record's torch version is changed where given."""
    taken: dict[tuple[int, int], int] = {}

    def edit(run_id, lines):
        recs = [json.loads(line) for line in lines]
        params = next(r for r in recs if r["kind"] == "params")
        env = next(r for r in recs if r["kind"] == "env")
        key = (len(env["nodes"]), params["world_size"] // len(env["nodes"]))
        i = taken.get(key, 0)
        taken[key] = i + 1
        for r in recs:
            if r["kind"] == "summary":
                r["throughput"] = throughputs[key][i]
            if r["kind"] == "env" and torch:
                r["framework_versions"]["torch"] = torch
        return [json.dumps(r) + "\n" for r in recs]

    return edit


@pytest.fixture(scope="module")
def two_sites(tmp_path_factory):
    """Site A (this store): 1x1 and 1x2; site beta (imported): 1x2 about half as fast on a
    newer torch, and its 1-device point at another batch (no partner on either side)."""
    tmp = tmp_path_factory.mktemp("compare")
    here, there = tmp / "here", tmp / "there"
    recorded_study(here, _setting({(1, 1): [100, 102, 98], (1, 2): [190, 194, 186]}))
    recorded_study(
        there,
        _setting({(1, 1): [60, 61, 59], (1, 2): [95, 97, 93]}, torch="2.99.0"),
    )
    store = Store(there)
    store.conn.execute("UPDATE runs SET per_device_batch=128, global_batch=128 WHERE devices=1")
    store.close()
    bundle = tmp / "beta.tar.gz"
    dlscale(
        "export",
        "bundle",
        "-e",
        "quickstart",
        "--site",
        "beta",
        "--out",
        str(bundle),
        home=there,
        check=0,
    )
    dlscale("import", str(bundle), home=here, check=0)
    return here


def test_points_match_by_configuration_and_the_unmatched_are_listed(two_sites):
    proc = dlscale(
        "compare", "quickstart", "quickstart@beta", "--format", "json", home=two_sites, check=0
    )
    data = json.loads(proc.stdout)
    assert data["b"] == "quickstart@beta" and data["sites"][1] == "beta"
    matched = [r for r in data["rows"] if r["matched"]]
    assert [(r["nodes"], r["ranks_per_node"]) for r in matched] == [(1, 2)]
    (pair,) = matched
    assert pair["a"]["throughput"] == pytest.approx(190)
    assert pair["b"]["throughput"] == pytest.approx(95)
    assert pair["ratio"] == pytest.approx(0.5)
    assert pair["ratio_low"] < 0.5 < pair["ratio_high"]
    assert pair["significant"] is True and pair["p_value"] < 0.001
    assert pair["a"]["speedup"] == pytest.approx(1.9)  # against A's own 1-device point
    assert pair["b"]["speedup"] is None  # B's 1-device point is at another batch
    assert pair["env_differences"]["torch"] == ["2.13.0+cpu", "2.99.0"]
    unmatched = [(r["per_device_batch"], r["a"] is None) for r in data["rows"] if not r["matched"]]
    assert sorted(unmatched) == [(64, False), (128, True)]  # A's 1x1 b64, B's 1x1 b128
    table = dlscale("compare", "quickstart", "quickstart@beta", home=two_sites, check=0).stdout
    assert "only in A (quickstart)" in table and "only in B (quickstart@beta)" in table
    assert "Fieller" in table and "Welch" in table and "torch: 2.13.0+cpu -> 2.99.0" in table


def test_an_experiment_against_itself_is_not_significant(two_sites):
    data = compare.side_by_side(Store(two_sites), "quickstart", "quickstart")
    for r in data["rows"]:
        assert r["matched"] and r["ratio"] == pytest.approx(1.0)
        assert r["significant"] is False and r["env_differences"] == {}


def test_unknown_experiment_is_refused(two_sites):
    proc = dlscale("compare", "quickstart", "nope", home=two_sites, check=2)
    assert "no experiment 'nope'" in proc.stderr


samples = st.lists(st.floats(10, 1000), min_size=2, max_size=8)


@settings(max_examples=60, deadline=None)
@given(a=samples, b=samples)
def test_welch_is_scipys_and_fieller_is_the_set_the_t_test_accepts(a, b):
    """Property: the p value is scipy.stats' Welch test; Fieller's interval is exactly the
    ratios r for which |mean(b) - r mean(a)| / sqrt(var_b + r^2 var_a) <= t."""
    if len(set(a)) < 2 or len(set(b)) < 2:
        return
    test = stats.welch(a, b)
    ref = scipy.stats.ttest_ind(b, a, equal_var=False)
    assert test.p == pytest.approx(ref.pvalue, rel=1e-6, abs=1e-12)
    r = stats.fieller(a, b)
    ma, mb = sum(a) / len(a), sum(b) / len(b)
    va = scipy.stats.tvar(a) / len(a)
    vb = scipy.stats.tvar(b) / len(b)
    t = scipy.stats.t.ppf(0.975, test.df)

    def statistic(x):
        return abs(mb - x * ma) / math.sqrt(vb + x * x * va)

    assert statistic(r.value) == pytest.approx(0, abs=1e-9)
    if r.high is None:
        return
    # the bounds are where the statistic reaches t (the set it accepts is [low, high])
    assert statistic(r.low) == pytest.approx(t, rel=1e-6)
    assert statistic(r.high) == pytest.approx(t, rel=1e-6)
    assert r.low < r.value < r.high


def test_a_report_of_both_sites_has_a_site_column_and_overlaid_figures(two_sites, tmp_path):
    from dlscale.engine.results.report import document as report

    made = report.build(Store(two_sites), ["quickstart", "quickstart@beta"], tmp_path / "r")
    table = made.tables["results"]
    assert table.headers[:2] == ["experiment", "site"]
    assert {(row[0], row[1]) for row in table.rows} == {
        ("quickstart", made.rows[0]["site"]),
        ("quickstart@beta", "beta"),
    }
    throughput = next(f for f in made.figures if f.name == "throughput")
    lines = {label.split(" ")[1] for label in throughput.series if label.startswith("pytorch")}
    assert lines == {"quickstart", "quickstart@beta"}  # one line per experiment, overlaid
    text = made.path.read_text()
    assert "| experiment | site |" in text and "quickstart@beta" in text
    proc = dlscale(
        "report",
        "-e",
        "quickstart",
        "-e",
        "quickstart@beta",
        "--out",
        str(tmp_path / "cli"),
        home=two_sites,
        check=0,
    )
    assert "report of quickstart + quickstart@beta" in proc.stdout


async def test_the_results_screen_shows_two_experiments_side_by_side(two_sites):
    """Issue 27, item 2 in the TUI: c on the Results screen puts this experiment beside
    the other one the store holds (here one imported from site beta), matched points with
    their ratio and the environment that differs, unmatched ones listed under it."""
    from textual.widgets import DataTable

    from dlscale.engine.session import Session
    from dlscale.tui.app import DlscaleApp
    from dlscale.tui.dialogs import CompareScreen
    from test_tui import until

    app = DlscaleApp(Session(two_sites, "local"))
    async with app.run_test(size=(200, 40)) as pilot:
        await until(pilot, lambda: app.snapshot is not None, what="the first refresh")
        app.experiment = "quickstart"
        await pilot.press("f4")
        await pilot.press("c")
        await until(pilot, lambda: isinstance(app.screen, CompareScreen), what="the comparison")
        table = app.screen.query_one(DataTable)
        # 1x2 matched; the 1-device points have no partner (the rows come at the screen's mount)
        await until(pilot, lambda: table.row_count >= 1, what="the matched point")
        assert table.row_count == 1
        cells = [str(c) for c in table.get_row_at(0)]
        # model, framework and batch, one value each, are named above the table
        assert cells[0] == "1x2" and "torch: 2.13.0+cpu -> 2.99.0" in cells[-1], cells
        # each column as wide as its widest cell from the start (tui/columns.py: a first
        # frame drawn before Textual measures auto widths stays cut)
        assert all(not c.auto_width for c in table.columns.values())
        assert [c.width for c in table.columns.values()][0] == len("scale")
        title = str(app.screen.query("Plain").first().render())
        assert "all model resnet20, framework pytorch-ddp, batch/dev 64" in title, title
        notes = str(app.screen.query("Plain").last().render())
        assert "only in" in notes and "Fieller" in notes
