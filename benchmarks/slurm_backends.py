"""What a watcher tick and a submission cost through Slurm's commands and through pyslurm.

Against the running Slurm 25.11 test cluster: holds N pending jobs (1, 100, 1,000; held, so
they stay put) and times a poll of all of them by each backend, median of rounds, each
backend fresh per round (nothing cached), and counts the commands or API calls a tick makes
(averaged over three ticks); then times submitting held jobs one by one. Through the
commands a poll is one `sacct` (plus `squeue` every third tick); through pyslurm one
controller query (`pyslurm.Jobs.load`).

    eval "$(tests/slurm/cluster --slurm 25.11 up)"
    .venv/bin/python benchmarks/slurm_backends.py
"""

from __future__ import annotations

import statistics
import subprocess
import tempfile
import time
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

from record import append_row

from dlscale.engine.backends.base import JobRequest
from dlscale.engine.backends.slurm.commands import SlurmCLI
from dlscale.engine.backends.slurm.common import run_command
from dlscale.engine.backends.slurm.pyslurm.backend import PyslurmBackend

ROUNDS = 5
SUBMITS = 10
SIZES = (1, 100, 1000)
CALLS: Counter = Counter()  # commands and API calls made, by name


def counting_runner(argv, *args, **kwargs):
    CALLS[argv[0]] += 1
    return run_command(argv, *args, **kwargs)


class _Counted:
    """A pyslurm class whose load() is counted."""

    def __init__(self, cls, name: str) -> None:
        self.cls, self.name = cls, name

    def load(self, *args, **kwargs):
        CALLS[self.name] += 1
        return self.cls.load(*args, **kwargs)


def counting_pyslurm() -> PyslurmBackend:
    backend = PyslurmBackend()
    api = backend.controller.api
    names = {k: getattr(api, k) for k in dir(api) if not k.startswith("__")}
    names.update(
        Jobs=_Counted(api.Jobs, "pyslurm.Jobs.load"),
        db=SimpleNamespace(
            Jobs=_Counted(api.db.Jobs, "pyslurm.db.Jobs.load"), JobFilter=api.db.JobFilter
        ),
    )
    backend.controller.api = SimpleNamespace(**names)
    return backend


def counting_cli() -> SlurmCLI:
    return SlurmCLI(runner=counting_runner)


def held_jobs(n: int) -> list[str]:
    return [
        subprocess.run(
            ["sbatch", "--parsable", "-H", "-o", "/dev/null", "--wrap", "true"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        for _ in range(n)
    ]


def tick_seconds(make, ids: list[str]) -> tuple[float, float]:
    """Median over rounds of one tick's time, averaged over three ticks of a fresh watcher;
    and the calls one tick makes, on average."""
    times = []
    CALLS.clear()
    for _ in range(ROUNDS):
        watcher = make().watcher
        t0 = time.perf_counter()
        for _ in range(3):
            out = watcher.poll(ids)
        times.append((time.perf_counter() - t0) / 3)
        assert len(out) == len(ids) and {s.state for s in out.values()} == {"PENDING"}
    return statistics.median(times), sum(CALLS.values()) / (3 * ROUNDS)


def submit_seconds(scheduler, folder: Path) -> tuple[float, list[str]]:
    """Median time to submit one job (it runs `true`)."""
    (folder / "job.sh").write_text("#!/bin/bash\n#SBATCH --output=/dev/null\ntrue\n")
    ids, times = [], []
    for _ in range(SUBMITS):
        t0 = time.perf_counter()
        ids.append(scheduler.submit(JobRequest("bench", folder, [])))
        times.append(time.perf_counter() - t0)
    return statistics.median(times), ids


def main() -> None:
    version = subprocess.run(["scontrol", "version"], capture_output=True, text=True).stdout
    if "25.11" not in version:
        raise SystemExit(
            "benchmarks/slurm_backends.py: needs the 25.11 test cluster's "
            'environment (eval "$(tests/slurm/cluster --slurm 25.11 up)")'
        )
    results: dict = {"slurm": version.strip()}
    made: list[str] = []
    try:
        print(
            f"{'jobs':>5} {'commands ms':>12} {'calls/tick':>10} {'pyslurm ms':>11} "
            f"{'calls/tick':>10} {'commands/pyslurm':>17}"
        )
        made += held_jobs(max(SIZES))
        for n in SIZES:
            ids = made[:n]
            cli, cli_calls = tick_seconds(counting_cli, ids)
            py, py_calls = tick_seconds(counting_pyslurm, ids)
            results[f"tick_{n}"] = {
                "commands_ms": cli * 1000,
                "commands_per_tick": cli_calls,
                "pyslurm_ms": py * 1000,
                "pyslurm_calls_per_tick": py_calls,
                "ratio": cli / py,
            }
            print(
                f"{n:>5} {cli * 1000:>12.1f} {cli_calls:>10.2f} {py * 1000:>11.1f} "
                f"{py_calls:>10.2f} {cli / py:>17.1f}"
            )
        with tempfile.TemporaryDirectory() as tmp:
            cli_s, _ = submit_seconds(SlurmCLI(), Path(tmp))
            py_s, _ = submit_seconds(PyslurmBackend(), Path(tmp))
        results.update(submit_commands_ms=cli_s * 1000, submit_pyslurm_ms=py_s * 1000)
        print(
            f"\nsubmit one job (median of {SUBMITS}): commands {cli_s * 1000:.1f} ms, "
            f"pyslurm {py_s * 1000:.1f} ms; commands/pyslurm {cli_s / py_s:.1f}"
        )
    finally:
        for i in range(0, len(made), 200):
            subprocess.run(["scancel", *made[i : i + 200]], capture_output=True)
    append_row("slurm_backends", results)


if __name__ == "__main__":
    main()
