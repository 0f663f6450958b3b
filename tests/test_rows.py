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
