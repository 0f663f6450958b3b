"""How long do the everyday commands take to start and answer (issue 16, item 1)?

Times, as fresh processes in alternating rounds: `python -c pass` (the interpreter alone, the
floor), `dlscale --help` (target under 0.3 s) and `dlscale status` on a store of 1,000 runs
(target under 0.5 s). The store is made by the engine's own API, as a submission makes it
(add_runs, claims.take_many, jobs.add_many), its jobs recorded as completed so that `status` asks no
scheduler: what is timed is starting, reading the store and printing 1,000 rows.

    .venv/bin/python benchmarks/cli_startup.py [--rounds 7]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from record import append_row

DLSCALE = str(Path(sys.executable).with_name("dlscale"))
RUNS = 1000
SPEC = """[experiment]
name = "startup"
frameworks = ["pytorch-ddp"]
models = ["resnet20", "resnet32", "resnet44", "resnet56", "resnet110"]
datasets = ["synthetic-cifar"]
scales = ["1x1", "1x2"]
per_device_batch = [16, 32, 64, 128]
precisions = ["fp32"]
repetitions = 25

[training]
steps = 30
warmup_steps = 5
"""


def build(home: Path, spec: Path) -> int:
    from dlscale.engine.config.spec import load_spec
    from dlscale.engine.launching.plan import plan
    from dlscale.engine.tracking.store import Store

    runs = plan(load_spec(str(spec))).runs
    store = Store(home)
    store.add_runs(runs)
    claimed = store.claims.take_many([r.run_id for r in runs])
    store.jobs.add_many(
        "local", [(f"local-{i + 1}", rid, "COMPLETED", {}) for i, rid in enumerate(claimed)]
    )
    store.close()
    return len(runs)


def timed(argv: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    done = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    took = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {done.returncode}: {done.stderr[-500:]!r}")
    return took


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=7)
    rounds = ap.parse_args().rounds
    with tempfile.TemporaryDirectory(prefix="dlscale-startup-") as tmp:
        home, spec = Path(tmp) / "home", Path(tmp) / "startup.toml"
        spec.write_text(SPEC)
        n = build(home, spec)
        assert n == RUNS, n
        env = {**os.environ, "DLSCALE_HOME": str(home), "COLUMNS": "160"}
        commands = {
            "python -c pass": [sys.executable, "-c", "pass"],
            "dlscale --help": [DLSCALE, "--help"],
            f"dlscale status ({RUNS} runs)": [DLSCALE, "status"],
        }
        took: dict[str, list[float]] = {k: [] for k in commands}
        for _ in range(rounds):  # alternating, so a busy moment of the machine hits all
            for name, argv in commands.items():
                took[name].append(timed(argv, env))
    med = {k: statistics.median(v) for k, v in took.items()}
    base = med["python -c pass"]
    targets = {"dlscale --help": 0.3, f"dlscale status ({RUNS} runs)": 0.5}
    print(f"{'command':<28} {'median s':>9} {'min s':>7} {'x python':>9} {'target s':>9}")
    for name in commands:
        print(
            f"{name:<28} {med[name]:>9.3f} {min(took[name]):>7.3f} "
            f"{med[name] / base:>9.1f} {targets.get(name, float('nan')):>9.1f}"
        )
    print(f"load average while measuring: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cpus")
    append_row(
        "cli_startup",
        {
            "rounds": rounds,
            "runs": RUNS,
            "median_s": {k: round(v, 3) for k, v in med.items()},
            "ratio_to_python": {k: round(v / base, 1) for k, v in med.items()},
        },
    )


if __name__ == "__main__":
    main()
