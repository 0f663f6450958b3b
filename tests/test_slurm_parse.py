"""Parsers against output recorded from Slurm 22.05 (tests/fixtures/README.md)."""
from pathlib import Path

import pytest

from dlscale.engine.schedulers.slurm_parse import (
    ParseError,
    expand_array,
    map_state,
    parse_sacct,
    parse_sacct_json,
    parse_sbatch,
    parse_squeue,
)

FIX = Path(__file__).parent / "fixtures"
R22 = FIX / "slurm-22.05"


def test_sbatch_parsable():
    assert parse_sbatch((R22 / "sbatch-parsable.txt").read_text()) == "6"
    assert parse_sbatch("4242;cluster2\n") == "4242"
    with pytest.raises(ParseError, match="no job id"):
        parse_sbatch((R22 / "sbatch-invalid-partition.stderr").read_text())


def test_sacct_text_skips_steps_and_expands_arrays():
    jobs = parse_sacct((R22 / "sacct-parsable2.txt").read_text())
    assert sorted(jobs) == ["10_1", "10_2", "10_3", "10_4", "10_5", "11", "12", "6", "7", "8",
                            "9_1", "9_2", "9_3"]
    assert (jobs["6"].state, jobs["6"].nodes, jobs["6"].exit_code) == ("COMPLETED", "node[1-2]", 0)
    assert (jobs["7"].state, jobs["7"].exit_code) == ("FAILED", 3)
    assert (jobs["8"].state, jobs["8"].slurm_state, jobs["8"].nodes, jobs["8"].reason) == (
        "CANCELLED", "CANCELLED by 0", None, "JobHeldUser")
    assert jobs["12"].state == "RUNNING" and jobs["12"].elapsed_s == 12
    assert jobs["10_3"].state == "PENDING" and jobs["10_3"].reason == "JobHeldUser"
    assert jobs["9_3"].state == "COMPLETED"


def test_sacct_json_22_05_matches_the_text_answer():
    text = parse_sacct((R22 / "sacct-parsable2.txt").read_text())
    js = parse_sacct_json((R22 / "sacct.json").read_text())
    assert sorted(js) == sorted(text)
    for jid in text:
        assert (js[jid].state, js[jid].nodes) == (text[jid].state, text[jid].nodes), jid
    assert js["8"].reason == "JobHeldUser"


def test_sacct_json_23_11_shapes():
    jobs = parse_sacct_json((FIX / "slurm-23.11" / "sacct.json").read_text())
    assert (jobs["501"].state, jobs["501"].elapsed_s, jobs["501"].nodes) == ("COMPLETED", 95, "node[01-02]")
    assert (jobs["502"].state, jobs["502"].signal) == ("TIMEOUT", 15)
    assert (jobs["503_7"].state, jobs["503_7"].exit_code, jobs["503_7"].reason) == (
        "FAILED", 2, "NonZeroExitCode")
    assert jobs["505"].state == "PENDING" and jobs["505"].nodes is None
    with pytest.raises(ParseError):
        parse_sacct_json("{not json")


def test_squeue_with_reasons_and_compressed_arrays():
    jobs = parse_squeue((R22 / "squeue.txt").read_text())
    assert jobs["12"].state == "RUNNING" and jobs["12"].nodes == "node[1-2]"
    assert jobs["12"].elapsed_s == 12
    assert jobs["10_4"].reason == "JobHeldUser" and jobs["10_4"].state == "PENDING"
    assert jobs["8"].nodes is None
    with pytest.raises(ParseError, match="expected 5"):
        parse_squeue("123|RUNNING\n")


@pytest.mark.parametrize("raw,state", [
    ("CANCELLED by 1000", "CANCELLED"), ("COMPLETING", "RUNNING"), ("OUT_OF_MEMORY", "FAILED"),
    ("NODE_FAIL", "NODE_FAIL"), ("REQUEUED", "PENDING"), ("DEADLINE", "TIMEOUT"),
    ("RUNNING+", "RUNNING"), ("SOMETHING_NEW", "UNKNOWN"),
])
def test_states(raw, state):
    assert map_state(raw) == state


def test_array_ranges():
    assert expand_array("7_[1-3,8]") == ["7_1", "7_2", "7_3", "7_8"]
    assert expand_array("7_[0-6:2%2]") == ["7_0", "7_2", "7_4", "7_6"]
    assert expand_array("7_[1-2%1]") == ["7_1", "7_2"]
    assert expand_array("12") == ["12"]


def test_truncated_sacct_rows_are_refused():
    with pytest.raises(ParseError, match="expected 7"):
        parse_sacct("1|1|RUNNING\n")
