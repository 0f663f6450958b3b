"""The Slurm backend's watcher against a replaying runner: one command per tick, squeue
only every few ticks, terminal states cached, failed polls tolerated then reported."""

import types

import pytest

from dlscale.engine.backends.base import JobRequest
from dlscale.engine.backends.slurm.commands import SlurmCLI
from dlscale.engine.backends.slurm.common import CommandResult
from dlscale.engine.errors import ControllerUnreachable, SubmitError


class Replay:
    """Answers sacct/squeue/sbatch from a table of job states; records every call."""

    def __init__(self):
        self.states = {}
        self.calls = []
        self.fail = set()  # commands that fail now

    def __call__(self, argv, env=None, timeout=60):
        self.calls.append(argv)
        cmd = argv[0]
        if cmd in self.fail:
            return CommandResult(
                argv, 1, "", f"{cmd}: error: Unable to contact slurm controller (connect failure)"
            )
        if cmd == "sacct":
            ids = argv[argv.index("--jobs") + 1].split(",")
            rows = [f"{j}|{j}|{self.states[j]}|0:0|5|node1|None" for j in ids if j in self.states]
            rows += [
                f"{j}.batch|{j}.batch|{self.states[j]}|0:0|5|node1|"
                for j in ids
                if j in self.states
            ]
            return CommandResult(argv, 0, "\n".join(rows) + "\n", "")
        if cmd == "squeue":
            rows = [
                f"{j}|{s}|{'Resources' if s == 'PENDING' else 'None'}|node1|0:05"
                for j, s in self.states.items()
            ]
            return CommandResult(argv, 0, "\n".join(rows) + "\n", "")
        if cmd == "sbatch":
            return CommandResult(argv, 0, "4242;cluster\n", "")
        raise AssertionError(argv)

    def count(self, cmd):
        return sum(1 for c in self.calls if c[0] == cmd)


@pytest.mark.parametrize("n", [1, 100, 1000])
def test_one_sacct_per_tick_whatever_the_number_of_jobs(n):
    replay = Replay()
    replay.states = {str(1000 + i): "RUNNING" for i in range(n)}
    s = SlurmCLI(runner=replay, squeue_every=3)
    s.watcher._need_squeue = False
    for _ in range(6):
        replay.calls.clear()
        out = s.watcher.poll(list(replay.states))
        assert replay.count("sacct") == 1 and len(out) == n
        assert replay.count("squeue") <= 1 and len(replay.calls) <= 2
    # squeue came every third tick only
    s2 = SlurmCLI(runner=Replay(), squeue_every=3)
    s2.runner.states = {"1": "PENDING"}
    s2.watcher._need_squeue = False
    for _ in range(9):
        s2.watcher.poll(["1"])
    assert s2.runner.count("squeue") == 3 and s2.runner.count("sacct") == 9


def test_pending_reason_comes_from_squeue_and_survives_sacct():
    replay = Replay()
    replay.states = {"7": "PENDING"}
    s = SlurmCLI(runner=replay)
    status = s.watcher.poll(["7"])["7"]  # first poll asks squeue too (fresh jobs)
    assert status.state == "PENDING" and status.reason == "Resources"
    assert s.watcher.poll(["7"])["7"].reason == "Resources"


def test_terminal_states_are_cached_and_never_asked_again():
    replay = Replay()
    replay.states = {"1": "COMPLETED", "2": "RUNNING"}
    s = SlurmCLI(runner=replay)
    s.watcher.poll(["1", "2"])
    replay.calls.clear()
    replay.states["1"] = "FAILED"  # Slurm would never say this; the cache must win
    out = s.watcher.poll(["1", "2"])
    asked = next(c for c in replay.calls if c[0] == "sacct")
    assert asked[asked.index("--jobs") + 1] == "2"
    assert out["1"].state == "COMPLETED"
    replay.states["2"] = "TIMEOUT"
    s.watcher.poll(["1", "2"])
    replay.calls.clear()
    out = s.watcher.poll(["1", "2"])
    assert replay.calls == [] and out["2"].state == "TIMEOUT"


def test_failed_polls_are_tolerated_then_reported_then_recovered():
    replay = Replay()
    replay.states = {"1": "RUNNING"}
    s = SlurmCLI(runner=replay, max_failures=3)
    s.watcher.poll(["1"])
    replay.fail = {"sacct", "squeue"}
    assert s.watcher.poll(["1"])["1"].state == "RUNNING"  # last known, while tolerated
    s.watcher.poll(["1"])
    with pytest.raises(ControllerUnreachable, match="did not answer 3 polls"):
        s.watcher.poll(["1"])
    replay.fail = set()
    replay.states["1"] = "COMPLETED"
    assert s.watcher.poll(["1"])["1"].state == "COMPLETED"


