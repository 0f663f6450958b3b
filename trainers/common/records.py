"""The metric-record format: one JSON object per line, written by rank 0 only.

This module is the single definition of the format. Trainers write through `RecordWriter`;
the engine reads through `parse_record`. It imports only the standard library, because it
runs inside every framework's environment on the compute nodes.

Order in a file: one `params` record first, one `env` record, then `interval` and `eval`
records as training goes, and one `summary` record last. A communication benchmark run
(`--comm-benchmark`) trains nothing: its measurement is one `comm` record before its summary.
A declared framework's run may end with an `energy` record after its summary: written by the
engine from the meter around the script (trainers/common/metered.py), it fills the summary's
energy fields the script left empty; and with a second `env` record, the script's own with
the versions its interpreter holds added (engine/tracking/custom_software.py), which
readers of a run's last env record see. The memory probe (common/memory_probe.py) writes one
`probe` record to a file of its own: every size it tried and the largest that fit.
Units are in the field names (`_s` seconds, `images_per_s`, `_gbps` 10^9 bytes a second).
"""

from __future__ import annotations

import json
import math
import sys
import time
from typing import IO, Any

SCHEMA = 1

# Fields each kind must carry. More fields are allowed: frameworks add their own.
REQUIRED: dict[str, tuple[str, ...]] = {
    "params": ("framework", "model", "dataset", "per_device_batch", "world_size"),
    "env": ("framework_versions", "hostnames", "devices", "world_size", "dlscale_version"),
    "interval": ("step", "images_per_s", "loss"),
    "eval": ("step", "epoch", "top1", "elapsed_s"),
    "summary": ("status", "throughput", "timed_steps", "warmup_steps", "elapsed_s"),
    "comm": (
        "collective",
        "backend",
        "world_size",
        "comm_bytes",
        "bucket_bytes",
        "comm_time_s",
        "comm_algbw_gbps",
        "comm_busbw_gbps",
    ),
    "energy": ("metered",),
    "probe": ("attempts", "stopped_by"),
    "interference": ("window_s", "cpus"),
    "neighbours": ("exclusive", "nodes"),
}
# The kinds in the order a training run writes them; a comm benchmark run's order.
KINDS = ("params", "env", "interval", "eval", "summary")
COMM_KINDS = ("params", "env", "comm", "summary")

