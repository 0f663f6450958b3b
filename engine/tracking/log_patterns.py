"""Zero-change reporting: a declared framework's log patterns (engine/config/custom.py)
turned into the records the built-in trainers write, so its runs get the same throughput,
CI95, speedup and efficiency.

When a declared framework's job ends well (or after its measurement was complete:
completion.py), its log is read once, line by line: warm-up lines are left out (those
before `warmup_until` first matches, then the first `warmup_lines` measurements), each
remaining throughput or step-time line is one interval, and the run's throughput is the
total units over the total time of its measured lines: each line covers one step, or with a
`step` pattern the steps since the line before (a log that prints every N steps), and its
time is those steps' units over its rate (or its steps times its step time). A log that
matched nothing leaves no summary: the run is FAILED saying so, never COMPLETED without a
number.
"""

from __future__ import annotations

import json
import re
import socket
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...trainers.common.entry import dlscale_version
from ...trainers.common.records import RecordWriter
from ..io.text import quoted
from ..paths import RunPaths
from ..runs import RunRow
from . import custom_software


@dataclass
class Measured:
    """What a log's lines gave: one (rate in units a second, loss, epoch) per measured
    line, the warm-up ones apart, and accuracies as (measured lines so far, epoch, top1)."""

    rates: list[tuple[float, float | None, int | None]] = field(default_factory=list)
    warmup: list[tuple[float, float | None, int | None]] = field(default_factory=list)
    accuracies: list[tuple[int, int, float]] = field(default_factory=list)
    step_times: list[float] = field(default_factory=list)
    # The steps each measured line covers: 1 each, or from the step numbers the log
    # reports (its `step` pattern), the gap to the line before.
    covered: list[int] = field(default_factory=list)
    # Where in the log the last measured line ends (bytes, as its text re-encodes): the
    # meter's log-size samples date it, and with it the end of the timed steps.
    end_offset: int = 0


def _number(match: re.Match[str]) -> float | None:
    text = match.group("value") if "value" in match.re.groupindex else match.group(1)
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


class Patterns:
    """A declaration's `log` table, compiled once, applied to a run's lines."""

    def __init__(self, log: dict[str, Any], units_per_step: float, devices: int) -> None:
        self.log = log
        self.measure = re.compile(log.get("throughput") or log["step_time"])
        self.by_time = log.get("throughput") is None
        self.scale = devices if log.get("throughput_per") == "device" else 1
        self.ms = log.get("step_time_unit") == "ms"
        self.units_per_step = units_per_step
        self.others = {
            k: re.compile(log[k]) for k in ("loss", "accuracy", "epoch") if log.get(k) is not None
        }
        self.until = re.compile(log["warmup_until"]) if log.get("warmup_until") else None
        self.step = re.compile(log["step"]) if log.get("step") else None

    def read(self, lines: Iterable[str]) -> Measured:
        out = Measured()
        started = self.until is None
        loss: float | None = None
        epoch: int | None = None
        skip = int(self.log.get("warmup_lines") or 0)
        offset = 0
        step: int | None = None  # the last step number the log reported
        # where the first measured line's steps start: the step of the last warm-up
        # measurement, or where warm-up ended, or the start
        base = 0
        numbers: list[int | None] = []  # at each measured line
        for line in lines:
            offset += len(line.encode("utf-8", "replace"))
            if self.step is not None and (found := self.step.search(line)):
                number = _number(found)
                step = int(number) if number is not None else step
            if not started:
                started = self.until.search(line) is not None  # type: ignore[union-attr]
                base = step or 0
                continue
            for name, pattern in self.others.items():
                m = pattern.search(line)
                value = _number(m) if m else None
                if value is None:
                    continue
                if name == "loss":
                    loss = value
                elif name == "epoch":
                    epoch = int(value)
                else:  # a percentage above 1
                    top1 = value / 100 if value > 1 else value
                    out.accuracies.append((len(out.rates), epoch or 0, min(1.0, top1)))
            m = self.measure.search(line)
            value = _number(m) if m else None
            if value is None or value <= 0:
                continue
            if self.by_time:
                seconds = value / 1000 if self.ms else value
                rate = self.units_per_step / seconds
            else:
                rate, seconds = value * self.scale, 0.0
            if skip > 0:
                skip -= 1
                out.warmup.append((rate, loss, epoch))
                base = step or 0
                continue
            out.rates.append((rate, loss, epoch))
            numbers.append(step)
            out.end_offset = offset
            if self.by_time:
                out.step_times.append(seconds)
        out.covered = _covered(numbers, base) if self.step else [1] * len(out.rates)
        return out

    def seconds(self, m: Measured) -> list[float]:
        """Each measured line's seconds: its steps' units over its rate."""
        return [n * self.units_per_step / r for n, (r, _, _) in zip(m.covered, m.rates)]

    def summarize(self, m: Measured) -> tuple[float, float] | None:
        """(throughput, seconds measured), or None when no line measured anything: the
        units of every measured step over their time (the harmonic mean of the lines'
        rates, each weighted by the steps it covers)."""
        if not m.rates:
            return None
        elapsed = sum(self.seconds(m))
        return self.units_per_step * sum(m.covered) / elapsed, elapsed


