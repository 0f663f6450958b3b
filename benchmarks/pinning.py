"""Does pinning a run to the quietest CPUs make its repetitions agree better (issue 50)?

Real CPU runs on the local backend, one rank of one thread (ResNet-20, synthetic CIFAR), so
the run wants one of this machine's CPUs. Two experiments of the same point, submitted in
turns (unpinned, pinned, unpinned, ...) so the machine's drift falls on both alike: one with
`cpus = "all"` (the default: the kernel places the run), one with `cpus = "quiet"` (the
local worker looks at the CPUs for half a second and pins the run to the quietest). As each
run starts, a busy loop starts beside it, unseen by dlscale, pinned to a CPU drawn at random
(a neighbour that stays on one core, as a login node's daemons or another user's job do),
and stops when the run ends.

Printed and appended to results.jsonl: each experiment's throughputs, mean, CV and 95%
interval, and the ratio of the CVs and of the half-widths (pinned over unpinned): below 1,
pinning narrowed the spread.

    .venv/bin/python benchmarks/pinning.py [--runs 12] [--steps 20] [--seed N]

CPU heavy: 2 x 12 runs take about 8 minutes on 2 cores. Run it on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from interference import running_run, start_hog, stop
from record import append_row

from dlscale.engine.results.stats import spread

REPO = Path(__file__).resolve().parents[1]
DLSCALE = str(Path(sys.executable).with_name("dlscale"))

SPEC = """
[experiment]
name = "{name}"
frameworks = ["pytorch-ddp"]
models = ["resnet20"]
datasets = ["synthetic-cifar"]
scales = ["1x1"]
per_device_batch = [64]
precisions = ["fp32"]
repetitions = {runs}
cpus = "{cpus}"

[training]
steps = {steps}
warmup_steps = 3
threads_per_rank = 1
breakdown_pairs = 0
"""


def neighbour(home: Path, done: threading.Event, drawn: dict[str, int], where: Path) -> None:
    """As each run starts, a busy loop pinned to a CPU drawn at random; stopped as it ends."""
    cpus = sorted(os.sched_getaffinity(0))
    current: tuple[str, subprocess.Popen | None] | None = None
    while not done.is_set():
        row = running_run(home)
        running = row[0] if row else None
        if current and current[0] != running:
            stop(current[1])
            current = None
        if running and current is None and running not in drawn:
            drawn[running] = cpu = random.choice(cpus)
            current = (running, start_hog("cpu", where, [cpu]))
        time.sleep(0.2)
    if current:
        stop(current[1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=12)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--seed", type=int, default=None)
    a = ap.parse_args()
    seed = a.seed if a.seed is not None else random.randrange(1 << 30)
    random.seed(seed)
    with tempfile.TemporaryDirectory(prefix="dlscale-pinning-", dir=REPO / ".dlscale") as t:
        tmp = Path(t)
        home = tmp / "home"
        env = {**os.environ, "DLSCALE_HOME": str(home)}
        drawn: dict[str, int] = {}
        done = threading.Event()
        watcher = threading.Thread(target=neighbour, args=(home, done, drawn, tmp), daemon=True)
        started = time.monotonic()
        watcher.start()
        specs = {name: tmp / f"{name}.toml" for name in ("unpinned", "pinned")}
        for i in range(1, a.runs + 1):  # in turns: the worker runs them in submission order
            for name, spec in specs.items():
                cpus = "quiet" if name == "pinned" else "all"
                spec.write_text(SPEC.format(name=name, runs=i, steps=a.steps, cpus=cpus))
                proc = subprocess.run(
                    [DLSCALE, "run", str(spec), "--no-wait"],
                    env=env,
                    capture_output=True,
                    text=True,
                    stdin=subprocess.DEVNULL,
                )
                if proc.returncode:
                    sys.exit(f"{name}: {proc.stderr[-2000:]}")
        subprocess.run(
            [DLSCALE, "run", str(specs["pinned"]), "--wait"],
            env=env,
            capture_output=True,
            stdin=subprocess.DEVNULL,
        )
        done.set()
        watcher.join()
        minutes = (time.monotonic() - started) / 60
        from dlscale.engine.tracking.store import Store

        store = Store(home)
        summaries = store.records.last("summary")
        loads = store.records.last("interference")
        out = {}
        for name in specs:
            ids = [r["run_id"] for r in store.runs(name) if r["state"] == "COMPLETED"]
            values = [summaries[i]["throughput"] for i in ids if i in summaries]
            on = [loads[i]["cpus"] for i in ids if i in loads]
            hit = sum(len(c) == 1 and c[0] == drawn.get(i) for i, c in zip(ids, on))
            s = spread(values)
            out[name] = {
                "runs": len(values),
                "throughputs": [round(v, 1) for v in values],
                "mean": s.mean,
                "cv": s.cv,
                "ci95": s.ci95,
                "on_the_neighbour_s_cpu": hit if name == "pinned" else None,
            }
            print(
                f"{name:>9}: {len(values)} runs, mean {s.mean:.1f} images/s, CV "
                f"{100 * (s.cv or 0):.1f}%, CI95 ±{s.ci95 or 0:.1f}; "
                f"{', '.join(f'{v:.0f}' for v in values)}"
            )
    cv_ratio = out["pinned"]["cv"] / out["unpinned"]["cv"] if out["unpinned"]["cv"] else None
    ci_ratio = out["pinned"]["ci95"] / out["unpinned"]["ci95"] if out["unpinned"]["ci95"] else None
    print(
        f"{minutes:.1f} min, seed {seed}; pinned over unpinned: CV ratio "
        f"{cv_ratio:.2f}, CI95 ratio {ci_ratio:.2f}; pinned runs on the neighbour's CPU: "
        f"{out['pinned']['on_the_neighbour_s_cpu']}"
    )
    append_row(
        "pinning",
        {
            "runs_each": a.runs,
            "steps": a.steps,
            "seed": seed,
            "minutes": round(minutes, 1),
            "experiments": out,
            "cv_ratio": cv_ratio,
            "ci95_ratio": ci_ratio,
        },
    )


if __name__ == "__main__":
    main()
