"""Does dlscale see the runs other work disturbed, and only those (issue 50)?

Real CPU runs on the local backend: one spec of --runs repetitions of one point (ResNet-20,
synthetic CIFAR, 1 rank of 2 threads, so the run wants both of this machine's CPUs), run by
`dlscale run --wait`. The benchmark watches the store, and as each run starts it draws,
unseen by dlscale, whether something runs beside it and what (half the runs quiet, the
rest one of the three in turn; a rerun, which comes later when a burst may have passed, is
disturbed one time in five), and stops that when the run ends:
- cpu: a busy loop pinned to one of the run's CPUs, drawn at random;
- io: a writer that writes 4 MiB blocks to a file beside the store and fsyncs each;
- memory: a memory-bandwidth hog: copies a 256 MiB buffer over and over, on one CPU.
Then each run's interference record is judged (engine/results/disturbed.py, at its
thresholds as committed) and set beside what ran with it.

Printed and appended to results.jsonl: per adversary, the runs flagged of those it
disturbed, and the quiet runs flagged; each signal's values in quiet runs and in each
adversary's (what the thresholds are calibrated from: docs/measuring.md says how); the
mean throughput quiet and with each adversary (does the adversary cost the run at all?);
and the point's 95% interval counting every run against leaving the flagged ones out
(the spec's `disturbed = "leave-out"`), as a ratio of half-widths, same runs; the point as
`dlscale results` gives it with the spec's `disturbed = "rerun"` (at most one rerun a run,
the rerun standing in for the run it repeats) against the first attempts all counted; and the
sampler's own cost: one reading of the counters (interference.read, timed here before the
study, 50 times), which a run takes twice a timed segment, outside its timed steps, against
the runs' median step.

    .venv/bin/python benchmarks/interference.py [--runs 60] [--steps 20] [--seed N]

CPU heavy: 60 runs take about 20 minutes on 2 cores. Run it on a machine that is otherwise
idle: anything else running counts against the quiet runs.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

from record import append_row

from dlscale.engine.results import disturbed
from dlscale.engine.results.stats import spread

REPO = Path(__file__).resolve().parents[1]
DLSCALE = str(Path(sys.executable).with_name("dlscale"))
KINDS = ("cpu", "io", "memory")
DISTURBED = 0.5  # the odds that a run has something beside it
RERUN_DISTURBED = 0.2  # and a rerun (disturbed = "rerun")

SPEC = """
[experiment]
name = "quiet"
frameworks = ["pytorch-ddp"]
models = ["resnet20"]
datasets = ["synthetic-cifar"]
scales = ["1x1"]
per_device_batch = [64]
precisions = ["fp32"]
repetitions = {runs}
disturbed = "rerun"
disturbed_reruns = 1