def test_controller_down_is_seen_through_squeue_even_when_sacct_answers():
    replay = Replay()
    replay.states = {"1": "RUNNING"}
    s = SlurmCLI(runner=replay, squeue_every=1, max_failures=2)
    replay.fail = {"squeue"}
    s.watcher.poll(["1"])
    with pytest.raises(ControllerUnreachable, match="squeue"):
        s.watcher.poll(["1"])
    assert not s.watcher.controller_ok


def test_sbatch_runs_with_sbatch_variables_cleared(monkeypatch, tmp_path):
    monkeypatch.setenv("SBATCH_PARTITION", "wrong")
    seen = {}

    def runner(argv, env=None, timeout=60):
        seen["argv"], seen["env"] = argv, env
        return CommandResult(argv, 0, "99\n", "")

    job = SlurmCLI(runner=runner).submit(JobRequest("r", tmp_path, []))
    assert job == "99" and seen["argv"][:2] == ["sbatch", "--parsable"]
    assert seen["argv"][2].startswith("--comment=dlscale:")  # its tag (slurm_tags)
    assert seen["argv"][3:] == [str(tmp_path / "job.sh")]
    assert "SBATCH_PARTITION" not in seen["env"]


def test_sbatch_refusal_carries_slurms_message_and_transients_are_retried(tmp_path):
    calls = []

    def refusing(argv, env=None, timeout=60):
        calls.append(argv)
        return CommandResult(
            argv,
            1,
            "",
            "sbatch: error: Batch job submission failed: Invalid partition name specified\n",
        )

    with pytest.raises(SubmitError, match="Invalid partition name specified"):
        SlurmCLI(runner=refusing).submit(JobRequest("r", tmp_path, []))
    assert len(calls) == 1  # a refusal is not retried
    answers = iter(
        [
            CommandResult([], 1, "", "sbatch: error: Socket timed out on send/recv"),
            CommandResult([], 0, "", ""),  # squeue: no job carries the tag, so retry
            CommandResult([], 0, "77\n", ""),
        ]
    )
    s = SlurmCLI(runner=lambda argv, env=None, timeout=60: next(answers), sleep=lambda s: None)
    assert s.submit(JobRequest("r", tmp_path, [])) == "77"


def test_backoff_grows_while_idle_is_capped_and_resets():
    from dlscale.engine.tracking.monitor import Backoff

    b = Backoff(first=0.5, factor=2, cap=3)
    assert [b.next() for _ in range(5)] == [0.5, 1.0, 2.0, 3, 3]
    b.reset()
    assert b.next() == 0.5


@pytest.mark.parametrize("place", ["local", "slurm"])
def test_a_wait_backs_off_to_its_backends_cap(monkeypatch, tmp_path, place):
    """A local poll reads the store and asks no one: a check's next round follows the last
    run's end within a second. A Slurm poll asks the controller: at most one each 5 s."""
    from dlscale.engine.backends.local.backend import LocalBackend
    from dlscale.engine.tracking import monitor
    from dlscale.engine.tracking.store import Store

    store = Store(tmp_path)
    backend = LocalBackend(store, start_worker=False) if place == "local" else SlurmCLI()
    polls, sleeps = iter(range(12)), []
    monkeypatch.setattr(monitor, "sync", lambda store, backend: monitor.Tick({"RUNNING": 1}))
    monkeypatch.setattr(monitor, "time", types.SimpleNamespace(sleep=sleeps.append))

    class Runs:
        def run(self, run_id):
            return {"state": "RUNNING" if next(polls) < 11 else "COMPLETED"}

    monitor.wait_until_done(Runs(), backend, ["r"])  # type: ignore[arg-type]
    assert max(sleeps) == sleeps[-1] == {"local": 1.0, "slurm": 5.0}[place]


def test_a_stale_pending_never_moves_a_running_run_back(tmp_path):
    """slurmdbd can answer PENDING for a job the controller already started."""
    from test_store import make_run

    from dlscale.engine.backends.base import JobStatus
    from dlscale.engine.backends.slurm.commands import CommandsWatcher
    from dlscale.engine.tracking.monitor import sync
    from dlscale.engine.tracking.store import Store

    class LaggingWatcher(CommandsWatcher):  # sacct's answer from a few seconds ago
        def __init__(self, state):
            super().__init__()
            self.state = state

        def poll(self, ids):
            return {i: JobStatus(i, self.state) for i in ids}

    def Lagging(state):  # the backend, following its jobs through that watcher
        backend = SlurmCLI()
        backend.watcher = LaggingWatcher(state)
        return backend

    store = Store(tmp_path)
    run = make_run()
    store.add_run(run)
    store.jobs.add("slurm", "5", run.run_id, "PENDING")
    sync(store, Lagging("RUNNING"))
    assert store.run(run.run_id)["state"] == "RUNNING"
    sync(store, Lagging("PENDING"))
    assert store.run(run.run_id)["state"] == "RUNNING"
    assert store.jobs.get("slurm", "5")["state"] == "RUNNING"
