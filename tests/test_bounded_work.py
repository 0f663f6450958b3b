"""Bounded work and true reasons (issue 46, item 4), with real runs of a standard-library
script on the local backend and the real `dlscale` binary:

- every local run has a time limit (the spec's `experiment.time_limit`, else the
  default): a trainer that stops itself (SIGSTOP) or hangs ends TIMEOUT with that reason,
  and `run --wait` returns;
- a run that failed because the disk filled says so, whether its log could say it (the
  disk under its folder, a small tmpfs, full as it ran) or said it itself;
- an internal error exits 70, distinct from every answer (check's 1 is a regression), in
  one line naming the file its traceback was saved to; a fault of the world under `check`
  exits 4; `check --help` lists what each status means;
- the change-point search looks at a bounded window of a point's history (its cost is
  measured in benchmarks/long_history.py, not timed here).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import time
from pathlib import Path

import pytest
from test_bad_input import invoke
from test_check import SPEC, _study, baseline_bundle  # noqa: F401  (a fixture)

from conftest import HANG_S, dlscale
from dlscale.engine.results.regression import changepoints
from dlscale.engine.tracking.store import Store

pytestmark = pytest.mark.timeout(600)

ROOT = os.geteuid() == 0

SCRIPT = """\
import os, signal, sys, time
how = sys.argv[1]
print("step 1/100 (1%) ETA 99 s", flush=True)
if how == "stop":
    os.kill(os.getpid(), signal.SIGSTOP)
elif how == "hang":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # deaf to the polite word, too
    time.sleep(3600)
elif how == "fill":  # writes into its folder until the disk is full
    with open("checkpoint.bin", "wb") as fh:
        for i in range(100000):
            fh.write(b"\\0" * 65536)
            fh.flush()
            print(f"step {i}/100000 saving", flush=True)
elif how == "says-full":
    print("OSError: [Errno 28] No space left on device: 'ckpt/epoch-3.pt'", flush=True)
    print("step 50/151 (33%) ETA 12 s", flush=True)
    sys.exit(1)
"""


def study(tmp_path: Path, how: str, time_limit: str | None = None) -> Path:
    script = tmp_path / "trainer.py"
    script.write_text(SCRIPT)
    limit = f'time_limit = "{time_limit}"' if time_limit else ""
    spec = tmp_path / f"{how}.toml"
    spec.write_text(f"""\
[experiment]
name = "{how}"
frameworks = ["mine"]
models = ["m"]
datasets = ["synthetic"]
scales = ["1x1"]
per_device_batch = [1]
repetitions = 1
{limit}

[training]
steps = 5

