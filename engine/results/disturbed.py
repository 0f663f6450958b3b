"""Whether a run was disturbed: its `interference` record (trainers/common/interference.py
for the built-in trainers, tracking/custom_load.py for a declared framework) judged
against stated thresholds (issue 50). The one home of the rule: results, status, the
report, the TUI and the check ask here, so a run is disturbed or not in all of them alike.

The rule, signal by signal (calibrated by benchmarks/interference.py; docs/measuring.md
says how and with what numbers):
- CPUs: others used the run's CPUs *and* its threads waited for one. Either alone is not
  harm: others on a CPU the run did not want cost it nothing, and a run with more threads
  than CPUs waits for itself. Where the kernel keeps no run-queue waits (no schedstats),
  others' share alone decides;
- steal: a hypervisor gave the run's CPUs to other guests;
- I/O and memory: tasks stalled on them (the machine's pressure stall information) for a
  share of the window;
- GPU: compute processes that are not the run's used its GPU (NVML's per-process SM
  utilisation samples) for a share of the window.
A record the kernel could say nothing in (every share None) judges nothing: the run is
neither quiet nor disturbed, and is shown as unknown."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import SpecError
from .rows import number

if TYPE_CHECKING:
    from ..tracking.store import Store

# Above these shares of the run's timed window a signal counts (benchmarks/interference.py)
OTHERS_CPU = 0.10  # others' share of the run's CPUs' time
QUEUE_WAIT = 0.10  # of the time the run's threads wanted a CPU, the share they waited
STEAL = 0.05
IO_STALL = 0.20
MEMORY_STALL = 0.05
FOREIGN_GPU = 0.05  # foreign processes' share of the run's GPU's SM utilisation samples

SHARES = (
    "others_cpu_share",
    "run_queue_wait_share",
    "steal_share",
    "io_stall_share",
    "memory_stall_share",
    "cpu_stall_share",
    "foreign_gpu_util_share",
)

# What a spec's `[experiment] disturbed` may choose (engine/config/spec.py)
FLAG = "flag"
LEAVE_OUT = "leave-out"
RERUN = "rerun"
ACTIONS = (FLAG, LEAVE_OUT, RERUN)
RERUNS = 2  # `disturbed_reruns`' default: reruns of one disturbed run, at most
MAX_RERUNS = 5  # the most a spec may ask (engine/config/spec.py)


def _pct(share: float) -> str:
    return f"{100 * share:.0f}%"


def reasons(record: Mapping[str, Any]) -> list[str] | None:
    """What disturbed the run, in words ("others took 41% of the run's CPUs"); [] when
    nothing passed its threshold; None when the record says nothing to judge by."""
    shares = {name: number(record, name) for name in SHARES}
    if all(v is None for v in shares.values()):
        return None
    out = []
    others, waited = shares["others_cpu_share"], shares["run_queue_wait_share"]
    if others is not None and others > OTHERS_CPU and (waited is None or waited > QUEUE_WAIT):
        out.append(
            f"others took {_pct(others)} of the run's CPUs"
            + (f" while its threads waited {_pct(waited)} of the time for one" if waited else "")
        )
    if (steal := shares["steal_share"]) is not None and steal > STEAL:
        out.append(f"the hypervisor took {_pct(steal)} of the run's CPUs (steal)")
    if (io := shares["io_stall_share"]) is not None and io > IO_STALL:
        out.append(f"tasks waited for I/O {_pct(io)} of the time")
    if (memory := shares["memory_stall_share"]) is not None and memory > MEMORY_STALL:
        out.append(f"tasks waited for memory {_pct(memory)} of the time")
    if (gpu := shares["foreign_gpu_util_share"]) is not None and gpu > FOREIGN_GPU:
        pids = record.get("foreign_gpu_pids")
        pids = pids[:3] if isinstance(pids, list) else []
        named = f" (pid {', '.join(map(str, pids))})" if pids else ""
        out.append(f"other processes{named} used the run's GPU {_pct(gpu)} of the time")
    return out


@dataclass(frozen=True)
class Judged:
    """Runs by what their records say: disturbed (run id -> reasons), quiet, and unknown
    (no record, or one that says nothing)."""

    disturbed: dict[str, list[str]]
    quiet: frozenset[str]

    def known(self, run_id: str) -> bool:
        return run_id in self.disturbed or run_id in self.quiet


def shared(record: Mapping[str, Any]) -> str | None:
    """What a `neighbours` record says against its run: other jobs on nodes its Slurm
    profile asked to have whole (engine/backends/slurm/neighbours.py); None when none."""
    count = record.get("other_jobs")
    if not isinstance(count, int) or isinstance(count, bool) or count <= 0:
        return None
    named = [j for j in record.get("named") or [] if isinstance(j, dict)][:3]
    who = ", ".join(f"job {j.get('job')} ({j.get('user')})" for j in named)
    return (
        f"the profile asked for whole nodes (exclusive), yet {count} other job"
        f"{'' if count == 1 else 's'} ran on them" + (f": {who}" if who else "")
    )


def judge(store: Store, run_ids: Iterable[str] | None = None) -> Judged:
    ids = list(run_ids) if run_ids is not None else None
    disturbed: dict[str, list[str]] = {}
    quiet = set()
    for run_id, record in store.records.last("interference", ids).items():
        said = reasons(record)
        if said:
            disturbed[run_id] = said
        elif said is not None:
            quiet.add(run_id)
    for run_id, record in store.records.last("neighbours", ids).items():
        if (sharing := shared(record)) is not None:
            disturbed.setdefault(run_id, []).append(sharing)
            quiet.discard(run_id)
    return Judged(disturbed, frozenset(quiet))


@dataclass(frozen=True)
class Choice:
    """What an experiment does with its disturbed runs, and how often it reruns one."""

    action: str = FLAG
    reruns: int = RERUNS


@functools.lru_cache(maxsize=256)  # every poll asks (rerunning): a spec is parsed once
def choice_of(spec_text: str) -> Choice:
    """What an experiment's saved spec chose for its disturbed runs (`[experiment]
    disturbed` and `disturbed_reruns`, checked when the spec was run)."""
    from ..config.toml_text import parse_toml_text

    try:
        experiment = parse_toml_text(spec_text, "the saved spec").get("experiment")
    except SpecError:
        return Choice()
    if not isinstance(experiment, dict):
        return Choice()
    action, reruns = experiment.get("disturbed", FLAG), experiment.get("disturbed_reruns")
    return Choice(
        action if action in ACTIONS else FLAG,
        reruns if isinstance(reruns, int) and not isinstance(reruns, bool) else RERUNS,
    )


def choices(store: Store, experiments: Iterable[str]) -> dict[str, Choice]:
    return {name: choice_of(store.experiment(name).get("spec_text") or "") for name in experiments}


def rerunning(store: Store) -> dict[str, Choice]:
    """The experiments whose spec reruns their disturbed runs."""
    return {n: c for n, c in choices(store, store.experiment_names()).items() if c.action == RERUN}


def rerun_id(run_id: str) -> str:
    """A disturbed run's rerun's id, made from the run's alone: two front ends following
    one store at once make the rerun once (the store refuses a second run of one id)."""
    import hashlib

    return hashlib.sha256(f"disturbed rerun of {run_id}".encode()).hexdigest()[:12]


def due(store: Store) -> list[Any]:
    """The runs to rerun now: completed, judged disturbed, in an experiment whose spec says
    `disturbed = "rerun"`, not rerun yet, and fewer reruns deep than its
    `disturbed_reruns` (a run imported from another site is never submitted here)."""
    chosen = rerunning(store)
    if not chosen:
        return []
    runs = [r for name in chosen for r in store.runs(name)]
    by_id = {r["run_id"]: r for r in runs}
    done = {r["rerun_of"] for r in runs if r.get("rerun_of")}
    ready = [
        r
        for r in runs
        if r["state"] == "COMPLETED" and r["run_id"] not in done and not r.get("site")
    ]
    found = judge(store, [r["run_id"] for r in ready]).disturbed if ready else {}
    out = []
    for r in ready:
        depth, at = 0, r
        while (of := at.get("rerun_of")) and of in by_id and depth <= MAX_RERUNS:
            depth, at = depth + 1, by_id[of]
        if r["run_id"] in found and depth < chosen[r["experiment"]].reruns:
            out.append(r)
    return out


def stand_ins(
    runs: Iterable[Mapping[str, Any]], judged: Judged, rerunning: set[str]
) -> dict[str, str]:
    """In the experiments that rerun disturbed runs (`rerunning`), each disturbed run that
    has been rerun, and the rerun that stands in for it in its point: a chain when a rerun
    was disturbed too. A rerun of a quiet run, or in another experiment, is `dlscale
    rerun`'s comparison and stands in for nothing."""
    first: dict[str, Mapping[str, Any]] = {}  # a run: its first rerun
    for r in sorted(runs, key=lambda r: r["created"]):
        if (of := r.get("rerun_of")) and r["experiment"] in rerunning:
            first.setdefault(of, r)
    # Until its rerun has measured (or where it failed), the disturbed run counts, marked.
    return {
        run_id: rerun["run_id"]
        for run_id, rerun in first.items()
        if run_id in judged.disturbed and rerun["state"] == "COMPLETED"
    }


def chain(counted: Mapping[str, Any], replaced: Mapping[str, str]) -> dict[str, str]:
    """The disturbed runs the `counted` run stands in for, each with the rerun that
    replaced it (a chain's every link)."""
    back = {new: old for old, new in replaced.items()}
    out: dict[str, str] = {}
    run_id = counted["run_id"]
    while run_id in back and back[run_id] not in out:
        out[back[run_id]] = run_id
        run_id = back[run_id]
    return out


def standing(run_id: str, replaced: Mapping[str, str]) -> str:
    """The run that counts for `run_id`'s repetition: the end of its chain of reruns."""
    seen = {run_id}
    while run_id in replaced and replaced[run_id] not in seen:
        run_id = replaced[run_id]
        seen.add(run_id)
    return run_id


# --- how results show it --------------------------------------------------------------------
MARK = "~"  # after a point's throughput: some runs it counts were disturbed


def counted_disturbed(row: Mapping[str, Any]) -> int:
    """How many of the runs a result row counts were judged disturbed (none where the
    experiment leaves them out)."""
    if row.get("disturbed_action") == LEAVE_OUT:
        return 0
    return len(row.get("disturbed") or {})


def mark(row: Mapping[str, Any]) -> str:
    return f" {MARK}" if counted_disturbed(row) else ""


def point_text(row: Mapping[str, Any]) -> str:
    """A point's disturbed runs in words ("2 of 5 runs disturbed; run 3f2a...: others took
    41% of the run's CPUs ..."; where the spec reruns them, which reruns stand in for
    which), with its CV over its quiet runs where it is noisy; "" when none was."""
    found = row.get("disturbed") or {}
    rerun = row.get("disturbed_rerun") or {}
    parts = []
    if rerun:
        (old, new), *others = sorted(rerun.items())
        parts.append(
            f"{len(rerun)} disturbed run{'' if len(rerun) == 1 else 's'} rerun (the spec's "
            f'`disturbed = "rerun"`), run {old} by run {new}'
            + (f" (and {len(others)} more)" if others else "")
        )
    if found:
        left = row.get("disturbed_action") == LEAVE_OUT
        completed = row["n"] + _left(row)
        words = f"{len(found)} of {completed} runs disturbed"
        words += ' and left out (the spec\'s `disturbed = "leave-out"`)' if left else ""
        first, *more = sorted(found.items())
        words += f"; run {first[0]}: {', '.join(first[1])}"
        words += f" (and {len(more)} more)" if more else ""
        cv, quiet = row.get("throughput_cv"), row.get("throughput_cv_quiet")
        if row.get("noisy") and cv is not None and quiet is not None:
            words += f"; CV {100 * cv:.1f}%, {100 * quiet:.1f}% over its quiet runs"
        parts.append(words)
    return "; ".join(parts)


SHORT_LEGEND = f"{MARK} other work disturbed runs"  # where room is scarce (the TUI's head)
LEGEND = (
    f"{MARK} = some runs the point counts were disturbed by other work on the machine "
    "(their interference records; docs/measuring.md)"
)


def notes(rows: Iterable[Mapping[str, Any]], label: Callable[[Any], str]) -> list[str]:
    """The lines under a results table that say which points' runs were disturbed and by
    what, and how many runs no record could judge; `label(row)` names a point."""
    rows = list(rows)
    out = [f"{label(r)}: {said}." for r in rows if (said := point_text(r))]
    if out and any(mark(r) for r in rows):
        out.insert(0, LEGEND + ":")
    unknown = sum(max(0, r["n"] + _left(r) - int(r.get("disturbed_judged") or 0)) for r in rows)
    if unknown and any(r.get("disturbed_judged") for r in rows):
        out.append(f"{unknown} completed runs have no interference record to judge.")
    return out


def _left(row: Mapping[str, Any]) -> int:
    return len(row.get("disturbed") or {}) if row.get("disturbed_action") == LEAVE_OUT else 0
