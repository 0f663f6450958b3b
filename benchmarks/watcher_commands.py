"""How hard does the Slurm watcher lean on Slurm, and how fast does it read its answers?

Counts the Slurm commands the watcher issues per tick while tracking 1, 100, 1,000 and
10,000 jobs (target: one sacct per tick; squeue joins every few ticks for pending reasons),
and times parsing 1,000- and 10,000-job `sacct --parsable2` answers (with their step rows,
as Slurm prints them; target for 10,000: under 0.2 s), and one whole tick of the watcher
at 10,000 (its command faked, so what is timed is dlscale's own work).

    .venv/bin/python benchmarks/watcher_commands.py
"""

from __future__ import annotations

import os
import statistics
import time

from record import append_row

from dlscale.engine.backends.slurm.commands import SlurmCLI
from dlscale.engine.backends.slurm.common import CommandResult
from dlscale.engine.backends.slurm.parsing import parse_sacct

TICKS = 30


def sacct_answer(ids: list[str]) -> str:
    rows = []
    for j in ids:
        rows.append(f"{j}|{j}|RUNNING|0:0|120|node[1-2]|None")
        rows.append(f"{j}.batch|{j}.batch|RUNNING|0:0|120|node1|")
        rows.append(f"{j}.0|{j}.0|RUNNING|0:0|118|node[1-2]|")
    return "\n".join(rows) + "\n"


def main() -> None:
    print(
        f"{'jobs':>6} {'ticks':>6} {'commands':>9} {'per tick':>9} {'sacct':>6} {'squeue':>7} "
        f"{'tick ms':>8}"
    )
    results, tick_ms = {}, {}
    for n in (1, 100, 1000, 10_000):
        ids = [str(100000 + i) for i in range(n)]
        answer = sacct_answer(ids)
        queue = "".join(f"{j}|RUNNING|None|node1|2:00\n" for j in ids)
        calls: list[str] = []

        def runner(argv, env=None, timeout=60, answer=answer, queue=queue, calls=calls):
            calls.append(argv[0])
            return CommandResult(argv, 0, answer if argv[0] == "sacct" else queue, "")

        watcher = SlurmCLI(runner=runner, squeue_every=3).watcher
        ticks = TICKS if n < 10_000 else 6
        took = []
        for _ in range(ticks):
            t0 = time.perf_counter()
            watcher.poll(ids)
            took.append(time.perf_counter() - t0)
        per_tick = len(calls) / ticks
        results[n] = {
            "per_tick": per_tick,
            "sacct": calls.count("sacct"),
            "squeue": calls.count("squeue"),
            "ticks": ticks,
        }
        tick_ms[n] = statistics.median(took) * 1000
        print(
            f"{n:>6} {ticks:>6} {len(calls):>9} {per_tick:>9.2f} {calls.count('sacct'):>6} "
            f"{calls.count('squeue'):>7} {tick_ms[n]:>8.1f}"
        )
        assert calls.count("sacct") == ticks, "more than one sacct per tick"
    parse_ms = {}
    for n in (1000, 10_000):
        text = sacct_answer([str(100000 + i) for i in range(n)])
        times = []
        for _ in range(20 if n == 1000 else 7):
            t0 = time.perf_counter()
            jobs = parse_sacct(text)
            times.append(time.perf_counter() - t0)
        assert len(jobs) == n
        parse_ms[n] = statistics.median(times) * 1000
        print(
            f"\nparse a {n:,}-job sacct answer ({len(text.splitlines())} rows, "
            f"{len(text) / 1024:.0f} KiB): median {parse_ms[n]:.2f} ms over {len(times)} runs"
            + (" (target < 200 ms)" if n == 10_000 else "")
        )
    print(f"load average while measuring: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cpus")
    append_row(
        "watcher_commands",
        {
            "commands_per_tick": {n: r["per_tick"] for n, r in results.items()},
            "sacct_calls": {n: [r["sacct"], r["ticks"]] for n, r in results.items()},
            "tick_ms": {n: round(v, 2) for n, v in tick_ms.items()},
            "parse_1000_ms": parse_ms[1000],
            "parse_10000_ms": parse_ms[10_000],
        },
    )


if __name__ == "__main__":
    main()
