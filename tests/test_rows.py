"""The typed rows (runs.RunRow, runs.JobRow) are the store's tables, column for column, and a
run row's configuration part is runs.Configuration: a column added to one and not the other
fails here, before a reader relies on a key the type checker was never told about."""

import typing

from dlscale.engine.runs import CONFIGURATION, Configuration, JobRow, RunRow
from dlscale.engine.tracking.store import Store


def _columns(store: Store, table: str) -> set[str]:
    return {r[1] for r in store.conn.execute(f"PRAGMA table_info({table})")}


def test_the_row_types_are_the_store_tables(tmp_path):
    store = Store(tmp_path)
    assert set(RunRow.__annotations__) == _columns(store, "runs")
    assert set(JobRow.__annotations__) == _columns(store, "jobs")


def test_a_run_rows_configuration_is_the_configuration():
    row = typing.get_type_hints(RunRow)
    config = typing.get_type_hints(Configuration)
    assert {name: row[name] for name in CONFIGURATION} == config


def test_a_store_row_has_every_key_its_type_names(tmp_path):
    """What the store returns is what the types say, not a subset."""
    from test_store import make_run

    store = Store(tmp_path)
    run = make_run()
    row = store.add_run(run)
    assert set(row) == set(RunRow.__annotations__)
    store.jobs.add("local", "local-1", run.run_id, "PENDING", {})
    job = store.jobs.get("local", "local-1")
    assert job is not None and set(job) == set(JobRow.__annotations__)


def test_a_projection_is_made_of_its_typed_rows_and_nothing_else(tmp_path):
    """Issue 48, item 3: a projection crosses the CLI, the report and the TUI as Family,
    ProjectionRow, HeldOut and Interval (engine/results/rows.py): whatever the builders
    put in, from a measured study (with its held-out check) and from stated figures, is a
    key those types name, with an Interval's three keys wherever one is."""
    from test_projection import make_study

    from dlscale.engine.results.projection import project, stated
    from dlscale.engine.results.rows import Family, HeldOut, Interval, ProjectionRow

    def keys(t) -> set[str]:
        return set(typing.get_type_hints(t))

    make_study(tmp_path)
    figures = stated.Figures(
        {256.0: 2470.0}, model="resnet50", intra_gbps=300.0, inter_gbps=25.0, nics_per_node=8
    )
    families = list(project.of_study(Store(tmp_path), "e", to=8).families)
    families += project.of_figures(figures, 16, 8).families
    intervals = ("throughput", "step_time_s", "speedup", "efficiency")
    seen_rows = seen_held = 0
    for fam in families:
        assert set(fam) <= keys(Family), set(fam) - keys(Family)
        for row in fam["rows"]:
            seen_rows += 1
            assert set(row) <= keys(ProjectionRow), set(row) - keys(ProjectionRow)
            for k in intervals:
                if k in row:
                    assert set(row[k]) == keys(Interval), (k, row[k])
        if fam.get("held_out"):
            seen_held += 1
            assert set(fam["held_out"]) <= keys(HeldOut), set(fam["held_out"]) - keys(HeldOut)
    assert seen_rows >= 6 and seen_held >= 1
