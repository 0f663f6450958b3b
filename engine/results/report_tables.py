"""The report's tables as data (title, headers, rows, notes), and those that explain the
numbers: where the efficiency goes. Every number is a field of analysis.results' rows."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .formatting import fmt


@dataclass
class Table:
    title: str
    headers: list[str]
    rows: list[list[str]]
    notes: list[str] = field(default_factory=list)
    right: set[int] = field(default_factory=set)  # columns of numbers, aligned right
    alerts: list[str] = field(default_factory=list)  # notes shown in red (a failed check)


def _ms(seconds: float | None) -> str:
    return fmt(None if seconds is None else 1000 * seconds, 1)


def efficiency_table(rows: list[dict[str, Any]]) -> Table | None:
    """Per point: the measured step split into compute, exposed communication and the rest,
    the benchmark's allreduce at its scale, and the model's step and efficiency beside the
    measured efficiency. None when no point has any of it."""
    rows = [r for r in rows if r.get("throughput") is not None]
    if not any(
        r.get("compute_time_s") is not None or r.get("comm_busbw_gbps") is not None for r in rows
    ):
        return None
    schedules = len({r.get("lr_schedule") for r in rows}) > 1
    headers = (
        ["model", "framework"]
        + (["lr schedule"] if schedules else [])
        + [
            "scale",
            "devices",
            "step ms",
            "compute ms",
            "exposed comm ms",
            "rest ms",
            "allreduce ms",
            "busbw GB/s",
            "predicted step ms",
            "predicted eff",
            "measured eff",
        ]
    )
    body = []
    for r in rows:
        body.append(
            [r["model"], r["framework"]]
            + ([r.get("lr_schedule") or "-"] if schedules else [])
            + [
                f"{r['nodes']}x{r['ranks_per_node']}",
                str(r["ranks"]),
                _ms(r["step_time_s"]),
                _ms(r["compute_time_s"]),
                _ms(r["exposed_comm_s"]),
                _ms(r["other_s"]),
                _ms(r["comm_time_s"]),
                fmt(r["comm_busbw_gbps"], 3),
                _ms(r["predicted_step_s"]),
                fmt(r["predicted_efficiency"]),
                fmt(r["efficiency"]),
            ]
        )
    notes = [
        "step: the timed steps' mean (global batch / images/s). compute: a step without "
        "gradient synchronisation; exposed comm: what a synchronised step takes beyond it "
        "(the communication not hidden behind compute); rest: the step less both (data "
        "waits, the loop; negative where the probe's steps ran slower than the timed ones). "
        "Medians over repetitions, measured after the timed steps.",
        "allreduce and busbw: the communication benchmark of the scale (one step's gradient "
        "in the framework's buckets over its backend; busbw = algbw x 2(n-1)/n, as "
        "nccl-tests define it). predicted step = the 1-device baseline's compute + that "
        "allreduce, none of it hidden; predicted eff = that compute / predicted step.",
    ]
    seen: dict[str, list[str]] = {}
    for r in rows:
        for key in ("compute_time_s", "comm_busbw_gbps", "predicted_efficiency"):
            why = (r.get("unmeasured") or {}).get(key)
            if why and r["ranks"] > 1:
                seen.setdefault(f"{key}: {why}", []).append(
                    f"{r['framework']} {r['nodes']}x{r['ranks_per_node']}"
                )
    notes += [f"not measured, {what} ({', '.join(where)})" for what, where in seen.items()]
    first = headers.index("devices")
    return Table("Where the efficiency goes", headers, body, notes, set(range(first, len(headers))))
