"""Slurm's commands never hold dlscale up (issue 36, item 1): each runs in a process group of
its own, ended by its own pid when its time is up, when the caller is interrupted, or when a
front end closes; a front end knows what it waits on; a failed command is named once."""

from __future__ import annotations

import os
import random
import signal
import sys
import threading
import time
from pathlib import Path

import fake_slurm
import pytest

from conftest import HANG_S
from dlscale.engine.backends.slurm.calls import CLOSED, Calls, CommandResult, run_command
from dlscale.engine.backends.slurm.common import said, transient, user_name
from dlscale.engine.session import Session
from dlscale.engine.tracking.store import Store

HANG = [sys.executable, "-c", "import time; time.sleep(600)"]


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(") ", 1)[1].startswith("Z")
    except FileNotFoundError:
        return True


def _until(condition, timeout: float = HANG_S) -> None:
    end = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.02)


def _script(tmp_path: Path, body: str) -> list[str]:
    """A command that starts a child of its own (as a wrapper script does) and waits: the
    child's pid is written to `child`."""
    path = tmp_path / "wrapper.sh"
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return [str(path)]


def test_closing_ends_a_command_in_flight_and_everything_it_started(tmp_path):
    calls = Calls(timeout=600)
    argv = _script(tmp_path, f"sleep 600 & echo $! > {tmp_path}/child\nwait")
    answer: list[CommandResult] = []
    worker = threading.Thread(target=lambda: answer.append(calls(argv)))
    worker.start()
    _until(lambda: (tmp_path / "child").exists() and calls.waiting())
    (waiting,) = calls.waiting()
    assert waiting.command == "wrapper.sh" and str(waiting).startswith("wrapper.sh: no answer for")
    child = int((tmp_path / "child").read_text())
    t = time.monotonic()
    calls.close()
    worker.join(5)
    assert not worker.is_alive() and time.monotonic() - t < 2
    assert answer[0].stderr == CLOSED and answer[0].returncode != 0
    _until(lambda: _gone(child))
    assert calls.waiting() == []
    # nothing starts after close, at once
    t = time.monotonic()
    assert calls(HANG).stderr == CLOSED and time.monotonic() - t < 1
    calls.sleep(30)  # a pause between retries is cut short too
    assert time.monotonic() - t < 1


def test_a_command_out_of_time_is_ended_with_its_children(tmp_path):
    argv = _script(tmp_path, f"sleep 600 & echo $! > {tmp_path}/child\nwait")
    t = time.monotonic()
    res = Calls(timeout=1)(argv, timeout=30)  # the front end's time is the shorter
    assert time.monotonic() - t < 10
    # Said as it is: dlscale ended it; no word of Slurm's is made up (issue 47).
    assert res.returncode == 124 and res.stderr == "no answer in 1 s"
    assert transient(res)  # retried as a busy controller's answer is
    _until(lambda: _gone(int((tmp_path / "child").read_text())))


class Interrupted(BaseException):
    pass


def test_an_interrupted_command_line_leaves_no_command_behind(tmp_path):
    """ctrl+c in `dlscale status` or `run --wait`: the command in flight is ended before
    the interrupt goes on up."""
    argv = _script(tmp_path, f"echo $$ > {tmp_path}/pid\nsleep 600")

    def interrupt(signum, frame):
        raise Interrupted

    before = signal.signal(signal.SIGALRM, interrupt)
    try:
        threading.Thread(
            target=lambda: (
                _until(lambda: (tmp_path / "pid").exists()),
                os.kill(os.getpid(), signal.SIGALRM),
            )
        ).start()
        t = time.monotonic()
        with pytest.raises(Interrupted):
            run_command(argv)
        assert time.monotonic() - t < 10
    finally:
        signal.signal(signal.SIGALRM, before)
    assert _gone(int((tmp_path / "pid").read_text()))


def _children() -> set[int]:
    """This process's live children (zombies are reaped ones' remains, or soon will be)."""
    me, found = os.getpid(), set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    state, ppid = fh.read().rsplit(") ", 1)[1].split()[:2]
            except OSError:
                continue
            if int(ppid) == me and state != "Z":
                found.add(int(entry))
    return found