def _covered(numbers: list[int | None], base: int) -> list[int]:
    """The steps each measured line covers, from the step numbers the log reported at each:
    the gap to the line before (the first line's, to `base`). One whose gap is unknown or
    not forward (a restart, a log counting from 0) covers the median gap."""
    gaps: list[int | None] = []
    last: int | None = base
    for n in numbers:
        gaps.append(n - last if n is not None and last is not None and n > last else None)
        last = n if n is not None else last
    known = sorted(g for g in gaps if g)
    typical = known[len(known) // 2] if known else 1
    return [g or typical for g in gaps]


def units_per_step(log: dict[str, Any], row: RunRow, training: dict[str, Any]) -> float:
    """The product of the declaration's units_per_step, placeholders filled from the run."""
    values = {
        "nodes": row["nodes"],
        "ranks_per_node": row["ranks_per_node"],
        "devices": row["nodes"] * row["ranks_per_node"],
        "per_device_batch": row["per_device_batch"],
        "global_batch": row["global_batch"],
        "steps": training.get("steps"),
        "warmup_steps": training.get("warmup_steps"),
        **(training.get("axes") or {}),
    }
    product = 1.0
    for text in log.get("units_per_step") or ["{global_batch}"]:
        filled = text.format_map(values)
        try:
            product *= float(filled)
        except ValueError:
            raise ValueError(f"units_per_step {text!r} is {filled!r}, not a number") from None
    return product


def run_device(row: RunRow, paths: RunPaths) -> str:
    """What the run trained on, as the job was made: a Slurm job script asks for GPUs by
    type (the type's name) or not ("cpu"); the local backend's are this machine's."""
    try:
        script = paths.job_script.read_text(errors="replace")
    except OSError:
        script = ""
    m = re.search(r"^#SBATCH --gpus-per-node=(?:([^:\s]+):)?\d+", script, re.M)
    if m:
        return m[1] or "gpu"
    if row.get("backend") == "local":
        from ..launching.gpus import local_device  # noqa: PLC0415  (nvidia-smi, once)

        return "cpu" if local_device() == "cpu" else "gpu"
    return "cpu"


def settle(row: RunRow, hosts: str | None = None) -> str | None:
    """For a declared framework with log patterns whose job ended well (or whose log says
    its measurement was complete, completion.py): write its records from its log. Returns
    why the run measured nothing (it is then FAILED), else None."""
    training = json.loads(row["training"]) if isinstance(row["training"], str) else row["training"]
    decl = training.get("custom") if isinstance(training, dict) else None
    if not isinstance(decl, dict) or not decl.get("log"):
        return None
    paths = RunPaths.of(row)
    if has_summary(paths.metrics):
        return None  # settled already (a second look at the same run)
    log = decl["log"]
    try:
        patterns = Patterns(log, units_per_step(log, row, training), row["devices"])
        with open(paths.log, encoding="utf-8", errors="replace") as fh:
            measured = patterns.read(fh)
    except (OSError, ValueError, KeyError) as exc:
        return f"its log could not be read for its patterns: {exc}"
    total = patterns.summarize(measured)
    which = "throughput" if log.get("throughput") else "step_time"
    if total is None:
        return (
            f"its log matched no {which} pattern ({quoted(log[which])})"
            + (" after the warm-up" if measured.warmup or log.get("warmup_until") else "")
            + f": no throughput was measured (frameworks.{row['framework']}.log.{which})"
        )
    software = custom_software.versions(paths)
    write(paths.metrics, row, training, measured, patterns, run_device(row, paths), hosts, software)
    return None


def has_summary(path: Path) -> bool:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return any('"kind": "summary"' in line for line in fh)
    except OSError:
        return False


def write(
    path: Path,
    row: RunRow,
    training: dict[str, Any],
    m: Measured,
    patterns: Patterns,
    device: str,
    hosts: str | None,
    software: dict[str, str] | None = None,
) -> None:
    """The records a built-in trainer writes, from what the log gave; `software`: what its
    interpreter held (custom_software.py)."""
    world = row["devices"]
    total = patterns.summarize(m)
    assert total is not None  # settle writes only what measured something
    throughput, elapsed = total
    unit = training["custom"].get("unit", "samples")
    with RecordWriter(str(path), flush_each=False) as out:
        out.write(
            "params",
            framework=row["framework"],
            model=row["model"],
            dataset=row["dataset"],
            per_device_batch=row["per_device_batch"],
            global_batch=row["global_batch"],
            world_size=world,
            precision=row["precision"],
            run_id=row["run_id"],
            steps=training.get("steps"),
            warmup_steps=len(m.warmup),
            unit=unit,
            axes=training.get("axes") or {},
            reported_by="log patterns",
        )
        names = (hosts or socket.gethostname()).split(",")
        out.write(
            "env",
            framework_versions=software or {},
            hostnames=names,
            devices=[device] * world,
            world_size=world,
            dlscale_version=dlscale_version(),
            launcher=training["custom"].get("launcher"),
        )
        step = 0
        for warm, lines in ((True, m.warmup), (False, m.rates)):
            for rate, loss, epoch in lines:
                step += 1
                out.write(
                    "interval",
                    step=step,
                    images_per_s=rate,
                    loss=loss,
                    epoch=epoch,
                    includes_warmup=warm,
                )
        took = patterns.seconds(m)
        for measured, epoch, top1 in m.accuracies:
            seconds = sum(took[:measured])
            out.write("eval", step=measured, epoch=epoch, top1=top1, elapsed_s=seconds)
        best = max((a for _, _, a in m.accuracies), default=None)
        final_loss = next((loss for _, loss, _ in reversed(m.rates) if loss is not None), None)
        out.write(
            "summary",
            status="completed",
            throughput=throughput,
            throughput_per_device=throughput / world,
            timed_steps=sum(m.covered),
            warmup_steps=len(m.warmup),
            elapsed_s=elapsed,
            best_top1=best,
            final_loss=final_loss,
            unit=unit,
            log_measured_until_byte=m.end_offset,
        )
