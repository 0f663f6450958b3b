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
ACTIONS = (FLAG, LEAVE_OUT)


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
    return Judged(disturbed, frozenset(quiet))


def action_of(spec_text: str) -> str:
    """What an experiment's saved spec chose for its disturbed runs (`[experiment]
    disturbed`, checked when the spec was run): flag them, or leave them out of points."""
    from ..config.toml_text import parse_toml_text

    try:
        experiment = parse_toml_text(spec_text, "the saved spec").get("experiment")
    except SpecError:
        return FLAG
    chosen = experiment.get("disturbed", FLAG) if isinstance(experiment, dict) else FLAG
    return chosen if chosen in ACTIONS else FLAG


def actions(store: Store, experiments: Iterable[str]) -> dict[str, str]:
    return {name: action_of(store.experiment(name).get("spec_text") or "") for name in experiments}


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
    41% of the run's CPUs ..."), with its CV over its quiet runs where it is noisy; "" when
    none was."""
    found = row.get("disturbed") or {}
    if not found:
        return ""
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
    return words


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
    if out:
        out.insert(0, LEGEND + ":")
    unknown = sum(max(0, r["n"] + _left(r) - int(r.get("disturbed_judged") or 0)) for r in rows)
    if unknown and any(r.get("disturbed_judged") for r in rows):
        out.append(f"{unknown} completed runs have no interference record to judge.")
    return out


def _left(row: Mapping[str, Any]) -> int:
    return len(row.get("disturbed") or {}) if row.get("disturbed_action") == LEAVE_OUT else 0