def test_an_interrupt_at_any_moment_of_a_command_leaves_nothing_behind():
    """The class of the test above: ctrl+c timed at random in a command's first 4 ms, its
    start (Popen's fork) included, where an interrupt once lost 8 of 10 children."""
    before = _children()
    timer = signal.getsignal(signal.SIGALRM)
    handlers = {sig: signal.getsignal(sig) for sig in signal.valid_signals()}

    def interrupt(signum, frame):
        raise Interrupted

    signal.signal(signal.SIGALRM, interrupt)
    left, interrupted = 0, 0
    try:
        for _ in range(200):
            try:
                signal.setitimer(signal.ITIMER_REAL, random.uniform(0, 0.004))
                run_command(HANG)
            except Interrupted:
                interrupted += 1
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
            for pid in _children() - before:
                left += 1
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
    finally:
        signal.signal(signal.SIGALRM, timer)
    assert interrupted == 200 and left == 0, (interrupted, left)
    # the handlers it held back are the caller's again, whatever they were (a job started in
    # the background, as CI's is, ignores SIGINT)
    assert {sig: signal.getsignal(sig) for sig in signal.valid_signals()} == handlers


@pytest.mark.parametrize(
    "stderr, named",
    [
        ("no answer in 10 s", "squeue: no answer in 10 s"),
        ("squeue: error: Invalid user\n", "squeue: error: Invalid user"),
        ("", "squeue: exited 1"),
    ],
)
def test_a_failed_command_is_named_once(stderr, named):
    assert said(CommandResult(["/usr/bin/squeue", "--me"], 1, "", stderr)) == named


def test_a_session_closed_while_slurm_hangs_refreshes_no_more(home, tmp_path, monkeypatch):
    """A store of Slurm runs opened with no profile: the refresh polls Slurm (the header
    names it), and closing the session ends the hung sacct at once; no command starts
    after it."""
    bin_dir, state = tmp_path / "bin", tmp_path / "state"
    fake_slurm.install(bin_dir)
    state.mkdir()
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_SLURM_DIR", str(state))
    monkeypatch.setenv("FAKE_SLURM_HANG", "sacct,squeue,sacctmgr,sinfo,scontrol")
    slurm_runs(home)
    session = Session(home, "local")
    snaps = []
    worker = threading.Thread(target=lambda: snaps.append(session.refresh(None)))
    worker.start()
    _until(lambda: session.waiting())
    assert session.waiting()[0].command == "sacct"
    t = time.monotonic()
    session.close()
    worker.join(5)
    assert not worker.is_alive() and time.monotonic() - t < 2
    assert snaps[0].polled == ("slurm",)
    assert session.where_polled(snaps[0].polled) == "local, following slurm jobs"
    assert session.waiting() == []


def slurm_runs(home: Path, count: int = 3) -> list[str]:
    """The recorded quickstart study with its first runs RUNNING as Slurm jobs 420, 421..."""
    from tui_text import recorded_study

    recorded_study(home)
    store = Store(home)
    ids = []
    for i, run in enumerate(store.runs()[:count]):
        store.update_run(run["run_id"], state="RUNNING", backend="slurm", job_id=f"42{i}")
        store.jobs.add("slurm", f"42{i}", run["run_id"], "RUNNING")
        ids.append(run["run_id"])
    store.close()
    return ids


def test_the_site_is_asked_once_not_at_every_submit(home, tmp_path, monkeypatch):
    """A front end asks the cluster's limits and accounting once (the app at its start);
    a submission then asks nothing of sacctmgr or the controller's configuration."""
    from conftest import REPO, write_spec
    from dlscale.engine.config.spec import load_spec

    bin_dir, state = tmp_path / "bin", tmp_path / "state"
    fake_slurm.install(bin_dir)
    state.mkdir()
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_SLURM_DIR", str(state))
    session = Session(home, "slurm", str(REPO / "examples" / "clusters" / "test-cluster.toml"))
    site = session.learn_site()
    assert site.max_array_size == 1001 and site.accounting is True

    def asked(what: str) -> int:
        return (state / "calls.log").read_text().count(what)

    assert asked("scontrol show config") == 1 and asked("sacctmgr") == 1
    for i in range(2):
        spec = write_spec(tmp_path / f"s{i}.toml", name=f"once{i}", scales='"1x1"', steps=2)
        report = session.submit(load_spec(spec))
        assert len(report.submitted) == 1
    assert asked("scontrol show config") == 1 and asked("sacctmgr") == 1
    assert asked("sbatch") == 2


