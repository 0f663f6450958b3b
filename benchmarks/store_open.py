"""What would checking the store's pages at every open cost (issue 11, item 12)?

Builds stores of 100, 1,000 and 5,000 runs with 60 records each (the quickstart's records,
repeated: params, env, 4 intervals, summary, then more intervals), and times, alternating
in rounds: opening a Store (what every command and TUI worker thread does), `PRAGMA
quick_check` (the cheap page check), and the queue rows `dlscale status` reads. A damaged
page is instead reported when a query meets it, with the way out (`dlscale store rebuild`);
this says whether a check at open would be worth its time.

    .venv/bin/python benchmarks/store_open.py
"""

from __future__ import annotations

import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

from record import append_row

from dlscale.engine.launching.plan import Run
from dlscale.engine.tracking import queue
from dlscale.engine.tracking.store import Store

FIXTURE = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "tui-quickstart"
ROUNDS = 5


def build(home: Path, runs: int) -> int:
    lines = next(FIXTURE.glob("runs/*/metrics.jsonl")).read_text().splitlines()
    body = "\n".join(lines[:-1] + [lines[2]] * 53 + lines[-1:]) + "\n"  # 60 records
    store = Store(home)
    for i in range(runs):
        run = Run(
            "big",
            "pytorch-ddp",
            "resnet20",
            "synthetic-cifar",
            1,
            1,
            64,
            64,
            "weak",
            "fp32",
            "native",
            i,
            {"steps": 30},
        )
        row = store.add_run(run)
        Path(row["run_dir"]).mkdir(parents=True, exist_ok=True)
        (Path(row["run_dir"]) / "metrics.jsonl").write_text(body)
        store.records.ingest(run.run_id, Path(row["run_dir"]) / "metrics.jsonl")
        store.update_run(run.run_id, state="COMPLETED")
    store.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    store.close()
    return (home / "dlscale.db").stat().st_size


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1000


def main() -> None:
    out = {}
    print(
        f"{'runs':>6} {'MB':>6} {'open ms':>8} {'quick_check ms':>15} {'status rows ms':>15} "
        f"{'check / open':>13}"
    )
    for runs in (100, 1000, 5000):
        with tempfile.TemporaryDirectory() as tmp:
            home = Path(tmp)
            size = build(home, runs)
            opens, checks, rows = [], [], []
            for _ in range(ROUNDS):
                opens.append(timed(lambda: Store(home).close()))
                conn = sqlite3.connect(home / "dlscale.db")
                checks.append(timed(lambda: conn.execute("PRAGMA quick_check").fetchall()))
                conn.close()
                store = Store(home)
                rows.append(timed(lambda: queue.rows(store)))
                store.close()
            o, c, r = (statistics.median(x) for x in (opens, checks, rows))
            out[runs] = {
                "mb": round(size / 2**20, 1),
                "open_ms": round(o, 2),
                "quick_check_ms": round(c, 2),
                "status_rows_ms": round(r, 2),
            }
            print(f"{runs:>6} {size / 2**20:>6.1f} {o:>8.2f} {c:>15.2f} {r:>15.2f} {c / o:>13.1f}")
    append_row("store_open", {"rounds": ROUNDS, "records_per_run": 60, "by_runs": out})


if __name__ == "__main__":
    main()
