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
- mlp, mlp-10, mlp-2 (issue 51): a change dlscale did not design. A user's own script
  (benchmarks/mlp_width.py, a 4-layer MLP in NumPy read through log patterns) declared as
  a framework; `mlp` checks it against itself, `mlp-10` and `mlp-2` against itself with its
  hidden layers widened to cost 10% and 2% more multiply-adds (from its FLOPs formula;
  the CPU time each width really costs a step is measured before the checks, alone, in
  alternating order, and recorded as the kind's true effect).
With --parallel N the checks run N at once, and with --bursty busy loops start and stop at
random beside them (each in a session of its own, one per core at most, on for 5 to 60 s
and off for 5 to 90 s): the adversary that broke the check's intervals. Each check's pairs
are recorded by both measures (wall: throughput; cpu: units per CPU second), whichever one
judged (--measure), so one run gives the evidence for choosing between them.
Printed and appended to results.jsonl: per kind, the checks that exited 1 (regressed), 0
(passed) and 3 (undecided), so the false-alarm rate (unchanged checks that regressed) and
the detection rate (slowed checks that regressed); the median time a check took; the load
average seen (sampled after each check) with the competing process named; the spread of
one pair's log ratio; and, marked projected, the rates a larger budget would give, from a
bootstrap of the measured unchanged pairs (shifted by the knob's 10%) through the same rule.

    .venv/bin/python benchmarks/check_rates.py [--minutes 40] [--max-repetitions 6]
        [--max-minutes 9] [--steps 8]
        [--kinds unchanged,knob,threads,workers,threads-up,isa,primcache,mlp,mlp-10,mlp-2]
        [--parallel 3] [--bursty] [--measure wall|cpu]

CPU heavy, and long: each run is 10 to 50 s on 2 busy cores; --minutes stops starting new
checks after that long. Run it niced; it starts its competing process (a busy loop) at the
same niceness and stops it at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from mlp_spec import SCRIPT as MLP_SCRIPT
from mlp_spec import spec_text
from mlp_width import flops_per_sample
from record import append_row

from dlscale.engine.results.analysis import summaries_of
from dlscale.engine.results.regression import decide
from dlscale.engine.results.regression.check import MEASURES
from dlscale.engine.tracking.store import Store

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
# The user's own MLP, its width a command argument (a spec changed, the script not)
# not a power of two: at 1024 the BLAS meets cache conflicts a wider layer escapes, so a
# width of 1077 (10% more multiply-adds) cost only 3% more a step there; from 1000 it costs 11%
MLP_WIDTH = 1000
MLP_LOG_EVERY = 10
# each MLP kind's added multiply-adds a sample
MLP_MORE = {"mlp": 0.0, "mlp-10": 0.10, "mlp-2": 0.02}
KINDS = (
    "unchanged",
    "knob",
    "threads",
    "workers",
    "threads-up",
    "isa",
    "primcache",
    *MLP_MORE,
)
EXIT = {0: "passed", 1: "regressed", 3: "undecided"}


def dlscale(home: Path, *args: str, slowdown: float = 0.0) -> subprocess.CompletedProcess:
    env = {**os.environ, "DLSCALE_HOME": str(home)}
    env.pop("DLSCALE_TEST_SLOWDOWN", None)
    if slowdown:
        env["DLSCALE_TEST_SLOWDOWN"] = str(slowdown)
    return subprocess.run(
        [DLSCALE, *args], env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL
    )


def widened(more: float, width: int = MLP_WIDTH) -> int:
    """The hidden width whose multiply-adds a sample are `more` above `width`'s."""
    target = (1 + more) * flops_per_sample(width)
    return min(range(width, 4 * width), key=lambda w: abs(flops_per_sample(w) - target))


def true_effects(rounds: int = 5, steps: int = 100) -> dict[str, float]:
    """Each MLP kind's real cost: CPU seconds a step of its width over the base width's,
    each width run alone in this process's children, in alternating order, a step's CPU
    time being a long run's less a short run's over the steps between (so the start-up is
    left out, as the check's timed steps leave it out); the median of the rounds' ratios."""
    import resource

    def cpu_of(width: int, n: int) -> float:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run(
            [sys.executable, str(MLP_SCRIPT), "--width", str(width), "--steps", str(n),
             "--warmup-steps", "0", "--log-every", str(n)],
            check=True, capture_output=True,
        )  # fmt: skip
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        return (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)

    def per_step(width: int) -> float:
        return (cpu_of(width, steps + 10) - cpu_of(width, 10)) / steps

    ratios: dict[str, list[float]] = {k: [] for k in MLP_MORE if MLP_MORE[k]}
    for _ in range(rounds):
        for kind in ratios:
            ours, base = per_step(widened(MLP_MORE[kind])), per_step(MLP_WIDTH)
            ratios[kind].append(ours / base)
    return {k: round(statistics.median(v), 4) for k, v in ratios.items()}


# what a run's interference record says of the load it met (trainers/common/interference.py)
LOAD_SHARES = ("others_cpu_share", "run_queue_wait_share", "steal_share", "cpu_stall_share")


def runs_of(home: Path) -> list[dict]:
    """Every run the check paired, in the order they ran: its side, when it began (seconds
    after the first), its value by each measure and the load its interference record saw.
    Why a check of unchanged code can find one side slower for a whole check is the open
    question of issue 51's false alarms: these let a later session relate it to load."""
    store = Store(home)
    runs = sorted(
        (r for r in store.runs() if r["experiment"] == "study" or r.get("rerun_of")),
        key=lambda r: r["created"] or 0.0,
    )
    ids = [r["run_id"] for r in runs]
    summaries = summaries_of(store, ids)
    records = store.records.last("interference", ids)
    t0 = (runs[0]["created"] or 0.0) if runs else 0.0
    out = []
    for r in runs:
        summary = summaries.get(r["run_id"]) or {}
        seen = records.get(r["run_id"]) or {}
        out.append(
            {
                "side": r["experiment"],  # "study", or "base" for a baseline repeat
                "at_s": round((r["created"] or 0.0) - t0, 1),
                **{name: m.value(summary) for name, m in MEASURES.items()},
                **{k: seen.get(k) for k in LOAD_SHARES},
            }
        )
    return out


def pairs_of(runs: list[dict]) -> dict[str, list[tuple[float | None, float | None]]]:
    """The check's pairs (study, baseline repeat) in the order they ran, by each measure
    (the check's own values: wall is throughput, cpu units per CPU second), from runs_of."""
    study = [r for r in runs if r["side"] == "study"]
    base = [r for r in runs if r["side"] == "base"]
    return {name: [(s[name], b[name]) for s, b in zip(study, base)] for name in MEASURES}


def one_check(tmp: Path, i: int, kind: str, a: argparse.Namespace) -> dict:
    home = tmp / f"{kind}{i}"
    home.mkdir(parents=True)
    base_threads = 2 if kind == "threads" else 1
    study_threads = 2 if kind == "threads-up" else 1
    workers = 1 if kind == "workers" else 0
    framework, base_tail, study_tail = "pytorch-ddp", "", ""
    if kind in SETTING:
        framework = "site-resnet"
        base_tail = DECLARED.format(prefix="")
        study_tail = DECLARED.format(prefix=f'"env", "{SETTING[kind]}", ')
    common = {"steps": a.steps, "framework": framework}
    if kind in MLP_MORE:
        mlp = {"steps": a.steps, "warmup_steps": 2 * MLP_LOG_EVERY, "log_every": MLP_LOG_EVERY}
        base_text = spec_text("base", MLP_WIDTH, **mlp)
        study_text = spec_text("study", widened(MLP_MORE[kind]), **mlp)
    else:
        base_text = SPEC.format(name="base", threads=base_threads, workers=0, **common)
        study_text = SPEC.format(name="study", threads=study_threads, workers=workers, **common)
    (home / "base.toml").write_text(base_text + base_tail)
    (home / "study.toml").write_text(study_text + study_tail)
    start = time.monotonic()
    made = dlscale(home, "run", str(home / "base.toml"), "--wait")
    if made.returncode:
        sys.exit(f"the baseline failed: {made.stderr[-2000:]}")
    proc = dlscale(
        home,
        "check",
        str(home / "study.toml"),
        "--baseline",
        "base",
        "--run",
        "--interleave",
        "--measure",
        a.measure,
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
    runs = runs_of(home)
    by_measure = pairs_of(runs)
    return {
        "kind": kind,
        "index": i,
        "runs": runs,
        "outcome": EXIT[proc.returncode],
        "seconds": round(took, 1),
        "pairs": by_measure[a.measure],
        "pairs_by_measure": by_measure,
        "load": os.getloadavg()[0],
        "said": verdict.strip()[:400],
    }


class Bursts:
    """Busy loops that start and stop at random, one per core at most, each in a session
    of its own (the kernel's autogroup gives a session its share of the CPUs, so loops
    in the benchmark's session would only compete with each other)."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.stopping = threading.Event()
        self.on_s = 0.0  # busy-loop seconds run, summed over the loops
        self.threads = [
            threading.Thread(target=self._one, daemon=True) for _ in range(os.cpu_count() or 1)
        ]

    def __enter__(self) -> Bursts:
        for t in self.threads:
            t.start()
        return self

    def _one(self) -> None:
        while not self.stopping.wait(self.rng.uniform(5, 90)):
            hog = subprocess.Popen(
                [sys.executable, "-c", "while True: pass"], start_new_session=True
            )
            on = self.rng.uniform(5, 60)
            self.stopping.wait(on)
            hog.kill()
            hog.wait()
            self.on_s += on

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        for t in self.threads:
            t.join()


def targets(checks: list[dict]) -> dict[str, dict[str, object]]:
    """Issue 51's targets on the MLP kinds, each with its measured rate and whether it
    held."""

    def rate(kind: str, ok) -> tuple[float | None, int]:
        mine = [c for c in checks if c["kind"] == kind]
        return (round(sum(map(ok, mine)) / len(mine), 3) if mine else None), len(mine)

    rows = {
        "false alarms on mlp (<= 5%)": (
            *rate("mlp", lambda c: c["outcome"] == "regressed"),
            0.05,
            "<=",
        ),
        "10% passed (<= 5%)": (*rate("mlp-10", lambda c: c["outcome"] == "passed"), 0.05, "<="),
        "10% caught within 10 min (>= 80%)": (
            *rate("mlp-10", lambda c: c["outcome"] == "regressed" and c["seconds"] <= 600),
            0.80,
            ">=",
        ),
        "2% passed or undecided (>= 90%)": (
            *rate("mlp-2", lambda c: c["outcome"] != "regressed"),
            0.90,
            ">=",
        ),
    }
    return {
        name: {
            "rate": r,
            "checks": n,
            "held": None if r is None else (r <= bound if how == "<=" else r >= bound),
        }
        for name, (r, n, bound, how) in rows.items()
    }


def log_ratios(checks: list[dict], measure: str | None = None) -> list[float]:
    """Every pair's log ratio (study over baseline repeat) of these checks, by the measure
    that judged them or by `measure`."""
    return [
        math.log(x / y)
        for c in checks
        for x, y in (c["pairs"] if measure is None else c["pairs_by_measure"][measure])
        if x and y
    ]


def replayed(checks: list[dict], measure: str, tolerance: float) -> dict[str, int]:
    """How the rule decides each check on `measure`'s values of its pairs, looking after
    each pair as the check does, up to the pairs the check made."""
    out = {"regressed": 0, "passed": 0, "undecided": 0}
    for c in checks:
        pairs = [(x, y) for x, y in c["pairs_by_measure"][measure] if x and y]
        outcome = decide.UNDECIDED
        for k in range(1, len(pairs) + 1):
            d = decide.paired([x for x, _ in pairs[:k]], [y for _, y in pairs[:k]], tolerance)
            if d.outcome != decide.UNDECIDED:
                outcome = d.outcome
                break
        out[outcome] += 1
    return out


def sd(logs: list[float]) -> float | None:
    return round(statistics.stdev(logs), 3) if len(logs) > 1 else None


def lag1(checks: list[dict], measure: str) -> float | None:
    """The pairs' lag-1 autocorrelation within each check, pooled: how much neighbouring
    pairs move together."""
    num = den = 0.0
    for c in checks:
        logs = log_ratios([c], measure)
        if len(logs) < 3:
            continue
        centre = statistics.fmean(logs)
        dev = [x - centre for x in logs]
        num += sum(x * y for x, y in zip(dev, dev[1:]))
        den += sum(x * x for x in dev)
    return round(num / den, 3) if den else None


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
    ap.add_argument("--parallel", type=int, default=1, help="checks at once")
    ap.add_argument("--bursty", action="store_true", help="busy loops on and off at random")
    ap.add_argument("--measure", choices=sorted(MEASURES), default="wall")
    ap.add_argument("--seed", type=int, default=51, help="the bursts' seed")
    ap.add_argument("--no-save", action="store_true", help="print only")
    a = ap.parse_args()
    kinds = [k for k in a.kinds.split(",") if k]
    if not kinds or set(kinds) - set(KINDS):
        ap.error(f"--kinds {a.kinds!r}: a comma-separated list of {', '.join(KINDS)}")
    # each width's real cost, measured before any load starts
    effects = true_effects() if set(kinds) & {k for k, v in MLP_MORE.items() if v} else {}
    hog = None
    if not a.no_hog:
        hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    start = time.monotonic()
    checks: list[dict] = []
    lock = threading.Lock()

    stop = threading.Event()  # SIGTERM: start no new check, let those running end
    signal.signal(signal.SIGTERM, lambda *_: stop.set())

    def started(tmp: Path, i: int, kind: str) -> None:
        if time.monotonic() - start > 60 * a.minutes or stop.is_set():
            return  # past the benchmark's budget, or told to stop: no new check
        c = one_check(tmp, i, kind, a)
        with lock:
            checks.append(c)
            print(
                f"{kind} #{i + 1}: {c['outcome']} in {c['seconds']:.0f} s, "
                f"{len(c['pairs'])} pairs, load {c['load']:.1f}: {c['said'][:160]}",
                flush=True,
            )

    bursts = Bursts(a.seed) if a.bursty else None
    try:
        with (
            tempfile.TemporaryDirectory(prefix="dlscale-check-rates-") as t,
            bursts or contextlib.nullcontext(),
            ThreadPoolExecutor(max_workers=max(1, a.parallel)) as pool,
        ):
            # kinds in turn, so the machine's load hits them alike
            for f in [
                pool.submit(started, Path(t), i, kind) for i in range(a.checks) for kind in kinds
            ]:
                f.result()
    finally:
        if hog is not None:
            hog.terminate()
            hog.wait()
    row = row_of(checks, a, kinds, effects, bursts, time.monotonic() - start)
    if not a.no_save:
        row = append_row("check_rates", row)
    print(json.dumps(row, indent=1))


def row_of(
    checks: list[dict],
    a: argparse.Namespace,
    kinds: list[str],
    effects: dict[str, float],
    bursts: Bursts | None,
    wall_s: float,
) -> dict:
    """The results row of these checks, made with these settings."""
    tolerance = float(a.tolerance.rstrip("%")) / (100 if a.tolerance.endswith("%") else 1)
    by_kind = {}
    for kind in KINDS:
        mine = [c for c in checks if c["kind"] == kind]
        if not mine:
            continue
        logs = log_ratios(mine)
        counts = {o: sum(c["outcome"] == o for c in mine) for o in EXIT.values()}
        by_kind[kind] = {
            "checks": len(mine),
            **counts,
            "regressed_rate": round(counts["regressed"] / len(mine), 3),
            "passed_rate": round(counts["passed"] / len(mine), 3),
            "median_seconds": statistics.median(c["seconds"] for c in mine),
            "within_10_min": round(sum(c["seconds"] <= 600 for c in mine) / len(mine), 3),
            "pairs": len(logs),
            "mean_ratio": round(math.exp(statistics.fmean(logs)), 3) if logs else None,
            "pair_log_sd": round(statistics.stdev(logs), 3) if len(logs) > 1 else None,
            # both measures' spread over the same pairs: the evidence for a default
            "pair_log_sd_by_measure": {
                m: sd(log_ratios(mine, m)) for m in MEASURES if "pairs_by_measure" in mine[0]
            },
            "lag1_by_measure": {
                m: lag1(mine, m) for m in MEASURES if "pairs_by_measure" in mine[0]
            },
            # the other measure's outcomes, the same rule replayed round by round on the
            # same runs (a replay, not a check that ran: it stops where the check stopped)
            "replayed_by_measure": {
                m: replayed(mine, m, tolerance)
                for m in MEASURES
                if m != a.measure and "pairs_by_measure" in mine[0]
            },
        }
        if kind in effects:
            by_kind[kind]["true_cpu_ratio_alone"] = effects[kind]
    same = "mlp" if "mlp" in kinds and "unchanged" not in kinds else "unchanged"
    same_logs = log_ratios([c for c in checks if c["kind"] == same])
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
        "parallel": a.parallel,
        "bursty": "busy loops on 5-60 s, off 5-90 s, one per core at most, own sessions"
        if bursts is not None
        else None,
        "bursty_busy_s": round(bursts.on_s, 1) if bursts is not None else None,
        "measure": a.measure,
        "mlp_widths": {k: widened(v) for k, v in MLP_MORE.items()} if effects else None,
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
        "targets_issue_51": targets(checks) if "mlp-10" in by_kind else None,
        # every check as it ran, its pairs (study, baseline repeat) included: later sessions
        # pool the pairs of rows with the same settings, not only their counts
        "checks": [
            {
                k: c.get(k)
                for k in ("kind", "index", "outcome", "seconds", "pairs_by_measure", "runs", "said")
            }
            for c in checks
        ],
        "wall_s": round(wall_s, 1),
    }
    return row


if __name__ == "__main__":
    main()