def _environ_has(pid: int, entry: str) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            return entry.encode() in fh.read().split(b"\0")
    except OSError:
        return False


def _fake_commands_left(state: Path) -> list[int]:
    entry = f"FAKE_SLURM_DIR={state}"
    return [
        int(p)
        for p in os.listdir("/proc")
        if p.isdigit() and not _gone(int(p)) and _environ_has(int(p), entry)
    ]


@pytest.mark.parametrize("command", ["status", "run --wait"])
def test_ctrl_c_in_the_command_line_leaves_at_once_while_slurm_hangs(home, tmp_path, command):
    """Issue 36, item 1: `dlscale status` and `dlscale run --wait` interrupted (SIGINT, as
    ctrl+c sends) while sacct and squeue do not answer: the prompt is back within a second,
    exit 130, and no Slurm command of theirs is left running."""
    import subprocess

    from conftest import BIN, REPO, write_spec

    bin_dir, state = tmp_path / "bin", tmp_path / "state"
    fake_slurm.install(bin_dir)
    state.mkdir()
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "FAKE_SLURM_DIR": str(state),
        "FAKE_SLURM_HANG": "sacct,squeue,sacctmgr,sinfo",
        "DLSCALE_HOME": str(home),
    }
    if command == "status":
        slurm_runs(home)
        argv = [str(BIN / "dlscale"), "status"]
    else:
        spec = write_spec(tmp_path / "s.toml", name="waits", scales='"1x1"', steps=2)
        profile = REPO / "examples" / "clusters" / "test-cluster.toml"
        argv = [str(BIN / "dlscale"), "run", str(spec), "--wait", "--backend", "slurm"]
        argv += ["--profile", str(profile)]
    # A script's background job (scripts/test runs the other Pythons' suites with `&`)
    # hands its children SIGINT ignored, which Python keeps: give the command ctrl+c's
    # default, as a terminal would.
    proc = subprocess.Popen(
        argv,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        _until(
            lambda: (state / "calls.log").exists() and "sacct" in (state / "calls.log").read_text()
        )
        _until(lambda: bool(_fake_commands_left(state)))  # sacct in flight, hung
        t = time.monotonic()
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=30)
        took = time.monotonic() - t
    finally:
        if proc.poll() is None:
            proc.kill()
    assert code == 130, proc.stderr.read()
    assert took < 1.0, f"the prompt came back after {took:.2f} s"
    _until(lambda: not _fake_commands_left(state))


def test_the_user_is_the_real_one_when_user_is_unset(monkeypatch):
    """Issue 47: with $USER and $LOGNAME unset (cron, a container), the queue was asked
    about `--user 0`; it is the name the password database gives this process's uid."""
    import pwd

    monkeypatch.delenv("USER", raising=False)
    monkeypatch.delenv("LOGNAME", raising=False)
    assert user_name() == pwd.getpwuid(os.getuid()).pw_name


def test_a_recorded_thread_s_commands_are_its_steps(tmp_path):
    """What a submission waits on, step by step (issue 47): each command the recording
    thread runs, its time limit (the front end's), and how it ended; another thread's
    commands are not among them."""
    calls = Calls(timeout=7)
    (tmp_path / "b").mkdir()
    ok, bad = _script(tmp_path, "exit 0"), _script(tmp_path / "b", "exit 3")
    threading.Thread(target=lambda: calls(ok)).start()
    with calls.recording() as steps:
        calls([*ok, "ping"])
        calls(bad, timeout=30)
    assert [(s.timeout, s.ok) for s in steps] == [(7, True), (7, False)]
    assert all(s.ended is not None and s.ended >= s.started for s in steps)
