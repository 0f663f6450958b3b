"""Run ids the user types (issue 11, item 7): a literal hex prefix or a job id, never a SQL
pattern. `%`, `_`, `*`, `""` and other non-hex text are refused with exit 2 by every
command that takes one, and nothing is touched."""

from __future__ import annotations

import json

import pytest
from test_store import line, make_run

from dlscale.engine.cli import main
from dlscale.engine.tracking.store import Store

RULE = "a run id is 12 hex digits or a unique prefix of them"
COMMANDS = [["logs"], ["cancel"], ["resubmit"], ["export", "mllog"], ["rerun"]]
NOT_IDS = ["", "%", "_", "*", "ZZ", "%%", "a%", "_b", "[a-f]*", "4B75", " 4b", "local-%"]


@pytest.fixture
def one_run(home):
    """A store with one queued local run that has a log and records: any pattern that
    matched it would resolve (a LIKE '%' matches the only run)."""
    store = Store(home)
    run = make_run()
    store.add_run(run)
    store.start_attempt(run.run_id)
    store.jobs.add("slurm", "4242", run.run_id, "COMPLETED")  # an earlier attempt's job
    store.jobs.add("local", "local-1", run.run_id, "PENDING")
    (home / "runs" / run.run_id / "run.log").write_text("the run's log\n")
    metrics = home / "runs" / run.run_id / "metrics.jsonl"
    metrics.write_text(line("interval", step=1, images_per_s=1.0, loss=0.5))
    store.records.ingest(run.run_id, metrics)
    store.close()
    return run.run_id


def dlscale_in_process(capsys, *args):
    """`dlscale ARGS` in this process (its main, as the console script runs it): (exit
    status, stdout, stderr)."""
    try:
        main(list(args))
        code = 0
    except SystemExit as done:
        code = done.code
    return code, *capsys.readouterr()


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c))
def test_patterns_and_non_hex_are_refused_and_touch_nothing(home, one_run, capsys, command):
    before = Store(home).runs()
    for ident in NOT_IDS:
        code, out, err = dlscale_in_process(capsys, *command, ident)
        assert code == 2, (ident, out, err)
        assert RULE in err and "Traceback" not in err, (ident, err)
    assert Store(home).runs() == before  # nothing cancelled, resubmitted or rerun
    assert Store(home).jobs.find("local")[0]["state"] == "PENDING"


def test_hex_prefixes_and_job_ids_still_resolve(home, one_run, capsys):
    for ident in (one_run, one_run[:1], one_run[:6], "local-1", "4242"):
        code, out, err = dlscale_in_process(capsys, "logs", ident)
        assert (code, out) == (0, "the run's log\n"), (ident, err)
    code, out, _ = dlscale_in_process(capsys, "export", "mllog", one_run[:4])
    assert code == 0 and json.loads(out.splitlines()[0].split(" ", 1)[1])["key"]
    other = "f" if one_run[0] != "f" else "0"
    code, _, err = dlscale_in_process(capsys, "logs", other)
    assert code == 2 and f"no run '{other}'" in err


def test_an_ambiguous_prefix_names_the_candidates(home, one_run, capsys):
    store = Store(home)
    twin = one_run[:3] + ("0" if one_run[3] != "0" else "1") * 9
    store.add_rerun(store.run(one_run), twin)
    code, _, err = dlscale_in_process(capsys, "logs", one_run[:3])
    assert code == 2 and "ambiguous" in err and one_run in err and twin in err