[training]
steps = {steps}
warmup_steps = 3
threads_per_rank = 2
breakdown_pairs = 0
"""

HOGS = {
    "cpu": "while True: pass",
    "memory": textwrap.dedent(
        """
        b = bytearray(256 << 20)
        while True:
            c = bytes(b)
        """
    ),
    "io": textwrap.dedent(
        """
        import os, sys
        block = os.urandom(4 << 20)
        with open(sys.argv[1], "wb") as f:
            while True:
                for _ in range(64):
                    f.write(block)
                    f.flush()
                    os.fsync(f.fileno())
                f.seek(0)
        """
    ),
}


def start_hog(kind: str, where: Path, cpus: list[int]) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOGS[kind], str(where / "hog.bin")],
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    if kind != "io":  # the writer mostly waits for the disk: where it runs matters little
        os.sched_setaffinity(proc.pid, {random.choice(cpus)})
    return proc


def stop(proc: subprocess.Popen | None) -> None:
    if proc is not None and proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def running_run(home: Path) -> tuple[str, str | None] | None:
    """The store's running run (its id, and the run it reruns), read directly: a light
    read whose cost counts against the quiet runs like any other work."""
    try:
        db = sqlite3.connect(f"file:{home / 'dlscale.db'}?mode=ro", uri=True, timeout=5)
        row = db.execute("SELECT run_id, rerun_of FROM runs WHERE state = 'RUNNING'").fetchone()
        db.close()
    except sqlite3.Error:
        return None
    return (row[0], row[1]) if row else None


def watch(home: Path, drawn: dict[str, str], done: threading.Event, where: Path) -> None:
    """As each run starts, draw what runs beside it; stop it when the run leaves RUNNING.
    Looks twice a second."""
    cpus = sorted(os.sched_getaffinity(0))
    turn = 0
    current: tuple[str, subprocess.Popen | None] | None = None
    while not done.is_set():
        row = running_run(home)
        running = row[0] if row else None
        if current and current[0] != running:
            stop(current[1])
            current = None
        if running and current is None and running not in drawn:
            # a rerun comes later, when a burst may have passed: drawn disturbed less often
            odds = RERUN_DISTURBED if row and row[1] else DISTURBED
            kind = "quiet" if random.random() >= odds else KINDS[turn % len(KINDS)]
            turn += kind != "quiet"
            drawn[running] = kind
            current = (running, None if kind == "quiet" else start_hog(kind, where, cpus))
        time.sleep(0.5)
    if current:
        stop(current[1])


def quantiles(values: list[float]) -> dict[str, float] | None:
    if not values:
        return None
    v = sorted(values)
    at = lambda q: v[min(len(v) - 1, int(q * len(v)))]  # noqa: E731
    return {"min": v[0], "p50": at(0.5), "p95": at(0.95), "max": v[-1], "n": len(v)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=60)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--seed", type=int, default=None)
    a = ap.parse_args()
    seed = a.seed if a.seed is not None else random.randrange(1 << 30)
    random.seed(seed)
    from dlscale.trainers.common import interference

    interference.read()
    t0 = time.perf_counter()
    for _ in range(50):
        interference.read()
    read_ms = (time.perf_counter() - t0) / 50 * 1e3
    with tempfile.TemporaryDirectory(prefix="dlscale-interference-", dir=REPO / ".dlscale") as t:
        tmp = Path(t)
        home = tmp / "home"
        spec = tmp / "quiet.toml"
        spec.write_text(SPEC.format(runs=a.runs, steps=a.steps))
        drawn: dict[str, str] = {}
        done = threading.Event()
        watcher = threading.Thread(target=watch, args=(home, drawn, done, tmp), daemon=True)
        env = {**os.environ, "DLSCALE_HOME": str(home)}
        started = time.monotonic()
        watcher.start()
        proc = subprocess.run(
            [DLSCALE, "run", str(spec), "--wait"],
            env=env,
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
        )
        done.set()
        watcher.join()
        minutes = (time.monotonic() - started) / 60
        if proc.returncode:
            sys.exit(f"the study failed: {proc.stderr[-2000:]}")
        from dlscale.engine.results.analysis import results
        from dlscale.engine.tracking.store import Store

        store = Store(home)
        records = store.records.last("interference")
        summaries = store.records.last("summary")
        (row,) = results(store)  # the point as `dlscale results` gives it: reruns stand in
        rerun_of = {r["run_id"]: r["rerun_of"] for r in store.runs()}
    runs = []
    for run_id, kind in drawn.items():
        rec, summary = records.get(run_id), summaries.get(run_id)
        if rec is None or summary is None:
            continue
        said = disturbed.reasons(rec)
        runs.append(
            {
                "run_id": run_id,
                "rerun": bool(rerun_of.get(run_id)),
                "kind": kind,
                "flagged": bool(said),
                "throughput": summary["throughput"],
                "step_s": summary["elapsed_s"] / max(1, summary["timed_steps"]),
                **{name: rec.get(name) for name in disturbed.SHARES},
            }
        )
    rates: dict[str, dict[str, int]] = {}
    for kind in ("quiet", *KINDS):
        of = [r for r in runs if r["kind"] == kind]
        rates[kind] = {"flagged": sum(r["flagged"] for r in of), "runs": len(of)}
    signals = {
        name: {
            kind: quantiles([r[name] for r in runs if r["kind"] == kind and r[name] is not None])
            for kind in ("quiet", *KINDS)
        }
        for name in disturbed.SHARES
    }
    throughput = {
        kind: statistics.fmean([r["throughput"] for r in runs if r["kind"] == kind] or [0.0])
        for kind in ("quiet", *KINDS)
    }
    # the same study's first attempts, each counted (flag), or the flagged left out
    # (leave-out); and the point with reruns standing in for disturbed runs (rerun)
    firsts = [r for r in runs if not r["rerun"]]
    every = spread([r["throughput"] for r in firsts])
    kept = spread([r["throughput"] for r in firsts if not r["flagged"]])
    ratio = kept.ci95 / every.ci95 if kept.ci95 and every.ci95 else None
    rerun_ci95 = row["throughput_ci95"]
    rerun_ratio = rerun_ci95 / every.ci95 if rerun_ci95 and every.ci95 else None
    reruns = len(row["disturbed_rerun"])
    thresholds = {
        "others_cpu": disturbed.OTHERS_CPU,
        "queue_wait": disturbed.QUEUE_WAIT,
        "steal": disturbed.STEAL,
        "io_stall": disturbed.IO_STALL,
        "memory_stall": disturbed.MEMORY_STALL,
    }
    print(f"{len(runs)} runs in {minutes:.1f} min, seed {seed}; thresholds {thresholds}")
    for kind, r in rates.items():
        share = r["flagged"] / r["runs"] if r["runs"] else float("nan")
        print(
            f"  {kind:>7}: {r['flagged']:>3} of {r['runs']:>3} flagged ({100 * share:.0f}%), "
            f"mean {throughput[kind]:.1f} images/s"
        )
    for name, by_kind in signals.items():
        cells = "  ".join(
            f"{kind} p50 {q['p50']:.3f} [{q['min']:.3f}, {q['max']:.3f}]"
            for kind, q in by_kind.items()
            if q
        )
        if cells:
            print(f"  {name}: {cells}")
    step_ms = 1e3 * statistics.median(r["step_s"] for r in runs)
    print(
        f"  sampler: {read_ms:.2f} ms a reading, two a timed segment, outside the timed steps; "
        f"{100 * read_ms / step_ms:.1f}% of the median step ({step_ms:.0f} ms)"
    )
    print(
        f"  CI95 half-width: every first run {every.ci95}, flagged left out {kept.ci95}"
        + (f" (ratio {ratio:.2f})" if ratio else "")
        + f"; reruns standing in ({reruns} rerun, n {row['n']}) {rerun_ci95}"
        + (f" (ratio {rerun_ratio:.2f})" if rerun_ratio else "")
    )
    append_row(
        "interference",
        {
            "runs": len(runs),
            "steps": a.steps,
            "seed": seed,
            "minutes": round(minutes, 1),
            "thresholds": thresholds,
            "rates": rates,
            "signals": signals,
            "throughput_mean": throughput,
            "ci95_every": every.ci95,
            "ci95_flagged_left_out": kept.ci95,
            "ci95_ratio": ratio,
            "ci95_reruns_standing_in": rerun_ci95,
            "ci95_rerun_ratio": rerun_ratio,
            "reruns_standing_in": reruns,
            "odds": {"first": DISTURBED, "rerun": RERUN_DISTURBED},
            "read_ms": round(read_ms, 3),
            "median_step_ms": round(step_ms, 2),
            "runs_detail": runs,
        },
    )
    json.dump(rates, sys.stdout)
    print()


if __name__ == "__main__":
    main()
