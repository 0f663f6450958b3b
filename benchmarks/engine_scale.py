"""Does the engine keep up with a real study's size (issue 16, item 2)? A 10,000-run spec:

- plan it and render every run's Slurm job script (in memory, with the test cluster's
  profile): target under 2 s;
- `dlscale run SPEC --backend local` storing all 10,000 (runs, claims, jobs, run folders):
  target under 5 s;
- `dlscale status` and `dlscale results` with those 10,000 runs in the store: under 1 s each,
  queued, and again once every run has finished with its records (env, intervals, summary)
  ingested, as after a real study.

No trainer starts: while `dlscale run` submits, this script holds the local worker's lock
(local-worker.lock, what a live worker holds), so the backend takes the queue to be in a
worker's hands and starts none; the 10,000 jobs stay queued, as on a busy machine whose worker
is still on its first run. `status` then asks that "worker" nothing either (its lock is held).
Each command is timed as a fresh process, as a user runs it, against `python -c pass` in the
same rounds; status and results alternate over ROUNDS rounds and their medians are printed.

    .venv/bin/python benchmarks/engine_scale.py [--runs 10000]
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from record import append_row

ROOT = Path(__file__).resolve().parents[1]
DLSCALE = str(Path(sys.executable).with_name("dlscale"))
PROFILE = ROOT / "examples" / "clusters" / "test-cluster.toml"
ROUNDS = 3
MODELS = ["resnet20", "resnet32", "resnet44", "resnet56", "resnet110"]


def spec_text(runs: int) -> str:
    """5 models x 2 scales x 10 batches x runs/100 repetitions (runs: a multiple of 100,
    at most 10,000: repetitions stop at 100)."""
    batches, reps = [8, 16, 24, 32, 40, 48, 56, 64, 72, 80], max(1, runs // 100)
    return f"""[experiment]
name = "scale"
frameworks = ["pytorch-ddp"]
models = {json.dumps(MODELS)}
datasets = ["synthetic-cifar"]
scales = ["1x1", "1x2"]
per_device_batch = {json.dumps(batches)}
precisions = ["fp32"]
repetitions = {reps}

