"""Issue 50 item 3: `disturbed = "rerun"`. A run that other work disturbed is rerun, at
most `disturbed_reruns` times along its chain, each rerun naming the run it repeats and
made once however many front ends follow the store; the rerun stands in for it in its
point once it has measured. The rule on made-up records, then a real local study of a
standard-library script with two busy loops beside its first runs."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

import pytest
from test_disturbed import _study, measured

from conftest import HANG_S, REPO, busy_spec, dlscale
from dlscale.engine.paths import RunPaths
from dlscale.engine.results import disturbed
from dlscale.engine.results.analysis import results
from dlscale.engine.results.tables import results_table
from dlscale.engine.tracking.store import Store

RERUN = '[experiment]\nname = "e"\ndisturbed = "rerun"\n'


def _rerun_of(store: Store, tmp_path, run_id: str, throughput: float, load: dict) -> str:
    """A completed rerun of `run_id`, as the store makes it, with its records."""
    new = disturbed.rerun_id(run_id)
    store.add_rerun(store.run(run_id), new)
    measured(store, tmp_path, new, throughput, load)
    return new


def test_a_rerun_stands_in_for_the_disturbed_run_it_repeats_once_it_measured(tmp_path):
    store, ids = _study(tmp_path, RERUN)  # runs 0 and 1 disturbed; 2, 3 quiet; 4 unknown
    assert {r["run_id"] for r in disturbed.due(store)} == set(ids[:2])
    (row,) = results(store)
    assert row["n"] == 5 and sorted(row["disturbed"]) == sorted(ids[:2])  # counted until then
    # run 0's rerun measured quiet; run 1's was disturbed too, and its own rerun is quiet
    first = _rerun_of(store, tmp_path, ids[0], 101.5, {})
    second = _rerun_of(store, tmp_path, ids[1], 50.0, {"io_stall_share": 0.7})
    assert {r["run_id"] for r in disturbed.due(store)} == {second}  # one deeper, under 2
    third = _rerun_of(store, tmp_path, second, 100.5, {})
    assert disturbed.due(store) == []
    (row,) = results(store)
    assert row["n"] == 5 and not row["disturbed"] and not row["noisy"]
    assert row["disturbed_rerun"] == {ids[0]: first, ids[1]: second, second: third}
    assert row["throughput"] == pytest.approx((101.5 + 100.5 + 100 + 102 + 101) / 5)
    said = "\n".join(results_table([row]).notes)
    (old, new) = re.search(r"run (\w{12}) by run (\w{12})", said).groups()
    assert "3 disturbed runs rerun" in said and row["disturbed_rerun"][old] == new
    assert disturbed.LEGEND not in said  # no point is marked: the ~ needs no legend


def test_the_queue_names_each_rerun_and_the_run_it_repeats(tmp_path):
    """A disturbed run's row says what disturbed it and which run repeats it; the rerun's
    row, which run it repeats. One reader, read again as reruns come (a new run is a whole
    read; the original's row is made again though its own values did not change); a chain
    names each link, the latest rerun where a run was rerun twice (`dlscale rerun`)."""
    from dlscale.engine.tracking.queue import QueueReader

    store, ids = _study(tmp_path, RERUN)  # runs 0 and 1 disturbed
    reader = QueueReader()

    def reasons() -> dict[str, str]:
        return {q.run_id: q.reason for q in reader.rows(store)}

    assert "rerun" not in " ".join(reasons().values())
    first = _rerun_of(store, tmp_path, ids[0], 101.5, {})
    said = reasons()
    assert said[ids[0]].startswith("disturbed: others took 45%")
    assert said[ids[0]].endswith(f"; rerun as {first}") and said[first] == f"rerun of {ids[0]}"
    second = _rerun_of(store, tmp_path, ids[1], 50.0, {"io_stall_share": 0.7})
    third = _rerun_of(store, tmp_path, second, 100.5, {})
    said = reasons()
    assert said[second].startswith("disturbed: ") and f"rerun of {ids[1]}" in said[second]
    assert said[second].endswith(f"rerun as {third}") and said[third] == f"rerun of {second}"
    assert not any("rerun" in said[i] for i in ids[2:])  # the quiet runs name none
    again = disturbed.rerun_id(first)  # a second rerun of run 0, by id of its own
    store.add_rerun(store.run(ids[0]), again)
    assert reasons()[ids[0]].endswith(f"rerun as {again}")


def test_reruns_stop_at_the_spec_s_bound_and_the_last_one_counts_marked(tmp_path):
    store, ids = _study(tmp_path, RERUN.replace('"rerun"', '"rerun"\ndisturbed_reruns = 1'))
    again = _rerun_of(store, tmp_path, ids[1], 55.0, {"io_stall_share": 0.7})
    assert again not in {r["run_id"] for r in disturbed.due(store)}
    (row,) = results(store)
    assert again in row["disturbed"] and ids[1] not in row["disturbed"]
    assert (
        disturbed.MARK
        in results_table([row]).rows[0][results_table([row]).headers.index("images/s")]
    )


def test_a_rerun_that_has_not_measured_leaves_the_disturbed_run_counted(tmp_path):
    store, ids = _study(tmp_path, RERUN)
    pending = disturbed.rerun_id(ids[0])
    store.add_rerun(store.run(ids[0]), pending)  # PLANNED: nothing measured yet
    (row,) = results(store)
    assert ids[0] in row["disturbed"] and row["disturbed_rerun"] == {}
    assert ids[0] not in {r["run_id"] for r in disturbed.due(store)}  # never made twice


def test_a_manual_rerun_of_a_quiet_run_or_under_flag_stands_in_for_nothing(tmp_path):
    store, ids = _study(tmp_path)  # flag
    _rerun_of(store, tmp_path, ids[0], 101.5, {})
    (row,) = results(store)
    assert row["disturbed_rerun"] == {} and ids[0] in row["disturbed"]
    store2, ids2 = _study(tmp_path / "b", RERUN)
    _rerun_of(store2, tmp_path / "b", ids2[2], 90.0, {})  # a quiet run's: a comparison
    (row,) = results(store2)
    assert ids2[2] not in row["disturbed_rerun"]


def _spec(path, reruns: int):
    return busy_spec(
        path,
        "quiet-please",
        3,
        6,
        f'repetitions = 2\ndisturbed = "rerun"\ndisturbed_reruns = {reruns}',
    )


def test_a_real_study_reruns_its_disturbed_runs_once_each_and_counts_the_reruns(tmp_path, home):
    """Both runs measure beside three busy loops (dlscale is not told); the
    loops stop; two `dlscale status` at once find both disturbed and rerun each once; the
    reruns (bounded at one) stand in for them in the point, the originals named."""
    spec = _spec(tmp_path / "quiet.toml", reruns=1)
    # each in a session of its own: with the kernel's autogroup, CPU time is shared out
    # between sessions first, so three loops of one session would cost the run nothing
    hogs = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
        for _ in range(3)
    ]
    try:
        dlscale("run", str(spec), "--no-wait", home=home, check=0)
        store = Store(home)
        originals = store.runs("quiet-please")
        assert len(originals) == 2
        end = time.monotonic() + HANG_S
        while not all(RunPaths.of(r).job_record.exists() for r in originals):
            assert time.monotonic() < end, "the runs never ended"
            time.sleep(0.5)
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    # two front ends follow the store at once: each disturbed run is rerun once
    both = [
        subprocess.Popen(
            [str(REPO / ".venv" / "bin" / "dlscale"), "status"],
            env={**os.environ, "DLSCALE_HOME": str(home)},
            stdout=subprocess.DEVNULL,
        )
        for _ in range(2)
    ]
    for p in both:
        assert p.wait(timeout=HANG_S) == 0
    found = disturbed.judge(store, [r["run_id"] for r in originals]).disturbed
    assert set(found) == {r["run_id"] for r in originals}, found  # the loops were seen
    reruns = [r for r in store.runs("quiet-please") if r["rerun_of"]]
    assert sorted((r["rerun_of"], r["run_id"]) for r in reruns) == sorted(
        (r["run_id"], disturbed.rerun_id(r["run_id"])) for r in originals
    )
    for r in reruns:  # linked in its folder too (a rebuilt store keeps the link)
        assert RunPaths.of(r).rerun_of.read_text().strip() == r["rerun_of"]
    end = time.monotonic() + HANG_S
    while any(r["state"] != "COMPLETED" for r in store.runs("quiet-please")):
        assert time.monotonic() < end, [r["state"] for r in store.runs("quiet-please")]
        dlscale("status", home=home, check=0)
        time.sleep(1)
    dlscale("status", home=home, check=0)  # bounded at one: a disturbed rerun is not rerun
    assert len(store.runs("quiet-please")) == 4
    (row,) = json.loads(dlscale("results", "--format", "json", home=home, check=0).stdout)
    assert row["n"] == 2
    assert row["disturbed_rerun"] == {r["rerun_of"]: r["run_id"] for r in reruns}
    assert "2 disturbed runs rerun" in dlscale("results", home=home, check=0).stdout