[frameworks.mine]
script = "{script}"
command = ["{{python}}", "{{script}}", "{how}"]
unit = "images"
""")
    return spec


@pytest.mark.parametrize("how", ["stop", "hang"])
def test_a_stopped_or_hung_trainer_ends_at_its_time_limit(tmp_path, home, how):
    spec = study(tmp_path, how, time_limit="0:03")
    start = time.monotonic()
    proc = dlscale("run", str(spec), "--wait", home=home, timeout=HANG_S * 4)
    took = time.monotonic() - start
    (run,) = Store(home).runs(how)
    assert run["state"] == "TIMEOUT", (run["reason"], proc.stderr)
    assert run["reason"].startswith("the run passed its time limit of 00:00:03"), run["reason"]
    assert took < 3 + 10 + HANG_S  # the limit, the grace before SIGKILL, a poll or two
    assert proc.returncode == 1  # a run that did not complete
    status = dlscale("status", "--all", home=home).stdout
    assert "TIMEOUT" in status and "time limit" in status


def test_every_local_run_has_a_limit_even_where_its_spec_sets_none(tmp_path, home):
    from dlscale.engine.backends.local.backend import DEFAULT_TIME_LIMIT
    from dlscale.engine.config.times import time_to_seconds

    spec = study(tmp_path, "says-full")
    dlscale("run", str(spec), "--wait", home=home, timeout=HANG_S * 4)
    (job,) = Store(home).jobs.find("local")
    limit = json.loads(job["payload"])["time_limit_s"]
    assert limit == time_to_seconds(DEFAULT_TIME_LIMIT) == 30 * 60


def test_a_spec_time_limit_is_checked_at_its_line(tmp_path, home):
    spec = study(tmp_path, "stop", time_limit="0")
    proc = dlscale("plan", str(spec), home=home)
    assert proc.returncode == 2 and "time_limit" in proc.stderr and "zero" in proc.stderr


def test_a_run_that_filled_the_disk_says_so(tmp_path, home):
    if not ROOT:
        pytest.skip("a full disk is a small tmpfs, mounted as root")
    runs = home / "runs"
    runs.mkdir(parents=True)
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(runs)]).returncode:
        pytest.skip("a full disk is a small tmpfs, mounted as root")
    try:
        spec = study(tmp_path, "fill")
        dlscale("run", str(spec), "--wait", home=home, timeout=HANG_S * 4)
        (run,) = Store(home).runs("fill")
        assert run["state"] == "FAILED"
        assert run["reason"].startswith("the disk was full ("), run["reason"]
    finally:
        subprocess.run(["umount", "-l", str(runs)])


def test_a_run_whose_log_says_the_disk_was_full_says_so_first(tmp_path, home):
    spec = study(tmp_path, "says-full")
    dlscale("run", str(spec), "--wait", home=home, timeout=HANG_S * 4)
    (run,) = Store(home).runs("says-full")
    assert run["state"] == "FAILED"
    first = run["reason"].splitlines()[0]
    assert first == (
        "the disk was full (OSError: [Errno 28] No space left on device: 'ckpt/epoch-3.pt')"
    )


# --- exit statuses ---------------------------------------------------------------------------


def test_an_internal_error_has_a_status_of_its_own_and_its_traceback_saved(
    tmp_path,
    capsys,
    monkeypatch,
    baseline_bundle,  # noqa: F811
):
    from dlscale.engine.results.regression import check as checking

    home = _study(tmp_path / "h", [100, 100.5, 99.5], [150, 150.5, 149.5])  # one regressed
    monkeypatch.setenv("DLSCALE_HOME", str(home))
    monkeypatch.delenv("DLSCALE_DEBUG", raising=False)

    def broken(*args, **kw):
        raise ZeroDivisionError("float division by zero")

    monkeypatch.setattr(checking, "judge", broken)
    junit = tmp_path / "j.xml"
    code, out, err = invoke(
        capsys, "check", str(SPEC), "--baseline", str(baseline_bundle), "--junit", str(junit)
    )
    assert code == 70, (code, err)  # not 1: a crash never reads as a regression
    (line,) = err.splitlines()
    assert line.startswith("dlscale: internal error: ZeroDivisionError: float division by zero")
    saved = Path(line.split("its traceback is in ", 1)[1].split(";", 1)[0])
    assert saved.parent == home / "errors"
    assert "Traceback" in saved.read_text() and "broken" in saved.read_text()
    assert "internal error" in junit.read_text()  # CI sees the error, not a regression


def test_a_fault_of_the_world_under_check_is_not_a_regression(
    tmp_path,
    baseline_bundle,  # noqa: F811
):
    home = tmp_path / "h"
    home.mkdir()
    (home / "dlscale.db").mkdir()  # a store that cannot be opened
    proc = dlscale("check", str(SPEC), "--baseline", str(baseline_bundle), home=home)
    said = [line for line in proc.stderr.splitlines() if line.startswith("dlscale: error")]
    assert proc.returncode == 4 and len(said) == 1, (proc.returncode, proc.stderr)


def test_check_says_what_each_exit_status_means():
    out = dlscale("check", "--help").stdout
    listed = {line.split()[0] for line in out.splitlines() if line.startswith("    ")}
    assert {"0", "1", "2", "3", "4", "70", "130"} <= listed, out
    top = dlscale("--help").stdout
    assert "70 an" in top.replace("\n", " ").replace("  ", " ")


# --- change points: bounded -----------------------------------------------------------------


def test_the_change_point_search_looks_at_a_bounded_window():
    """A long series is searched in its last WINDOW values only: a change before them is
    not found (nor paid for), one within them is, at its index in the whole series."""
    rng = random.Random(3)
    n, window = 20_000, changepoints.WINDOW

    def series(change_at: int) -> list[float]:
        return [(100 if i < change_at else 90) * (1 + rng.gauss(0, 0.01)) for i in range(n)]

    assert changepoints.change_points(series(n // 2), 0.05) == []
    (found,) = changepoints.change_points(series(n - window // 2), 0.05)
    assert found.index == n - window // 2 and found.change == pytest.approx(-0.1, abs=0.01)


def test_the_check_says_when_only_the_last_checks_were_searched(
    tmp_path,
    capsys,
    monkeypatch,
    baseline_bundle,  # noqa: F811
):
    home = _study(tmp_path / "h", [100, 100.5, 99.5], [190, 190.5, 189.5])
    history = tmp_path / "history.jsonl"
    first = dlscale(
        "check", str(SPEC), "--baseline", str(baseline_bundle), "--history", str(history), home=home
    )
    assert first.returncode == 0, first.stderr
    template = [json.loads(line) for line in history.read_text().splitlines()]
    rng = random.Random(5)
    with open(history, "w") as fh:
        for i in range(60):  # 60 checks of each point, 15% slower for the last 12
            for entry in template:
                value = entry["value"] * (0.85 if i >= 48 else 1) * (1 + rng.gauss(0, 0.005))
                fh.write(
                    json.dumps({**entry, "value": value, "values": [value], "label": f"c{i}"})
                    + "\n"
                )
    monkeypatch.setattr(changepoints, "WINDOW", 30)
    monkeypatch.setenv("DLSCALE_HOME", str(home))
    code, out, err = invoke(
        capsys, "check", str(SPEC), "--baseline", str(baseline_bundle), "--history", str(history)
    )
    assert code == 0, err
    said = [line for line in out.splitlines() if line.startswith("change point")]
    assert len(said) == 2 and all("at c48" in line for line in said), out
    assert all("check 49 of 61, the last 30 searched" in line for line in said), said