[training]
steps = 30
warmup_steps = 5
threads_per_rank = 1
"""


def timed(argv: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, text=True)
    took = time.perf_counter() - t0
    if done.returncode not in (0,):
        raise SystemExit(f"{' '.join(argv)} exited {done.returncode}:\n{done.stderr[-2000:]}")
    return took


def plan_and_render(spec: Path, home: Path) -> tuple[int, float, float]:
    """In this process (a fresh interpreter's imports excluded): planning alone, then
    planning and rendering every job script."""
    from dlscale.engine.config.profile import load_profile
    from dlscale.engine.config.spec import load_spec
    from dlscale.engine.launching import jobscript
    from dlscale.engine.launching.plan import plan

    profile = load_profile(str(PROFILE))
    jobscript.render(plan(load_spec(str(spec))).runs[0], profile, home / "warm", str(spec))
    t0 = time.perf_counter()
    runs = plan(load_spec(str(spec))).runs
    t1 = time.perf_counter()
    for run in runs:
        jobscript.render(run, profile, home / "runs" / run.run_id, str(spec), home=home)
    t2 = time.perf_counter()
    return len(runs), t1 - t0, t2 - t0


def complete_all(home: Path) -> float:
    """Every stored run finished, as its trainer would leave it: a metrics file (the env,
    interval and summary records of a real CPU run, tests/fixtures/tui-quickstart) ingested,
    its job and run COMPLETED. So `results` reads 10,000 runs' records and env records, as
    after a real study. Not timed as a command; returns how long it took."""
    from dlscale.engine.tracking.store import Store

    template = sorted((ROOT / "tests" / "fixtures" / "tui-quickstart" / "runs").iterdir())[0]
    lines = [
        line
        for line in (template / "metrics.jsonl").read_text().splitlines(keepends=True)
        if json.loads(line)["kind"] != "params"  # a run's params name its own point
    ]
    t0 = time.perf_counter()
    store = Store(home)
    for row in store.runs():
        run_dir = Path(row["run_dir"])
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "metrics.jsonl").write_text("".join(lines))
        store.records.ingest(row["run_id"], run_dir / "metrics.jsonl")
        store.jobs.update(row["backend"], row["job_id"], state="COMPLETED", exit_code=0)
        store.update_run(row["run_id"], state="COMPLETED")
    store.close()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=10_000)
    runs = ap.parse_args().runs
    with tempfile.TemporaryDirectory(prefix="dlscale-scale-") as tmp:
        home = Path(tmp) / "home"
        home.mkdir()
        spec = Path(tmp) / "scale.toml"
        spec.write_text(spec_text(runs))
        env = {**os.environ, "DLSCALE_HOME": str(home), "COLUMNS": "160"}

        n, plan_s, render_s = plan_and_render(spec, home)
        print(
            f"{n} runs: plan {plan_s:.2f} s; plan + render every job script {render_s:.2f} s "
            f"(target < 2 s)"
        )

        with open(home / "local-worker.lock", "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # a "worker" is alive: none is started
            run_s = timed([DLSCALE, "run", str(spec), "--backend", "local"], env)
            queued = subprocess.run(
                [
                    sys.executable,
                    "-c",
                    (
                        "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); print(c.execute("
                        "\"SELECT count(*) FROM jobs WHERE state='PENDING'\").fetchone()[0])"
                    ),
                    str(home / "dlscale.db"),
                ],
                capture_output=True,
                text=True,
            ).stdout.strip()
            print(
                f"dlscale run (local backend): {run_s:.2f} s, {queued} jobs queued (target < 5 s)"
            )
            took: dict[str, list[float]] = {"python -c pass": [], "status": [], "results": []}
            for _ in range(ROUNDS):
                took["python -c pass"].append(timed([sys.executable, "-c", "pass"], env))
                took["status"].append(timed([DLSCALE, "status"], env))
                took["results"].append(timed([DLSCALE, "results"], env))
            # The same with every run finished and its records in the store.
            fill_s = complete_all(home)
            done: dict[str, list[float]] = {"status": [], "results": []}
            for _ in range(ROUNDS):
                done["status"].append(timed([DLSCALE, "status"], env))
                done["results"].append(timed([DLSCALE, "results"], env))
        med = {k: statistics.median(v) for k, v in took.items()}
        med_done = {k: statistics.median(v) for k, v in done.items()}
        base = med["python -c pass"]
        for k in ("status", "results"):
            print(
                f"dlscale {k} with {n} runs stored (queued): median {med[k]:.2f} s over "
                f"{ROUNDS} (x{med[k] / base:.1f} python -c pass at {base:.3f} s; target < 1 s)"
            )
        for k in ("status", "results"):
            print(
                f"dlscale {k} with {n} runs completed, their records stored: median "
                f"{med_done[k]:.2f} s over {ROUNDS} (target < 1 s)"
            )
        print(f"(finishing the {n} runs' records, not a command: {fill_s:.1f} s)")
    append_row(
        "engine_scale",
        {
            "runs": n,
            "rounds": ROUNDS,
            "plan_s": round(plan_s, 3),
            "plan_render_s": round(render_s, 3),
            "run_local_s": round(run_s, 3),
            "python_pass_s": round(base, 3),
            "status_s": round(med["status"], 3),
            "results_s": round(med["results"], 3),
            "status_rounds_s": [round(x, 3) for x in took["status"]],
            "results_rounds_s": [round(x, 3) for x in took["results"]],
            "status_completed_s": round(med_done["status"], 3),
            "results_completed_s": round(med_done["results"], 3),
        },
    )


if __name__ == "__main__":
    main()
