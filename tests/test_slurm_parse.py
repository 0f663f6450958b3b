"""Parsers against output recorded from Slurm 22.05 and 25.11 (tests/fixtures/README.md)."""

from pathlib import Path

import pytest

from dlscale.engine.backends.slurm.parsing import (
    SACCT_FIELDS,
    SQUEUE_FORMAT,
    ParseError,
    expand_array,
    map_state,
    parse_sacct,
    parse_sacct_json,
    parse_sbatch,
    parse_squeue,
    parse_squeue_json,
    site_limit,
)

FIX = Path(__file__).parent / "fixtures"
R22 = FIX / "slurm-22.05"
R25 = FIX / "slurm-25.11"
RELEASES = ["22.05", "25.11"]


def recorded(release: str) -> dict[str, str]:
    """job-states.txt: each recorded job's id and the state it was recorded in."""
    rows = (FIX / f"slurm-{release}" / "job-states.txt").read_text().splitlines()
    return {line.split()[0]: line.split()[1] for line in rows if line.strip()}


def read(release: str, name: str) -> str:
    return (FIX / f"slurm-{release}" / name).read_text()


def test_sbatch_parsable():
    assert parse_sbatch((R22 / "sbatch-parsable.txt").read_text()) == "6"
    assert parse_sbatch("4242;cluster2\n") == "4242"
    with pytest.raises(ParseError, match="no job id"):
        parse_sbatch((R22 / "sbatch-invalid-partition.stderr").read_text())


def test_sacct_text_skips_steps_and_expands_arrays():
    jobs = parse_sacct((R22 / "sacct-parsable2.txt").read_text())
    assert sorted(jobs) == [
        "10_1",
        "10_2",
        "10_3",
        "10_4",
        "10_5",
        "11",
        "12",
        "6",
        "7",
        "8",
        "9_1",
        "9_2",
        "9_3",
    ]
    assert (jobs["6"].state, jobs["6"].nodes, jobs["6"].exit_code) == ("COMPLETED", "node[1-2]", 0)
    assert (jobs["7"].state, jobs["7"].exit_code) == ("FAILED", 3)
    assert (jobs["8"].state, jobs["8"].slurm_state, jobs["8"].nodes, jobs["8"].reason) == (
        "CANCELLED",
        "CANCELLED by 0",
        None,
        "JobHeldUser",
    )
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


@pytest.mark.parametrize("release", RELEASES)
def test_sacct_text_gives_every_recorded_jobs_state(release):
    jobs = parse_sacct(read(release, "sacct-parsable2.txt"))
    assert not [j for j in jobs if "." in j]  # steps are not jobs
    for jid, state in recorded(release).items():
        tasks = [j for j in jobs if j == jid or j.startswith(f"{jid}_")]
        assert tasks and {jobs[t].state for t in tasks} == {state}, (jid, tasks)


@pytest.mark.parametrize("release", RELEASES)
def test_sacct_json_matches_the_text_answer_on_every_release(release):
    text = parse_sacct(read(release, "sacct-parsable2.txt"))
    js = parse_sacct_json(read(release, "sacct.json"))
    assert sorted(js) == sorted(text)
    for jid, t in text.items():
        j = js[jid]
        assert (j.state, j.nodes, j.elapsed_s, j.signal) == (
            t.state,
            t.nodes,
            t.elapsed_s,
            t.signal,
        ), jid
        if release != "22.05":  # 22.05's JSON reports 0 for a job that exited 3
            assert j.exit_code == t.exit_code, jid
    with pytest.raises(ParseError):
        parse_sacct_json("{not json")


def test_sacct_25_11_exit_codes_nodes_and_elapsed():
    states = {v: k for k, v in recorded("25.11").items() if v not in ("COMPLETED", "PENDING")}
    jobs = parse_sacct(read("25.11", "sacct-parsable2.txt"))
    failed, timeout, nodefail = (jobs[states[s]] for s in ("FAILED", "TIMEOUT", "NODE_FAIL"))
    assert (failed.exit_code, failed.nodes) == (3, "node1")
    assert timeout.elapsed_s >= 60 and timeout.nodes == "node1"  # a 1-minute limit
    assert (nodefail.exit_code, nodefail.nodes) == (1, "node[1-2]")
    cancelled = [jobs[j] for j, s in recorded("25.11").items() if s == "CANCELLED"]
    assert [c.slurm_state for c in cancelled] == ["CANCELLED by 0"] * 2
    assert sorted(c.nodes or "-" for c in cancelled) == ["-", "node2"]  # pending, running