# What each field the engine reads must hold, required or not: a record is trusted by its
# types, not its shape, so a throughput of "abc", null or NaN never reaches a table or a
# chart. Kinds: "count" a whole number >= 0, "number" a finite number, "rate" a finite
# number >= 0, "fraction" a finite number in [0, 1], "throughput" 0 or a rate from
# MIN_THROUGHPUT (every number finite and normal: no denormal), "text", "flag" (true/false), "list",
# "texts" (a list of strings), "table" (a JSON object), "names" (one of strings or nulls); a
# trailing "?" allows null. Every record has a time ("*"): reports and exports order by it.
TYPES: dict[str, dict[str, str]] = {
    "*": {"time": "number", "schema": "count"},
    "params": {
        "framework": "text",
        "model": "text",
        "dataset": "text",
        "per_device_batch": "count",
        "world_size": "count",
        "global_batch": "count",
        "precision": "text",
        "loader": "text",
        "run_id": "text",
        "steps": "count?",
        "epochs": "count?",
        "warmup_steps": "count",
        "lr": "number",
        "lr_scaled": "number",
        "threads": "count",
        "seed": "count",
        "train_images": "count?",
        "eval_images": "count?",
    },
    "env": {
        "framework_versions": "names",
        "hostnames": "texts",
        "devices": "texts",
        "world_size": "count",
        "dlscale_version": "text",
        "nodes": "texts?",
        "job_id": "text?",
        "launcher": "text?",
    },
    "interval": {
        "step": "count",
        "images_per_s": "throughput",  # a declared framework's unit a second (params.unit)
        "loss": "number?",  # null: a script that reports no loss (docs/custom.md)
        "epoch": "count?",
        "includes_warmup": "flag?",
    },
    "eval": {
        "step": "count",
        "epoch": "count",
        "top1": "fraction",
        "elapsed_s": "rate",
        "eval_s": "rate?",
    },
    "summary": {
        "status": "text",
        "throughput": "throughput",
        "timed_steps": "count",
        "warmup_steps": "count",
        "elapsed_s": "rate",
        "total_wall_s": "rate?",
        "time_to_accuracy_s": "rate?",
        "best_top1": "fraction?",
        "target_accuracy": "fraction?",
        "reached_target": "flag?",
        "images_timed": "count?",
        "final_loss": "number?",
        # a transformer's (torch_ddp/metrics.py); mfu can pass 1 where a CPU's measured
        # peak fell short of what its steps later got, so it is a rate, not a fraction
        "tokens_per_s": "rate?",
        "flops_per_token": "count?",
        "achieved_tflops_per_device": "rate?",
        "peak_tflops_per_device": "rate?",
        "mfu": "rate?",
        "peak_memory_bytes": "count?",
        "peak_memory_bytes_per_rank": "list?",
        # CPU seconds of rank 0's process tree per timed step (interference.py): a measure
        # a busy machine moves less than the wall clock
        "cpu_s_per_step": "rate?",
    },
    # what else the machine did over the timed window (interference.py)
    "interference": {
        "window_s": "rate",
        "cpus": "list",
        "run_queue_wait_share": "fraction?",
        "others_cpu_share": "fraction?",
        "steal_share": "fraction?",
        "cpu_stall_share": "fraction?",
        "io_stall_share": "fraction?",
        "memory_stall_share": "fraction?",
        "own_cpu_s": "rate?",
        "rank_cpu_s": "rate?",
        # bytes over the window: the node's disks, the run's own storage I/O, the rest
        # (others'), and the node's network interfaces (loopback left out)
        "disk_bytes": "rate?",
        "own_disk_bytes": "rate?",
        "others_disk_bytes": "rate?",
        "net_bytes": "rate?",
        # compute processes on the run's GPU that are not the run's, and their share of
        # its SM utilisation over the window (NVML)
        "foreign_gpu_pids": "list?",
        "foreign_gpu_util_share": "fraction?",
        "metered": "text?",  # read from outside a declared framework's script
        "unavailable": "text?",  # why the shares are unknown
    },
    # where a Slurm profile asked for whole nodes: the other jobs accounting says ran on
    # the run's nodes while it measured (engine/backends/slurm/neighbours.py)
    "neighbours": {
        "exclusive": "flag",
        "nodes": "text",
        "other_jobs": "count?",
        "named": "list?",
        "unavailable": "text?",
    },
    "comm": {
        "collective": "text",
        "backend": "text",
        "world_size": "count",
        "comm_bytes": "count",
        "buckets": "list?",
        "bucket_bytes": "count",
        "fused_by": "text?",
        "element_bytes": "count?",
        "warmup_rounds": "count?",
        "repetitions": "count?",
        "comm_time_s": "rate",
        "comm_time_p90_s": "rate?",
        "comm_time_cv": "rate?",
        "comm_algbw_gbps": "rate",
        "comm_busbw_gbps": "rate",
        "elapsed_s": "rate?",
        "sweep": "list?",  # [{bytes, time_s, algbw_gbps, busbw_gbps, rounds}] by size
    },
    "energy": {
        "metered": "text",  # how: "around the script" (the engine's, from its timelines)
        "energy_j": "rate?",
        "energy_per_image_j": "rate?",  # per unit of the run's (params.unit)
        "mean_power_w": "rate?",
        "device_util": "fraction?",
        "energy_unavailable": "text?",
        "energy_source": "text?",
        "energy_window_s": "rate?",
        "devices_metered": "texts?",
    },
    "probe": {
        "command": "texts",
        "memory_limit_bytes": "count?",
        "memory_limit_kind": "text?",
        "attempts": "list",  # [{layers, parameters, peak_memory_bytes_per_rank, fit, reason}]
        "largest_fit_layers": "count?",
        "largest_fit_parameters": "count?",
        "largest_fit_peak_memory_bytes_per_rank": "list?",
        "stopped_by": "text",
    },
}
# The summary's energy fields an `energy` record fills where the summary leaves them empty.
ENERGY_FIELDS = (
    "energy_j",
    "energy_per_image_j",
    "mean_power_w",
    "device_util",
    "energy_unavailable",
    "energy_source",
    "devices_metered",
)
_WHAT = {
    "count": "a whole number >= 0 (at most 2^53)",
    "number": "a finite number (at most 1e100 in size)",
    "rate": "a finite number >= 0 (at most 2^53)",
    "throughput": "a finite number >= 0: 0, or from 1e-9 (one in 30 years) to 2^53 a second",
    "fraction": "a number from 0 to 1",
    "text": "a string",
    "flag": "true or false",
    "list": "a list",
    "texts": "a list of strings",
    "table": "a JSON object",
    "names": "a JSON object of strings (or nulls)",
}
# Numbers past these are no measurement and overflow what computes with them (a float sum,
# SQLite's 64-bit integers, a chart's axis): a count or rate at most 2^53 (exact as a
# float), any other number at most 1e100 in size.
MAX_COUNT = 2**53
MAX_NUMBER = 1e100
# A throughput (of anything a second) below this is none: one in 30 years. The bound keeps
# every ratio of two throughputs (a speedup, B/A) and every square (a variance) finite.
MIN_THROUGHPUT = 1e-9
# A record is one flat object with a few small lists and tables; a line longer or nested
# deeper than these is no record (and deep JSON costs recursion to decode).
MAX_LINE_CHARS = 1 << 20
MAX_DEPTH = 8


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _normal(value: float | int) -> bool:
    """Finite, and 0 or at least the smallest normal float in size: a denormal (5e-324) is
    no measurement, and one divided by it overflows (engine/quantities.py's rule)."""
    if isinstance(value, int):
        return True  # exact; its range is checked by its kind
    return math.isfinite(value) and (value == 0 or abs(value) >= sys.float_info.min)


