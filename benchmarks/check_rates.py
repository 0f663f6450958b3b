"""How often does `dlscale check` cry wolf, how often does it catch a real slowdown, and how
long does a check take, on this machine with a competing process loading it as a CI
runner's neighbours would (issue 35)?

Real CPU runs of a small study (ResNet-20, synthetic CIFAR, 1 rank, STEPS timed steps, no
step-time breakdown after them: training.breakdown_pairs = 0).
Every check gets a fresh store: the baseline experiment is run there (one repetition),
then `dlscale check STUDY --baseline base --run --interleave` repeats the baseline's run
between the study's (ABBA), a round at a time, until the rule decides or --max-repetitions
pairs are spent. The kinds of check, taken in turn so the machine's load hits them alike:
- unchanged: the study is the baseline's configuration;
- knob: the study's runs slowed by the test-only DLSCALE_TEST_SLOWDOWN (10%);
- threads: a change a site meets: the baseline at 2 threads a rank, the study at 1 (its
  true effect on this machine is whatever it is: measured here as the pairs' mean ratio);
- workers: another: the study's batches made by a loader process (training.loader_workers
  = 1), the baseline's in the rank (0); its effect, too, is measured, not assumed;
- threads-up: the threads change the other way: the baseline at 1 thread a rank, the
  study at 2 (a site raising the thread count on a node it shares); measured likewise;
- isa: a library setting: oneDNN, which runs the convolutions, capped at AVX2
  (ONEDNN_MAX_CPU_ISA=AVX2, as a software stack built for older nodes or a site's
  reproducibility module sets it) on this AVX-512 machine. Both sides run dlscale's
  PyTorch trainer as a declared framework (docs/custom.md), the study's command prefixed
  with `env ONEDNN_MAX_CPU_ISA=AVX2`, so the setting reaches its runs alone; its effect
  is measured, not assumed;
- primcache: another library setting, the same way: oneDNN's primitive cache turned off
  (ONEDNN_PRIMITIVE_CACHE_CAPACITY=0, as a site short of memory might set it), so each
  convolution's kernel is made again at every call; measured likewise.
Printed and appended to results.jsonl: per kind, the checks that exited 1 (regressed), 0
(passed) and 3 (undecided), so the false-alarm rate (unchanged checks that regressed) and
the detection rate (slowed checks that regressed); the median time a check took; the load
average seen (sampled after each check) with the competing process named; the spread of
one pair's log ratio; and, marked projected, the rates a larger budget would give, from a
bootstrap of the measured unchanged pairs (shifted by the knob's 10%) through the same rule.

    .venv/bin/python benchmarks/check_rates.py [--minutes 40] [--max-repetitions 6]
        [--max-minutes 9] [--steps 8]
        [--kinds unchanged,knob,threads,workers,threads-up,isa,primcache]

CPU heavy, and long: each run is 10 to 50 s on 2 busy cores; --minutes stops starting new
checks after that long. Run it niced; it starts its competing process (a busy loop) at the
same niceness and stops it at the end.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from record import append_row

from dlscale.engine.results.regression import decide

DLSCALE = str(Path(sys.executable).with_name("dlscale"))
SPEC = """[experiment]
name = "{name}"
frameworks = ["{framework}"]
models = ["resnet20"]
datasets = ["synthetic-cifar"]
scales = ["1x1"]
per_device_batch = [16]
precisions = ["fp32"]
repetitions = 1

[training]
steps = {steps}
warmup_steps = 2
log_every = {steps}
threads_per_rank = {threads}
loader_workers = {workers}
breakdown_pairs = 0
"""
# The library-setting kinds' framework: the same trainer the others run, declared with its
# command so an environment setting can ride on one side's runs ({{x}}: dlscale's {x}).
DECLARED = """
[frameworks.site-resnet]
command = [{prefix}"{{python}}", "-m", "dlscale.trainers.torch_ddp", "--model", "{{model}}",
    "--dataset", "{{dataset}}", "--per-device-batch", "{{per_device_batch}}",
    "--precision", "{{precision}}", "--device", "{{device}}", "--threads", "{{threads}}",
    "--steps", "{{steps}}", "--warmup-steps", "{{warmup_steps}}", "--log-every", "{{steps}}",
    "--breakdown-pairs", "0", "--run-id", "{{run_id}}", "--output", "{{metrics}}"]
