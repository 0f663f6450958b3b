"""Cooperative reporting for your own training script: the records dlscale's built-in
trainers write (params, env, intervals, evaluations, summary), written by yours.

Standard library only, and nothing of dlscale's engine: in every run dlscale starts for a
declared framework (docs/custom.md) this module is importable as `dlscale.trainers.report`,
whatever environment the script runs in; the format it writes is specified in
docs/custom.md, so a script in any language can write it instead.

    from dlscale.trainers.report import Reporter

    report = Reporter()          # the run's facts and file from the job's variables
    report.start(devices=["cpu"] * world, framework_versions={"torch": torch.__version__})
    for step in ...:
        report.interval(step, units_per_s, loss, warmup=step < warmup_steps)
    report.summary(throughput, timed_steps, warmup_steps, elapsed_s)

Only rank 0 writes (the rank from RANK, SLURM_PROCID, OMPI_COMM_WORLD_RANK or PMI_RANK);
outside a dlscale run (no DLSCALE_METRICS) nothing is written, so the script runs as ever.
"""

from __future__ import annotations

import json
import os
import socket
from typing import Any

from .common.records import RecordWriter, version_names

RUN_VAR = "DLSCALE_RUN"  # the run's facts as JSON: what its params record holds
METRICS_VAR = "DLSCALE_METRICS"  # the records' file
_RANK_VARS = ("RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK")


def rank() -> int:
    """This process's global rank, from whichever launcher started it; 0 alone."""
    for name in _RANK_VARS:
        if os.environ.get(name, "").isdigit():
            return int(os.environ[name])
    return 0


class Reporter:
    """Writes one run's records; everything but rank 0's calls is a no-op."""

    def __init__(self, path: str | None = None, facts: dict[str, Any] | None = None) -> None:
        self.facts = facts if facts is not None else json.loads(os.environ.get(RUN_VAR, "{}"))
        path = path or os.environ.get(METRICS_VAR)
        self.enabled = bool(path) and rank() == 0
        self._writer = RecordWriter(path, enabled=self.enabled)

    def start(
        self,
        devices: list[str] | None = None,
        framework_versions: dict[str, str] | None = None,
        hostnames: list[str] | None = None,
        **params: Any,
    ) -> None:
        """The params and env records: the run's facts from dlscale (framework, model,
        batch, world size...) updated by `params`; `devices` one per rank ("cpu", or the
        GPU's name, as torch.cuda.get_device_name says it)."""
        world = int(params.get("world_size") or self.facts.get("world_size") or 1)
        fields = {
            "framework": "custom",
            "model": "custom",
            "dataset": "custom",
            "per_device_batch": 0,
            **{k: v for k, v in self.facts.items() if v is not None},
            "world_size": world,
            **params,
        }
        self._writer.write("params", **fields)
        self._writer.write(
            "env",
            framework_versions=version_names(framework_versions or {}),
            hostnames=hostnames or [socket.gethostname()],
            devices=devices or ["cpu"] * world,
            world_size=world,
            dlscale_version=str(self.facts.get("dlscale_version", "unknown")),
            launcher=os.environ.get("DLSCALE_LAUNCHER"),
        )

    def interval(
        self,
        step: int,
        units_per_s: float,
        loss: float | None = None,
        epoch: int | None = None,
        warmup: bool = False,
        **more: Any,
    ) -> None:
        """Throughput over the steps since the last interval, in the run's unit a second
        (all ranks together); `warmup` marks steps left out of the measurement."""
        self._writer.write(
            "interval",
            step=step,
            images_per_s=units_per_s,
            loss=loss,
            epoch=epoch,
            includes_warmup=warmup,
            **more,
        )

    def evaluation(self, step: int, epoch: int, top1: float, elapsed_s: float) -> None:
        """Accuracy (a fraction) after `elapsed_s` seconds of training: time-to-accuracy."""
        self._writer.write("eval", step=step, epoch=epoch, top1=top1, elapsed_s=elapsed_s)

    def summary(
        self,
        throughput: float,
        timed_steps: int,
        warmup_steps: int,
        elapsed_s: float,
        status: str = "completed",
        **more: Any,
    ) -> None:
        """The run's measurement: units a second over the timed steps (all ranks), the
        steps timed and left out, and the seconds timed. A run without one is FAILED."""
        world = int(self.facts.get("world_size") or 1)
        self._writer.write(
            "summary",
            status=status,
            throughput=throughput,
            throughput_per_device=throughput / world,
            timed_steps=timed_steps,
            warmup_steps=warmup_steps,
            elapsed_s=elapsed_s,
            **more,
        )
        self.close()

    def close(self) -> None:
        self._writer.close()
