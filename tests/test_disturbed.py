"""Issue 50, item 2 and 3: a run that other work disturbed is judged from its interference
record by one rule (engine/results/disturbed.py), marked where results are shown, and
counted or left out as its experiment's spec says."""

import pytest
from test_store import line, make_run

from dlscale.engine.results import disturbed
from dlscale.engine.results.analysis import results
from dlscale.engine.results.tables import results_table
from dlscale.engine.tracking import queue
from dlscale.engine.tracking.store import Store

QUIET = {
    "others_cpu_share": 0.02,
    "run_queue_wait_share": 0.01,
    "steal_share": 0.0,
    "cpu_stall_share": 0.01,
    "io_stall_share": 0.0,
    "memory_stall_share": 0.0,
}
# each signal just past its threshold, and what the words must name
PAST = [
    ({"others_cpu_share": disturbed.OTHERS_CPU + 0.01, "run_queue_wait_share": 0.5}, "CPUs"),
    ({"steal_share": disturbed.STEAL + 0.01}, "steal"),
    ({"io_stall_share": disturbed.IO_STALL + 0.01}, "I/O"),
    ({"memory_stall_share": disturbed.MEMORY_STALL + 0.01}, "memory"),
    ({"foreign_gpu_util_share": disturbed.FOREIGN_GPU + 0.01, "foreign_gpu_pids": [7]}, "GPU"),
]


@pytest.mark.parametrize("past, words", PAST)
def test_each_signal_past_its_threshold_disturbs_and_just_below_does_not(past, words):
    (said,) = disturbed.reasons({**QUIET, **past})
    assert words in said
    share = next(v for k, v in past.items() if k.endswith("_share") and "queue" not in k)
    assert f"{100 * share:.0f}%" in said  # the share, in the words
    below = {
        k: (v - 0.02 if k.endswith("_share") and "queue" not in k else v) for k, v in past.items()
    }
    assert disturbed.reasons({**QUIET, **below}) == []


def test_others_on_the_cpus_disturb_only_a_run_that_waited_for_one():
    """Others on a CPU the run did not want cost it nothing; a run with more threads than
    CPUs waits for itself. Only both together are harm; without run-queue waits (no
    schedstats) others' share alone decides."""
    busy, waited = disturbed.OTHERS_CPU + 0.3, disturbed.QUEUE_WAIT + 0.3
    assert disturbed.reasons({**QUIET, "others_cpu_share": busy}) == []
    assert disturbed.reasons({**QUIET, "run_queue_wait_share": waited}) == []
    both = {**QUIET, "others_cpu_share": busy, "run_queue_wait_share": waited}
    assert "waited" in disturbed.reasons(both)[0]
    assert disturbed.reasons({**QUIET, "others_cpu_share": busy, "run_queue_wait_share": None})


def test_a_record_that_says_nothing_judges_nothing():
    assert disturbed.reasons(dict.fromkeys(disturbed.SHARES)) is None
    assert disturbed.reasons({"window_s": 1.0, "unavailable": "no /proc"}) is None


def test_the_spec_offers_the_actions_the_rule_knows():
    from dlscale.engine.config.spec import Experiment

    assert set(Experiment.model_fields["disturbed"].annotation.__args__) == set(disturbed.ACTIONS)
    reruns = Experiment.model_fields["disturbed_reruns"]
    assert reruns.default == disturbed.RERUNS
    assert [m.le for m in reruns.metadata if hasattr(m, "le")] == [disturbed.MAX_RERUNS]
    chosen = disturbed.choice_of('[experiment]\ndisturbed = "rerun"\ndisturbed_reruns = 4\n')
    assert chosen == disturbed.Choice(disturbed.RERUN, 4)
    assert disturbed.choice_of('[experiment]\ndisturbed = "leave-out"\n').action == "leave-out"
    assert disturbed.choice_of("[experiment]\n") == disturbed.Choice()
    assert disturbed.choice_of("not toml [") == disturbed.Choice(disturbed.FLAG)


def _study(tmp_path, spec_text: str | None = None) -> tuple[Store, list[str]]:
    """Five completed repetitions of one point: two disturbed (a CPU hog, an I/O hog), two
    quiet, one with no interference record."""
    store = Store(tmp_path)
    if spec_text is not None:
        store.save_experiment("e", str(tmp_path / "spec.toml"), spec_text, "0" * 12)
    loads = [
        {"others_cpu_share": 0.45, "run_queue_wait_share": 0.4},
        {"io_stall_share": 0.6},
        {},
        {},
        None,
    ]
    ids = []
    for rep, (value, load) in enumerate(zip([60.0, 70.0, 100.0, 102.0, 101.0], loads)):
        run = make_run(repetition=rep)
        store.add_run(run)
        measured(store, tmp_path, run.run_id, value, load)
        ids.append(run.run_id)
    return store, ids