launcher = "torchrun"
unit = "images"
"""
# the variable each library-setting kind sets, through `env`, on the study's runs alone
SETTING = {"isa": "ONEDNN_MAX_CPU_ISA=AVX2", "primcache": "ONEDNN_PRIMITIVE_CACHE_CAPACITY=0"}
KINDS = ("unchanged", "knob", "threads", "workers", "threads-up", "isa", "primcache")
EXIT = {0: "passed", 1: "regressed", 3: "undecided"}


def dlscale(home: Path, *args: str, slowdown: float = 0.0) -> subprocess.CompletedProcess:
    env = {**os.environ, "DLSCALE_HOME": str(home)}
    env.pop("DLSCALE_TEST_SLOWDOWN", None)
    if slowdown:
        env["DLSCALE_TEST_SLOWDOWN"] = str(slowdown)
    return subprocess.run(
        [DLSCALE, *args], env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL
    )


def pairs_of(home: Path) -> list[tuple[float, float]]:
    """The check's pairs (study, baseline repeat) in the order they ran: each run's value
    is the check's own (its throughput)."""
    runs = []
    for folder in (home / "runs").iterdir():
        meta = json.loads((folder / "run.json").read_text())
        recs = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
        summary = next((r for r in recs if r.get("kind") == "summary"), None)
        if summary is None or not (meta["experiment"] == "study" or meta.get("rerun_of")):
            continue
        value = summary["throughput"]
        runs.append((meta["created"], meta["experiment"], value))
    runs.sort()
    study = [v for _, e, v in runs if e == "study"]
    base = [v for _, e, v in runs if e == "base"]
    return list(zip(study, base))


def one_check(tmp: Path, i: int, kind: str, a: argparse.Namespace) -> dict:
    home = tmp / f"{kind}{i}"
    base_threads = 2 if kind == "threads" else 1
    study_threads = 2 if kind == "threads-up" else 1
    workers = 1 if kind == "workers" else 0
    framework, base_tail, study_tail = "pytorch-ddp", "", ""
    if kind in SETTING:
        framework = "site-resnet"
        base_tail = DECLARED.format(prefix="")
        study_tail = DECLARED.format(prefix=f'"env", "{SETTING[kind]}", ')
    common = {"steps": a.steps, "framework": framework}
    (tmp / "base.toml").write_text(
        SPEC.format(name="base", threads=base_threads, workers=0, **common) + base_tail
    )
    (tmp / "study.toml").write_text(
        SPEC.format(name="study", threads=study_threads, workers=workers, **common) + study_tail
    )
    start = time.monotonic()
    made = dlscale(home, "run", str(tmp / "base.toml"), "--wait")
    if made.returncode:
        sys.exit(f"the baseline failed: {made.stderr[-2000:]}")
    proc = dlscale(
        home,
        "check",
        str(tmp / "study.toml"),
        "--baseline",
        "base",
        "--run",
        "--interleave",
        "--max-repetitions",
        str(a.max_repetitions),
        "--max-minutes",
        str(a.max_minutes),
        "--tolerance",
        a.tolerance,
        "--junit",
        str(home / "check.xml"),
        slowdown=a.slowdown if kind == "knob" else 0.0,
    )
    took = time.monotonic() - start
    if proc.returncode not in EXIT:
        sys.exit(f"check failed to run ({proc.returncode}): {proc.stderr[-2000:]}")
    outcomes = ("PASSED", "REGRESSED", "UNDECIDED", "NOT JUDGED")
    verdict = next((x for x in proc.stdout.splitlines() if x.strip().startswith(outcomes)), "")
    return {
        "kind": kind,
        "outcome": EXIT[proc.returncode],
        "seconds": round(took, 1),
        "pairs": pairs_of(home),
        "load": os.getloadavg()[0],
        "said": verdict.strip()[:400],
    }


