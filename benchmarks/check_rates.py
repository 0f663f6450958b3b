"""How often does `dlscale check` cry wolf, and how often does it catch a real slowdown
(issue 27, item 4)?

On real CPU runs of a small study (ResNet-20, synthetic CIFAR, 1 rank, REPETITIONS repetitions
of STEPS timed steps): the study is run once and exported as the baseline bundle; then it is
run again RERUNS times unchanged, each in a fresh store, through `dlscale check --run`, and
RERUNS times with the trainer's test-only slowdown (DLSCALE_TEST_SLOWDOWN, throughput lower by
that fraction). Printed and appended to results.jsonl: the false-alarm rate (unchanged reruns
that exit 1), the detection rate (slowed reruns that exit 1), how many of each were not judged
(and so exit 0 with a reason), the CVs seen, and the repetitions `check` says a point needs at
that CV (a projection from the measured CV, marked as one).

    .venv/bin/python benchmarks/check_rates.py [--reruns 20] [--repetitions 3] [--steps 8]

CPU heavy: every rerun is REPETITIONS real trainer runs (10 to 20 s each on 2 busy cores).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

DLSCALE = str(Path(sys.executable).with_name("dlscale"))
SPEC = """[experiment]
name = "rates"
frameworks = ["pytorch-ddp"]
models = ["resnet20"]
datasets = ["synthetic-cifar"]
scales = ["1x1"]
per_device_batch = [16]
precisions = ["fp32"]
repetitions = {repetitions}

[training]
steps = {steps}
warmup_steps = 2
log_every = {steps}
threads_per_rank = 1
"""


def dlscale(home: Path, *args: str, slowdown: float = 0.0) -> subprocess.CompletedProcess:
    env = {**os.environ, "DLSCALE_HOME": str(home)}
    env.pop("DLSCALE_TEST_SLOWDOWN", None)
    if slowdown:
        env["DLSCALE_TEST_SLOWDOWN"] = str(slowdown)
    return subprocess.run(
        [DLSCALE, *args], env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL
    )


def one_check(tmp: Path, name: str, spec: Path, bundle: Path, args: list[str], slowdown: float):
    junit = tmp / f"{name}.xml"
    proc = dlscale(
        tmp / name,
        "check",
        str(spec),
        "--baseline",
        str(bundle),
        "--run",
        "--junit",
        str(junit),
        *args,
        slowdown=slowdown,
    )
    if proc.returncode not in (0, 1) or not junit.is_file():
        sys.exit(f"check failed to run ({proc.returncode}): {proc.stderr[-2000:]}")
    suite = ET.parse(junit).getroot().find("testsuite")
    skipped = int(suite.get("skipped"))
    results = json.loads(dlscale(tmp / name, "results", "--format", "json").stdout or "[]")
    cv = next((r["throughput_cv"] for r in results if r["throughput_cv"] is not None), None)
    return proc.returncode, skipped, cv, proc.stdout


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reruns", type=int, default=20)
    ap.add_argument("--repetitions", type=int, default=3)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--tolerance", default="5%")
    ap.add_argument("--slowdown", type=float, default=0.10)
    ap.add_argument("--max-cv", default="5%")
    ap.add_argument("--no-save", action="store_true", help="print only")
    a = ap.parse_args()
    start = time.time()
    with tempfile.TemporaryDirectory(prefix="dlscale-check-rates-") as t:
        tmp = Path(t)
        spec = tmp / "rates.toml"
        spec.write_text(SPEC.format(repetitions=a.repetitions, steps=a.steps))
        base = dlscale(tmp / "baseline", "run", str(spec), "--wait")
        bundle = tmp / "baseline.tar.gz"
        done = dlscale(tmp / "baseline", "export", "bundle", "--out", str(bundle), "--site", "b")
        if base.returncode or done.returncode:
            sys.exit(f"baseline failed: {base.stderr[-2000:]} {done.stderr[-2000:]}")
        args = ["--tolerance", a.tolerance, "--max-cv", a.max_cv]
        outcomes: dict[str, list[tuple[int, int, float | None]]] = {"same": [], "slow": []}
        needed: list[str] = []
        for i in range(a.reruns):
            for kind, slowdown in (("same", 0.0), ("slow", a.slowdown)):
                code, skipped, cv, text = one_check(tmp, f"{kind}{i}", spec, bundle, args, slowdown)
                outcomes[kind].append((code, skipped, cv))
                needed += [line for line in text.splitlines() if "it needs" in line]
                print(
                    f"rerun {i + 1} {kind}: exit {code}, not judged {skipped}, CV {cv}", flush=True
                )
    same, slow = outcomes["same"], outcomes["slow"]
    cvs = [cv for _, _, cv in same + slow if cv is not None]
    cv_median = statistics.median(cvs) if cvs else None
    from dlscale.engine.results.check import repetitions_needed

    tolerance = float(a.tolerance.rstrip("%")) / (100 if a.tolerance.endswith("%") else 1)
    row = {
        "benchmark": "check_rates",
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "machine": f"{os.cpu_count()} cpus",
        "load_average": os.getloadavg()[0],
        "reruns": a.reruns,
        "repetitions": a.repetitions,
        "steps": a.steps,
        "tolerance": a.tolerance,
        "max_cv": a.max_cv,
        "slowdown": a.slowdown,
        "false_alarms": sum(c == 1 for c, _, _ in same),
        "false_alarm_rate": sum(c == 1 for c, _, _ in same) / len(same),
        "unchanged_not_judged": sum(s > 0 for _, s, _ in same),
        "detected": sum(c == 1 for c, _, _ in slow),
        "detection_rate": sum(c == 1 for c, _, _ in slow) / len(slow),
        "slowed_not_judged": sum(s > 0 for _, s, _ in slow),
        "cv_median": cv_median,
        "cv_max": max(cvs) if cvs else None,
        # projected from the median CV: the repetitions whose CI95 is within the tolerance
        "repetitions_needed_projected": (
            repetitions_needed(cv_median, tolerance) if cv_median else None
        ),
        "wall_s": round(time.time() - start, 1),
    }
    print(
        f"false alarms: {row['false_alarms']}/{a.reruns} unchanged reruns "
        f"({100 * row['false_alarm_rate']:.0f}%), {row['unchanged_not_judged']} not judged; "
        f"detected: {row['detected']}/{a.reruns} reruns slowed by {100 * a.slowdown:.0f}% "
        f"({100 * row['detection_rate']:.0f}%), {row['slowed_not_judged']} not judged; "
        f"median CV {cv_median}; repetitions needed at that CV (projected): "
        f"{row['repetitions_needed_projected']}"
    )
    for line in sorted(set(needed))[:5]:
        print("  check said:", line.strip())
    if not a.no_save:
        with open(Path(__file__).with_name("results.jsonl"), "a") as fh:
            fh.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