def measured(store: Store, folder, run_id: str, throughput: float, load: dict | None) -> None:
    """The run COMPLETED with its summary and, unless `load` is None, its interference
    record (QUIET with `load` over it)."""
    path = folder / f"{run_id}.jsonl"
    text = line(
        "summary",
        status="completed",
        throughput=throughput,
        timed_steps=10,
        warmup_steps=1,
        elapsed_s=1.0,
        cpu_s_per_step=0.1,
    )
    if load is not None:
        text += line("interference", window_s=1.0, cpus=[0, 1], **{**QUIET, **load})
    path.write_text(text)
    store.records.ingest(run_id, path)
    store.update_run(run_id, state="COMPLETED")


def test_flagged_runs_count_and_are_marked_with_what_disturbed_them(tmp_path):
    store, ids = _study(tmp_path)
    (row,) = results(store)
    assert row["disturbed_action"] == "flag" and row["n"] == 5
    assert sorted(row["disturbed"]) == sorted(ids[:2])
    assert "others took 45%" in row["disturbed"][ids[0]][0]
    assert "I/O 60%" in row["disturbed"][ids[1]][0]
    assert row["disturbed_judged"] == 4
    assert row["noisy"] and row["throughput_cv_quiet"] == pytest.approx(0.01, abs=0.005)
    table = results_table([row])
    assert table.rows[0][table.headers.index("images/s")].endswith("* ~")
    said = "\n".join(table.notes)
    assert "2 of 5 runs disturbed" in said and "over its quiet runs" in said
    assert "1 completed runs have no interference record" in said
    # status says it in the run's reason, for the disturbed runs only
    reasons = {q.run_id: q.reason for q in queue.rows(store)}
    assert reasons[ids[0]].startswith("disturbed: others took 45%")
    assert not any(reasons[i] for i in ids[2:])


def test_left_out_runs_are_listed_but_not_counted(tmp_path):
    store, ids = _study(tmp_path, '[experiment]\nname = "e"\ndisturbed = "leave-out"\n')
    (row,) = results(store)
    assert row["disturbed_action"] == "leave-out" and row["n"] == 3
    assert row["throughput"] == pytest.approx(101.0) and not row["noisy"]
    assert sorted(row["disturbed"]) == sorted(ids[:2])
    table = results_table([row])
    assert disturbed.MARK not in table.rows[0][table.headers.index("images/s")]
    said = "\n".join(table.notes)
    assert "2 of 5 runs disturbed and left out" in said
    assert "have no interference record" in said  # the one without a record still counts


def test_a_checks_pair_with_a_disturbed_run_is_left_out_and_said(tmp_path):
    """Issue 50 item 3, issue 51 item 3: `check --interleave` judges only pairs whose two
    runs were quiet (by wall time, by default), so a pair with a disturbed member is made
    again within the budget; counted instead when asked, or when judged by CPU time."""
    from dlscale.engine.results.regression.check import CPU, WALL
    from dlscale.engine.results.regression.rounds import Rounds
    from dlscale.engine.results.regression.workflow import Request

    store, ids = _study(tmp_path)  # runs 0 and 1 disturbed, 2 and 3 quiet, 4 unknown
    ours, theirs = [ids[2], ids[0], ids[4]], [ids[3], ids[2], ids[3]]
    rounds = Rounds(ours={"p": ours}, theirs={"p": theirs})
    study, base = rounds.paired(store, {"p": "point"})["point"]
    assert (study, base) == ([100.0, 101.0], [102.0, 102.0])  # the pair with run 0 left out
    (line,) = rounds.disturbed_lines()
    assert line.startswith("point: 1 pair(s) left out and repeated") and "others took 45%" in line
    counted = Rounds(ours={"p": ours}, theirs={"p": theirs}, repeat_disturbed=False)
    assert len(counted.paired(store, {"p": "point"})["point"][0]) == 3
    assert not counted.disturbed_lines()
    assert Request("s", measure="wall").repeats_disturbed
    assert Request("s", measure="cpu").repeats_disturbed is False
    assert Request("s", measure="cpu", disturbed="repeat").repeats_disturbed
    assert Request("s", disturbed="count").repeats_disturbed is False
    # the default measure (auto) chooses point by point: left out where the point is judged
    # by the clock, counted where by CPU time
    assert Request("s").repeats_disturbed is None
    by_point = Rounds(ours={"p": ours}, theirs={"p": theirs}, repeat_disturbed=None)
    assert len(by_point.paired(store, {"p": "point"}, {"point": WALL})["point"][0]) == 2
    assert by_point.disturbed_lines()
    assert len(by_point.paired(store, {"p": "point"}, {"point": CPU})["point"][0]) == 3
    assert not by_point.disturbed_lines()


def test_the_report_says_how_quiet_the_machine_was(tmp_path):
    from dlscale.engine.results.report import document

    store, ids = _study(tmp_path, '[experiment]\nname = "e"\n')
    made = document.build(store, "e", tmp_path / "report", "md")
    text = (tmp_path / "report" / "report.md").read_text()
    quiet = made.tables["quiet"]
    cells = {row[0]: row for row in quiet.rows}
    others = cells["others' share of the run's CPUs"]
    assert others[1:] == ["4", "2.0%", "45.0%", "10%", "1"]
    assert cells["I/O stall (machine)"][-1] == "1"
    assert "How quiet was the machine" in text
    assert "2 of 4 runs with a record were disturbed" in text
    assert "2 of 5 runs disturbed" in text  # under the results table, with what did it