def _fits(value: Any, kind: str) -> bool:
    if kind == "count":
        return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_COUNT
    if kind in ("number", "rate", "fraction", "throughput"):
        if not _is_number(value) or not _normal(value):
            return False
        if kind == "number":
            return abs(value) <= MAX_NUMBER
        if kind == "throughput":
            return value == 0 or MIN_THROUGHPUT <= value <= MAX_COUNT
        return 0 <= value <= (MAX_COUNT if kind == "rate" else 1)
    if kind == "texts":
        return isinstance(value, list) and all(isinstance(v, str) for v in value)
    if kind == "names":
        return isinstance(value, dict) and all(isinstance(v, str | None) for v in value.values())
    return isinstance(value, {"text": str, "flag": bool, "list": list, "table": dict}[kind])


def version_names(versions: dict[str, Any]) -> dict[str, str | None]:
    """Versions as an env record holds them ("names": strings or nulls): a library that
    reports an integer (cuDNN's 91900) is written as its text, not skipped by the store."""
    return {k: None if v is None else str(v) for k, v in versions.items()}


def nesting(value: Any) -> int:
    """How deeply lists and dicts nest in `value` (0 for a scalar), without recursion."""
    deepest, todo = 0, [(value, 1)]
    while todo:
        item, level = todo.pop()
        if isinstance(item, dict):
            item = list(item.values())
        if isinstance(item, list):
            deepest = max(deepest, level)
            todo.extend((v, level + 1) for v in item if isinstance(v, (list, dict)))
    return deepest


def _shown(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


class RecordError(ValueError):
    """A line that is not a valid metric record."""


class RecordWriter:
    """Appends records to a JSON-lines file, flushed per record so a watcher sees progress
    and a killed run keeps what it wrote. On ranks other than 0 it writes nothing."""

    def __init__(self, path: str | None, enabled: bool = True, flush_each: bool = True) -> None:
        # flush_each=False: records written all at once (the engine's, from a finished
        # run's log), flushed when closed
        self._file: IO[str] | None = None
        self._flush_each = flush_each
        if enabled and path:
            self._file = open(path, "a", encoding="utf-8")

    def write(self, kind: str, **fields: Any) -> dict[str, Any]:
        if kind not in REQUIRED:
            raise RecordError(f"unknown record kind {kind!r}; allowed: {', '.join(REQUIRED)}")
        missing = [f for f in REQUIRED[kind] if f not in fields]
        if missing:
            raise RecordError(f"{kind} record lacks {', '.join(missing)}")
        record = {"kind": kind, "schema": SCHEMA, "time": time.time(), **fields}
        if self._file is not None:
            self._file.write(json.dumps(record, sort_keys=True) + "\n")
            if self._flush_each:
                self._file.flush()
        return record

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def __enter__(self) -> RecordWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def parse_record(line: str) -> dict[str, Any]:
    """Parse one line and check its fields' types; raise RecordError naming what is wrong
    (the field, the value and what it must be)."""
    if len(line) > MAX_LINE_CHARS:
        raise RecordError(f"longer than {MAX_LINE_CHARS} characters")
    try:
        record = json.loads(line)
    except json.JSONDecodeError as exc:
        raise RecordError(f"not JSON: {exc.msg}") from None
    except RecursionError:
        raise RecordError(f"nested over {MAX_DEPTH} deep") from None
    except ValueError as exc:  # an integer of over 4,300 digits
        raise RecordError(f"not a usable JSON value: {exc}") from None
    if not isinstance(record, dict):
        raise RecordError("a record must be a JSON object")
    if nesting(record) > MAX_DEPTH:
        raise RecordError(f"nested over {MAX_DEPTH} deep")
    kind = record.get("kind")
    if not isinstance(kind, str) or kind not in REQUIRED:
        raise RecordError(f"unknown record kind {_shown(kind)}; allowed: {', '.join(REQUIRED)}")
    missing = [f for f in (*REQUIRED[kind], "time") if f not in record]
    if missing:
        raise RecordError(f"{kind} record lacks {', '.join(missing)}")
    for name, want in {**TYPES["*"], **TYPES[kind]}.items():
        if name not in record:
            continue
        value, base = record[name], want.rstrip("?")
        if value is None and want.endswith("?"):
            continue
        if not _fits(value, base):
            raise RecordError(f"{kind}.{name} is {_shown(value)}, not {_WHAT[base]}")
    for name, value in record.items():  # the fields of a framework's own, and in lists
        bad = abnormal(value)
        if bad is not None:
            raise RecordError(
                f"{kind}.{name} holds {_shown(bad)}, not a finite number (NaN and Infinity are "
                "not JSON; a denormal is no measurement)"
            )
    return record


def abnormal(value: Any) -> float | None:
    """The first float in `value` (nested) that is not finite and normal, else None."""
    todo = [value]
    while todo:
        item = todo.pop()
        if isinstance(item, dict):
            todo.extend(item.values())
        elif isinstance(item, list):
            todo.extend(item)
        elif isinstance(item, float) and not _normal(item):
            return item
    return None