def projected(logs: list[float], shift: float, budget: int, tolerance: float, trials=2000):
    """Rates of the rule at `budget` pairs, resampling measured pair log ratios (their
    mean removed, `shift` added): a projection from this machine's noise, not a run."""
    rng = random.Random(35)
    centre = statistics.fmean(logs)
    out = {"regressed": 0, "passed": 0, "undecided": 0}
    for _ in range(trials):
        study, ref = [], []
        outcome = "undecided"
        for _ in range(budget):
            x = rng.choice(logs) - centre + math.log(1 + shift)
            study.append(math.exp(x))
            ref.append(1.0)
            d = decide.paired(study, ref, tolerance)
            if d.outcome != decide.UNDECIDED:
                outcome = d.outcome
                break
        out[outcome] += 1
    return {k: round(v / trials, 3) for k, v in out.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=40.0, help="start no check after this")
    ap.add_argument("--checks", type=int, default=40, help="of each kind, at most")
    ap.add_argument("--max-repetitions", type=int, default=6)
    ap.add_argument(
        "--max-minutes", type=float, default=9.0, help="each check's own budget (check's)"
    )
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--tolerance", default="5%")
    ap.add_argument("--slowdown", type=float, default=0.10)
    ap.add_argument(
        "--kinds", default=",".join(KINDS), help=f"which checks, in turn (of {', '.join(KINDS)})"
    )
    ap.add_argument("--no-hog", action="store_true", help="no competing process")
    ap.add_argument("--no-save", action="store_true", help="print only")
    a = ap.parse_args()
    kinds = [k for k in a.kinds.split(",") if k]
    if not kinds or set(kinds) - set(KINDS):
        ap.error(f"--kinds {a.kinds!r}: a comma-separated list of {', '.join(KINDS)}")
    hog = None
    if not a.no_hog:
        hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    start = time.monotonic()
    checks: list[dict] = []
    try:
        with tempfile.TemporaryDirectory(prefix="dlscale-check-rates-") as t:
            for i in range(a.checks):
                for kind in kinds:
                    if time.monotonic() - start > 60 * a.minutes:
                        break
                    checks.append(one_check(Path(t), i, kind, a))
                    c = checks[-1]
                    print(
                        f"{kind} #{i + 1}: {c['outcome']} in {c['seconds']:.0f} s, "
                        f"{len(c['pairs'])} pairs, load {c['load']:.1f}: {c['said'][:160]}",
                        flush=True,
                    )
                else:
                    continue
                break
    finally:
        if hog is not None:
            hog.terminate()
            hog.wait()
    tolerance = float(a.tolerance.rstrip("%")) / (100 if a.tolerance.endswith("%") else 1)
    by_kind = {}
    for kind in KINDS:
        mine = [c for c in checks if c["kind"] == kind]
        if not mine:
            continue
        logs = [math.log(s / b) for c in mine for s, b in c["pairs"]]
        counts = {o: sum(c["outcome"] == o for c in mine) for o in EXIT.values()}
        by_kind[kind] = {
            "checks": len(mine),
            **counts,
            "regressed_rate": round(counts["regressed"] / len(mine), 3),
            "median_seconds": statistics.median(c["seconds"] for c in mine),
            "pairs": len(logs),
            "mean_ratio": round(math.exp(statistics.fmean(logs)), 3) if logs else None,
            "pair_log_sd": round(statistics.stdev(logs), 3) if len(logs) > 1 else None,
        }
    same_logs = [math.log(s / b) for c in checks if c["kind"] == "unchanged" for s, b in c["pairs"]]
    projection = {}
    if len(same_logs) >= 5:
        for budget in (a.max_repetitions, 20, 40, 80):
            projection[str(budget)] = {
                "unchanged": projected(same_logs, 0.0, budget, tolerance),
                "slowed_10pct": projected(same_logs, -0.10, budget, tolerance),
            }
    loads = [c["load"] for c in checks]
    row = {
        "competing_process": None if a.no_hog else "one busy loop (python), same niceness",
        "load_average": {
            "min": min(loads, default=None),
            "median": statistics.median(loads) if loads else None,
            "max": max(loads, default=None),
        },
        "steps": a.steps,
        "breakdown_pairs": 0,  # the spec's: runs spend nothing past their timed steps
        "max_repetitions": a.max_repetitions,
        "max_minutes": a.max_minutes,
        "rule": decide.rule_text(tolerance),
        "tolerance": a.tolerance,
        "slowdown": a.slowdown,
        "interleaved": True,
        "kinds": kinds,
        "by_kind": by_kind,
        "false_alarm_rate": by_kind.get("unchanged", {}).get("regressed_rate"),
        # each slowed kind's rate under its own key, as earlier rows have them
        **{
            f"detection_rate_{kind.replace('-', '_')}": by_kind.get(kind, {}).get("regressed_rate")
            for kind in KINDS[1:]
        },
        "projected_from_measured_pairs": projection,
        # every check as it ran, its pairs (study, baseline repeat) included: later sessions
        # pool the pairs of rows with the same settings, not only their counts
        "checks": [{k: c[k] for k in ("kind", "outcome", "seconds", "pairs")} for c in checks],
        "wall_s": round(time.monotonic() - start, 1),
    }
    if not a.no_save:
        row = append_row("check_rates", row)
    print(json.dumps(row, indent=1))


if __name__ == "__main__":
    main()
