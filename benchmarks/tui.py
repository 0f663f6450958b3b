"""How quickly does the TUI show a big queue and a big log?

1. Queue refresh with 1,000 jobs (target < 100 ms): the engine's part (the queue rows read
   from the store: three queries) and the table's part (JobTable.show_rows in the running
   app: the first fill, then a tick where 100 jobs changed state and 300 running jobs' elapsed
   time moved), each the median of repeated refreshes, plus the frame that follows.
2. Opening a 1 GB log at its tail (target < 0.2 s): from LogTail.open() to the last line on
   screen, in the running app, and the engine's tail_lines alone.

    .venv/bin/python benchmarks/tui.py [--log-gb 1]
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from dlscale.engine.launching.plan import Run
from dlscale.engine.session import Session
from dlscale.engine.tracking import queue
from dlscale.engine.tracking.logs import tail_lines
from dlscale.engine.tracking.store import Store
from dlscale.tui.app import DlscaleApp
from dlscale.tui.logtail import LogTail
from dlscale.tui.queue import JobTable

JOBS = 1000
REPEAT = 15


def big_store(home: Path) -> None:
    store = Store(home)
    store.save_experiment("big", "big.toml", "", "0")
    for i in range(JOBS):
        run = Run("big", "pytorch-ddp", "resnet50", "synthetic-imagenet", 1 + i % 8, 4, 64,
                  64 * 4 * (1 + i % 8), "weak", "fp32", "native", i // 8, {"steps": 100})
        store.add_run(run)
        store.add_job("local", f"local-{i}", run.run_id, "PENDING")
        if i < 300:  # 300 running, with a throughput record each
            store.update_job("local", f"local-{i}", state="RUNNING", started=time.time() - i)
            store.update_run(run.run_id, state="RUNNING")
            rd = Path(store.run(run.run_id)["run_dir"])
            rd.mkdir(parents=True, exist_ok=True)
            (rd / "metrics.jsonl").write_text(json.dumps({
                "schema": 1, "kind": "interval", "t": 1.0, "step": 10, "images_per_s": 812.5,
                "loss": 6.9, "lr": 0.1, "step_time_ms": 80.0}) + "\n")
            store.ingest(run.run_id, rd / "metrics.jsonl")
    store.close()


def ms(seconds: float) -> float:
    return round(seconds * 1000, 2)


async def measure_queue(home: Path) -> dict:
    store = Store(home)
    engine_times = []
    for _ in range(REPEAT):
        t = time.perf_counter()
        rows = queue.rows(store)
        engine_times.append(time.perf_counter() - t)
    assert len(rows) == JOBS
    app = DlscaleApp(Session(home, "local"), watch=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("f3")
        await pilot.pause(0.5)
        table = app.screen.query_one(JobTable)
        t = time.perf_counter()
        table.show_rows(rows)
        fill = time.perf_counter() - t
        await pilot.pause()
        updates, frames = [], []
        for k in range(REPEAT):
            changed = [r for r in rows]
            for i in range(300, 400):  # 100 jobs start running
                r = changed[i]
                changed[i] = queue.QueueRow(**{**r.__dict__, "state": "RUNNING" if k % 2 == 0
                                               else "PENDING", "nodes": "node1"})
            for i in range(300):       # the running ones' elapsed time moves on
                r = changed[i]
                changed[i] = queue.QueueRow(**{**r.__dict__, "elapsed_s": (r.elapsed_s or 0)
                                               + k + 1})
            t = time.perf_counter()
            table.show_rows(changed)
            updates.append(time.perf_counter() - t)
            t = time.perf_counter()
            await pilot.pause()
            frames.append(time.perf_counter() - t)
    store.close()
    return {"engine_rows_ms": ms(statistics.median(engine_times)), "first_fill_ms": ms(fill),
            "tick_update_ms": ms(statistics.median(updates)),
            "frame_after_tick_ms": ms(statistics.median(frames))}


def write_log(path: Path, gib: float) -> None:
    line = b"2026-11-22 10:00:00 rank 0 step 0001234 loss 2.3456 images_per_s 812.5\n"
    block = line * (4 * 2 ** 20 // len(line))
    with open(path, "wb") as fh:
        for _ in range(int(gib * 2 ** 30 // len(block))):
            fh.write(block)
        fh.write(b"the last line\n")


async def measure_log(home: Path, path: Path) -> dict:
    os.system("sync")
    t = time.perf_counter()
    lines = tail_lines(path, 500)
    engine = time.perf_counter() - t
    assert lines[-1] == "the last line"
    app = DlscaleApp(Session(home, "local"), watch=False)
    opens = []
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("f3")
        await pilot.pause(0.5)
        tail = app.screen.query_one(LogTail)
        tail.display = True
        log = tail.query_one("#log-lines")
        for _ in range(5):
            t = time.perf_counter()
            tail.open(path, "big")
            while not (log.line_count and log.lines[-1] == "the last line"):
                await asyncio.sleep(0.002)
            await pilot.pause()
            opens.append(time.perf_counter() - t)
            tail.close()
    return {"log_bytes": path.stat().st_size, "engine_tail_ms": ms(engine),
            "open_to_last_line_ms": ms(statistics.median(opens)),
            "open_runs_ms": [ms(x) for x in opens]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--log-gb", type=float, default=1.0)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        big_store(home)
        q = asyncio.run(measure_queue(home))
        total = q["engine_rows_ms"] + q["tick_update_ms"]
        print(f"queue, {JOBS} jobs: engine rows {q['engine_rows_ms']} ms + table update "
              f"{q['tick_update_ms']} ms = {total:.1f} ms per refresh (target < 100 ms); "
              f"first fill {q['first_fill_ms']} ms; frame after a tick "
              f"{q['frame_after_tick_ms']} ms")
        log_path = Path(tmp) / "big.log"
        write_log(log_path, args.log_gb)
        lg = asyncio.run(measure_log(home, log_path))
        print(f"log, {lg['log_bytes'] / 2 ** 30:.2f} GiB: engine tail {lg['engine_tail_ms']} "
              f"ms; open to last line on screen {lg['open_to_last_line_ms']} ms median of "
              f"{lg['open_runs_ms']} (target < 200 ms)")
    record = {"benchmark": "tui", "date": time.strftime("%Y-%m-%d %H:%M"), "jobs": JOBS,
              **q, "refresh_ms": round(total, 2), **lg}
    with open(Path(__file__).with_name("results.jsonl"), "a") as fh:
        fh.write(json.dumps(record) + "\n")


if __name__ == "__main__":
    main()
