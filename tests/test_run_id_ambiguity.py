"""Digits that are a Slurm job's id and also begin another run's id name neither (issue
22, item 12): `cancel 2111` once cancelled the job's run c0c9b0f6a481, not run
2111bcf9704f; now every command that takes a run is exit 2 listing both, touching none."""

from __future__ import annotations

import pytest

from conftest import HANG_S, dlscale
from dlscale.engine.errors import NotFoundError
from dlscale.engine.tracking.follow import find_run
from dlscale.engine.tracking.store import Store


def _row(run_id: str, state: str) -> dict:
    return {
        "run_id": run_id,
        "point_id": "p" + run_id,
        "experiment": "e",
        "nodes": 1,
        "ranks_per_node": 1,
        "state": state,
        "run_dir": f"/nonexistent/{run_id}",
    }


def _store(home) -> Store:
    store = Store(home)
    store.restore_run(_row("c0c9b0f6a481", "RUNNING"))
    store.update_run("c0c9b0f6a481", backend="slurm", job_id="2111")
    store.jobs.add("slurm", "2111", "c0c9b0f6a481", "RUNNING")
    store.restore_run(_row("2111bcf9704f", "RUNNING"))
    return store


def test_digits_naming_a_job_and_another_runs_prefix_are_ambiguous(home):
    store = _store(home)
    for ident in ("2111", "21", "2"):
        if ident != "2111":  # only the job id itself names the job
            assert find_run(store, ident)["run_id"] == "2111bcf9704f"
            continue
        with pytest.raises(NotFoundError) as caught:
            find_run(store, ident)
        said = str(caught.value)
        assert "slurm job 2111 (of run c0c9b0f6a481)" in said and "run 2111bcf9704f" in said
    # a whole run id is never ambiguous; a job id with no such run prefix is the job
    assert find_run(store, "2111bcf9704f")["run_id"] == "2111bcf9704f"
    store.jobs.add("slurm", "777", "2111bcf9704f", "RUNNING")
    assert find_run(store, "777")["run_id"] == "2111bcf9704f"
    store.close()
    for argv in (["cancel", "2111"], ["logs", "2111"], ["resubmit", "2111"]):
        proc = dlscale(*argv, home=home, timeout=HANG_S)
        assert proc.returncode == 2 and "is ambiguous" in proc.stderr, (argv, proc.stderr)
    assert {r["state"] for r in Store(home).runs()} == {"RUNNING"}  # nothing cancelled