@pytest.mark.parametrize("release", RELEASES)
def test_squeue_agrees_with_sacct_on_the_jobs_it_still_holds(release):
    queue = parse_squeue(read(release, "squeue.txt"))
    acct = parse_sacct(read(release, "sacct-parsable2.txt"))
    held = [j for j in queue if j in acct]
    assert held and all(queue[j].state == acct[j].state for j in held)
    assert all(queue[j].nodes == acct[j].nodes for j in held if queue[j].state == "RUNNING")


def test_squeue_25_11_reasons_and_its_json():
    states = recorded("25.11")
    queue = parse_squeue(read("25.11", "squeue.txt"))
    waiting = [j for j, s in states.items() if s == "PENDING" and j in queue]
    assert [queue[j].reason for j in waiting] == ["Resources"]
    array = next(j for j, s in states.items() if s == "PENDING" and j not in queue)
    assert {queue[f"{array}_{t}"].reason for t in range(1, 6)} == {"JobHeldUser"}
    timeout = next(j for j, s in states.items() if s == "TIMEOUT")
    assert (queue[timeout].state, queue[timeout].reason) == ("TIMEOUT", "TimeLimit")
    js = parse_squeue_json(read("25.11", "squeue.json"))
    assert sorted(js) == sorted(queue)
    for jid, q in queue.items():
        assert (js[jid].state, js[jid].reason, js[jid].nodes) == (q.state, q.reason, q.nodes)
    assert js[timeout].signal == 15  # SIGTERM at the limit
    with pytest.raises(ParseError):
        parse_squeue_json("[")


def test_sbatch_25_11():
    assert parse_sbatch(read("25.11", "sbatch-parsable.txt")).isdigit()
    with pytest.raises(ParseError, match="no job id"):
        parse_sbatch(read("25.11", "sbatch-invalid-partition.stderr"))
    assert "Invalid partition name specified" in read("25.11", "sbatch-invalid-partition.stderr")
    assert read("25.11", "version.txt").strip() == "slurm 25.11.7"


def test_fixtures_were_recorded_with_the_formats_the_code_asks_for():
    fields = len(SACCT_FIELDS.split(","))
    for release in RELEASES:
        assert {
            line.count("|") + 1
            for line in read(release, "sacct-parsable2.txt").splitlines()
            if line
        } == {fields}
        assert {
            line.count("|") + 1 for line in read(release, "squeue.txt").splitlines() if line
        } == {SQUEUE_FORMAT.count("|") + 1}


def test_squeue_with_reasons_and_compressed_arrays():
    jobs = parse_squeue((R22 / "squeue.txt").read_text())
    assert jobs["12"].state == "RUNNING" and jobs["12"].nodes == "node[1-2]"
    assert jobs["12"].elapsed_s == 12
    assert jobs["10_4"].reason == "JobHeldUser" and jobs["10_4"].state == "PENDING"
    assert jobs["8"].nodes is None
    with pytest.raises(ParseError, match="expected 5"):
        parse_squeue("123|RUNNING\n")


@pytest.mark.parametrize(
    "raw,state",
    [
        ("CANCELLED by 1000", "CANCELLED"),
        ("COMPLETING", "RUNNING"),
        ("OUT_OF_MEMORY", "FAILED"),
        ("NODE_FAIL", "NODE_FAIL"),
        ("REQUEUED", "PENDING"),
        ("DEADLINE", "TIMEOUT"),
        ("RUNNING+", "RUNNING"),
        ("SOMETHING_NEW", "UNKNOWN"),
    ],
)
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


@pytest.mark.parametrize(
    "said, limit",
    [
        # pyslurm: an int, None for NO_VAL, "UNLIMITED" for INFINITE (pyslurm/utils/uint.pyx)
        (5, 5),
        (None, None),
        ("UNLIMITED", None),
        (0, None),
        (True, None),
        # sacctmgr --parsable2 and `scontrol show config`: digits, a blank, or a word
        ("5000", 5000),
        ("", None),
        (" 12 ", 12),
        ("INFINITE", None),
        ("0", None),
        ("-1", None),
        ("(null)", None),
    ],
)
def test_a_site_limit_reads_as_a_count_or_none(said, limit):
    """Every way Slurm says a limit, through either backend, reads as a count or as none,
    never as an error (a 25.11 association said UNLIMITED and a submission crashed)."""
    assert site_limit(said) == limit
