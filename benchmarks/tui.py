"""How quickly does the TUI show a big queue and a big log?

1. Queue refresh with --jobs jobs (default 10,000; target < 100 ms a refresh), 300 of them
   running and 100 changing state per tick, in the running app: each tick changes the store
   (100 jobs start or stop, 100 running jobs report a new interval record, the running
   jobs' clocks move), then the engine reads the queue (the QueueReader the watcher keeps)
   and the table shows it (JobTable.show_rows), each the median of repeated ticks, plus
   the frame that follows. Also the first fill: the first read, showing every row, and
   the time until DataTable has measured them and drawn the first frame.
2. Opening a 1 GB log at its tail (target < 0.2 s): from LogTail.open() to the last line on
   screen, in the running app, and the engine's tail_lines alone.
3. A full log panel (KEEP_LINES lines of 200 characters) at 80x24: wrapping it (w),
   unwrapping it, and finding its last line (n), each to the frame that shows it (target
   < 1 s; only the rows on screen are drawn, tests/test_tui_logview.py asserts that).
4. Key to screen in the Queue at 80x24 with processes spinning on the cores, as on a login
   node: down (target < 100 ms median, a keystroke's echo) and o, which sorts every row
   (target < 500 ms median at 10,000 runs).

    .venv/bin/python benchmarks/tui.py [--jobs 10000] [--log-gb 1]
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

from record import append_row

from dlscale.engine.launching.plan import Run
from dlscale.engine.session import Session
from dlscale.engine.tracking.logs import tail_lines
from dlscale.engine.tracking.queue import QueueReader
from dlscale.engine.tracking.store import Store
from dlscale.tui.app import DlscaleApp
from dlscale.tui.jobtable import ROWS_PER_FRAME, JobTable
from dlscale.tui.logtail import KEEP_LINES, LogTail
from dlscale.tui.logview import LogView
from dlscale.tui.messages import QueueRefreshed

KEY_DOWN_TARGET_MS = 100
KEY_SORT_TARGET_MS = 500
RUNNING = 300  # jobs running (their clocks move every tick)
CHANGING = 100  # jobs that start or stop every tick; as many running jobs report a record
REPEAT = 15


def interval(step: int) -> str:
    return (
        json.dumps(
            {
                "schema": 1,
                "kind": "interval",
                "t": float(step),
                "step": step,
                "images_per_s": 800.0 + step,
                "loss": 6.9,
                "lr": 0.1,
                "step_time_ms": 80.0,
            }
        )
        + "\n"
    )


def big_store(home: Path, jobs: int) -> list[str]:
    """`jobs` runs, each with its job; RUNNING of them running, with a record each."""
    store = Store(home)
    store.save_experiment("big", "big.toml", "", "0")
    ids = []
    for i in range(jobs):
        run = Run(
            "big",
            "pytorch-ddp",
            "resnet50",
            "synthetic-imagenet",
            1 + i % 8,
            4,
            64,
            64 * 4 * (1 + i % 8),
            "weak",
            "fp32",
            "native",
            i // 8,
            {"steps": 100},
        )
        store.add_run(run)
        store.update_run(run.run_id, backend="local", job_id=f"local-{i}", state="PENDING")
        store.jobs.add("local", f"local-{i}", run.run_id, "PENDING")
        ids.append(run.run_id)
        if i < RUNNING:
            store.jobs.update("local", f"local-{i}", state="RUNNING", started=time.time() - i)
            store.update_run(run.run_id, state="RUNNING")
            rd = Path(store.run(run.run_id)["run_dir"])
            rd.mkdir(parents=True, exist_ok=True)
            (rd / "metrics.jsonl").write_text(interval(10))
            store.records.ingest(run.run_id, rd / "metrics.jsonl")
    store.close()
    return ids


def tick(store: Store, ids: list[str], k: int) -> None:
    """What a watcher tick finds changed in the store (not timed)."""
    start = k % 2 == 0
    for i in range(RUNNING, RUNNING + CHANGING):
        store.jobs.update(
            "local",
            f"local-{i}",
            state="RUNNING" if start else "PENDING",
            started=time.time() if start else None,
            nodes="node1" if start else None,
        )
        store.update_run(ids[i], state="RUNNING" if start else "PENDING")
    for i in range(k % 3, RUNNING, RUNNING // CHANGING):  # a third of them, in turn
        path = Path(store.run(ids[i])["run_dir"]) / "metrics.jsonl"
        with open(path, "a") as fh:
            fh.write(interval(11 + k))
        store.records.ingest(ids[i], path)


def ms(seconds: float) -> float:
    return round(seconds * 1000, 2)


async def measure_queue(home: Path, ids: list[str]) -> dict:
    store = Store(home)
    reader = QueueReader()
    t = time.perf_counter()
    rows = reader.rows(store)
    first_read = time.perf_counter() - t
    assert len(rows) == len(ids)
    app = DlscaleApp(Session(home, "local"), watch=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("f3")
        await pilot.pause(0.5)
        table = app.screen.query_one(JobTable)
        t = time.perf_counter()
        table.show_rows(rows)
        fill = time.perf_counter() - t
        # The first frame (DataTable measures the new rows, then draws) is over when the
        # next thousand rows start coming in.
        while table.row_count <= min(ROWS_PER_FRAME, len(ids) - 1):
            await asyncio.sleep(0.005)
        first_frame = time.perf_counter() - t
        while table.row_count < len(ids) or table.virtual_size.height < len(ids):
            await asyncio.sleep(0.005)  # the rest, a frame at a time (JobTable)
        await pilot.pause()
        fill_shown = time.perf_counter() - t
        engine, updates, frames, cpu = [], [], [], []
        for k in range(REPEAT):
            tick(store, ids, k)
            t0, c0 = time.perf_counter(), time.process_time()
            rows = reader.rows(store)
            t1 = time.perf_counter()
            table.show_rows(rows)
            t2, c2 = time.perf_counter(), time.process_time()
            await pilot.pause()
            frames.append(time.perf_counter() - t2)
            engine.append(t1 - t0)
            updates.append(t2 - t1)
            cpu.append(c2 - c0)
        shown = table.get_row(ids[RUNNING])
        assert any(state in str(shown) for state in ("RUNNING", "PENDING")), shown
    store.close()
    refresh = [e + u for e, u in zip(engine, updates)]
    return {
        "engine_rows_ms": ms(statistics.median(engine)),
        "tick_update_ms": ms(statistics.median(updates)),
        "refresh_ms": ms(statistics.median(refresh)),
        "refresh_max_ms": ms(max(refresh)),
        # CPU time of the refresh: what it costs this process whatever else the shared
        # machine runs meanwhile (the wall-clock times above include waiting for a core).
        "refresh_cpu_ms": ms(statistics.median(cpu)),
        "frame_after_tick_ms": ms(statistics.median(frames)),
        "first_read_ms": ms(first_read),
        "first_fill_ms": ms(fill),
        "first_frame_ms": ms(first_frame),
        "first_fill_shown_ms": ms(fill_shown),
    }


def _spin(stop) -> None:
    while not stop.is_set():
        pass


async def measure_keys(home: Path, load: int, presses: int = 60) -> dict:
    """Key to screen in the Queue: from a key (down, or o to sort) to the app having acted
    on it and drawn the frame (Pilot's press returns once the app is idle again), with
    `load` processes spinning on the cores meanwhile, as on a login node."""
    import multiprocessing

    stop = multiprocessing.Event()
    spinners = [multiprocessing.Process(target=_spin, args=(stop,)) for _ in range(load)]
    app = DlscaleApp(Session(home, "local"), watch=False)
    down, sort = [], []
    try:
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.press("f3")
            table = app.screen.query_one(JobTable)
            app.post_message(QueueRefreshed(Session(home, "local").refresh(app.experiment)))
            while table.row_count < len(Store(home).runs()):
                await asyncio.sleep(0.05)
            table.focus()
            await pilot.pause(0.5)
            for p in spinners:
                p.start()
            for k in range(presses):
                t = time.perf_counter()
                await pilot.press("down")
                down.append(time.perf_counter() - t)
                if k % 10 == 0:
                    t = time.perf_counter()
                    await pilot.press("o")
                    sort.append(time.perf_counter() - t)
    finally:
        stop.set()
        for p in spinners:
            p.join()
    return {
        "key_down_median_ms": ms(statistics.median(down)),
        "key_down_max_ms": ms(max(down)),
        "key_sort_median_ms": ms(statistics.median(sort)),
        "key_sort_max_ms": ms(max(sort)),
        "key_load_processes": load,
    }


def write_log(path: Path, gib: float) -> None:
    line = b"2026-11-22 10:00:00 rank 0 step 0001234 loss 2.3456 images_per_s 812.5\n"
    block = line * (4 * 2**20 // len(line))
    with open(path, "wb") as fh:
        for _ in range(int(gib * 2**30 // len(block))):
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
    return {
        "log_bytes": path.stat().st_size,
        "engine_tail_ms": ms(engine),
        "open_to_last_line_ms": ms(statistics.median(opens)),
        "open_runs_ms": [ms(x) for x in opens],
    }


async def measure_panel(home: Path, rounds: int = 5) -> dict:
    """Wrap, unwrap and find on a full log panel, each to its frame; medians of rounds."""
    app = DlscaleApp(Session(home, "local"), watch=False)
    took: dict[str, list[float]] = {"wrap": [], "unwrap": [], "find": []}
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("f3")
        await pilot.pause(0.5)
        tail = app.screen.query_one(LogTail)
        tail.display = True
        view = tail.query_one(LogView)
        view.write_lines([f"{i:06d} " + "z" * 193 for i in range(KEEP_LINES)])
        await pilot.pause()
        for _ in range(rounds):
            for step in took:
                t = time.perf_counter()
                if step == "find":
                    tail.find(f"{KEEP_LINES - 1 - len(took['find']):06d}")
                else:
                    view.set_wrap(not view.wrap)
                await pilot.pause()
                took[step].append(time.perf_counter() - t)
    return {f"panel_{k}_ms": ms(statistics.median(v)) for k, v in took.items()}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=10_000)
    ap.add_argument("--log-gb", type=float, default=1.0)
    ap.add_argument("--load", type=int, default=2, help="spinning processes for the key test")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        keys = {}
        small = Path(tmp) / "small"
        big_store(small, 100)
        for n, where in ((100, small), (args.jobs, None)):
            if where is None:
                where = Path(tmp) / "home"
                ids = big_store(where, n)
            k = asyncio.run(measure_keys(where, args.load))
            keys[n] = k
            print(
                f"queue keys, {n} runs, {args.load} processes spinning: down "
                f"{k['key_down_median_ms']} ms median (target < {KEY_DOWN_TARGET_MS} ms), "
                f"{k['key_down_max_ms']} ms slowest; sort (o) {k['key_sort_median_ms']} ms "
                f"median (target < {KEY_SORT_TARGET_MS} ms), {k['key_sort_max_ms']} ms "
                f"slowest; load average {os.getloadavg()[0]:.1f}"
            )
        home = Path(tmp) / "home"
        q = asyncio.run(measure_queue(home, ids))
        print(
            f"queue, {args.jobs} jobs ({RUNNING} running, {CHANGING} changing state per "
            f"tick): engine rows {q['engine_rows_ms']} ms + table update "
            f"{q['tick_update_ms']} ms = {q['refresh_ms']} ms per refresh, median of "
            f"{REPEAT} (slowest {q['refresh_max_ms']} ms; target < 100 ms), CPU time "
            f"{q['refresh_cpu_ms']} ms; frame after a tick {q['frame_after_tick_ms']} ms; "
            f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
        )
        print(
            f"first fill: engine rows {q['first_read_ms']} ms; the table's first "
            f"{ROWS_PER_FRAME} rows {q['first_fill_ms']} ms, on screen after "
            f"{q['first_frame_ms']} ms; all rows in and measured after "
            f"{q['first_fill_shown_ms']} ms"
        )
        log_path = Path(tmp) / "big.log"
        write_log(log_path, args.log_gb)
        lg = asyncio.run(measure_log(home, log_path))
        print(
            f"log, {lg['log_bytes'] / 2**30:.2f} GiB: engine tail {lg['engine_tail_ms']} "
            f"ms; open to last line on screen {lg['open_to_last_line_ms']} ms median of "
            f"{lg['open_runs_ms']} (target < 200 ms)"
        )
        panel = asyncio.run(measure_panel(home))
        print(
            f"log panel, {KEEP_LINES:,} lines of 200 characters at 80x24: wrap "
            f"{panel['panel_wrap_ms']} ms, unwrap {panel['panel_unwrap_ms']} ms, find "
            f"{panel['panel_find_ms']} ms, medians to the frame (target < 1000 ms)"
        )
    fields = {
        "jobs": args.jobs,
        "running": RUNNING,
        "changing": CHANGING,
        **q,
        **lg,
        **panel,
        "keys": {str(n): k for n, k in keys.items()},
    }
    append_row("tui", fields)


if __name__ == "__main__":
    main()
