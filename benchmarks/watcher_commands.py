"""How hard does the Slurm watcher lean on Slurm, and how fast does it read its answers?

Counts the Slurm commands the watcher issues per tick while tracking 1, 100 and 1,000 jobs
(target: one per tick; squeue joins every few ticks for pending reasons), and times parsing
a 1,000-job `sacct --parsable2` answer (with its step rows, as Slurm prints them).

    .venv/bin/python benchmarks/watcher_commands.py
"""
from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

from dlscale.engine.backends.slurm import CommandResult, SlurmCLI
from dlscale.engine.backends.slurm_parse import parse_sacct

TICKS = 30


def sacct_answer(ids: list[str]) -> str:
    rows = []
    for j in ids:
        rows.append(f"{j}|{j}|RUNNING|0:0|120|node[1-2]|None")
        rows.append(f"{j}.batch|{j}.batch|RUNNING|0:0|120|node1|")
        rows.append(f"{j}.0|{j}.0|RUNNING|0:0|118|node[1-2]|")
    return "\n".join(rows) + "\n"


def main() -> None:
    print(f"{'jobs':>6} {'ticks':>6} {'commands':>9} {'per tick':>9} {'sacct':>6} {'squeue':>7}")
    results = {}
    for n in (1, 100, 1000):
        ids = [str(100000 + i) for i in range(n)]
        calls: list[str] = []

        def runner(argv, env=None, timeout=60):
            calls.append(argv[0])
            if argv[0] == "sacct":
                return CommandResult(argv, 0, sacct_answer(ids), "")
            return CommandResult(argv, 0, "".join(f"{j}|RUNNING|None|node1|2:00\n" for j in ids), "")
        watcher = SlurmCLI(runner=runner, squeue_every=3)
        for _ in range(TICKS):
            watcher.poll(ids)
        per_tick = len(calls) / TICKS
        results[n] = per_tick
        print(f"{n:>6} {TICKS:>6} {len(calls):>9} {per_tick:>9.2f} {calls.count('sacct'):>6} "
              f"{calls.count('squeue'):>7}")
    text = sacct_answer([str(100000 + i) for i in range(1000)])
    times = []
    for _ in range(20):
        t0 = time.perf_counter()
        jobs = parse_sacct(text)
        times.append(time.perf_counter() - t0)
    assert len(jobs) == 1000
    ms = statistics.median(times) * 1000
    print(f"\nparse a 1,000-job sacct answer ({len(text.splitlines())} rows, {len(text) / 1024:.0f} KiB): "
          f"median {ms:.2f} ms over {len(times)} runs")
    with open(Path(__file__).with_name("results.jsonl"), "a") as fh:
        fh.write(json.dumps({"benchmark": "watcher_commands", "date": time.strftime("%Y-%m-%d %H:%M"),
                             "commands_per_tick": results, "parse_1000_ms": ms}) + "\n")


if __name__ == "__main__":
    main()
