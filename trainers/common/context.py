"""A run as every trainer starts it: who this rank is, the cores it owns, the recipe the shared
loop follows, and the records every framework writes alike (env, the summary, the closing
line)."""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import os
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import data as common_data
from .args import TOKEN_DATASETS, fault_step, recipe_fields
from .energy import Meter, Reading, summary_fields
from .entry import TrainerError, dlscale_version
from .launch_env import LaunchEnv, bind_cpus, cpu_model, detect, local_world_size, node_name
from .loop import Loop, Recipe, write_summary
from .records import RecordWriter, version_names
from .schedule import LRPlan, scaled_lr


@dataclass
class Context:
    """One rank's run: its flags, its place in the job and its records."""

    prog: str
    framework: str
    args: argparse.Namespace
    launch: LaunchEnv  # a world of one is "single": no process group, no wrapper
    launched_by: str  # the launcher that started the job, as it was
    cores: list[int] | None  # the cores this rank was pinned to, if it was
    writer: RecordWriter | None = None
    meter: Meter | None = None

    @property
    def world(self) -> int:
        return self.launch.world_size

    @property
    def rank(self) -> int:
        return self.launch.rank

    @property
    def global_batch(self) -> int:
        return self.args.per_device_batch * self.launch.world_size

    def open_records(self) -> RecordWriter:
        """Only rank 0 writes; the others get a writer that writes nothing."""
        self.writer = RecordWriter(self.args.output, enabled=self.launch.rank == 0)
        return self.writer

    def close_records(self) -> None:
        if self.writer is not None:
            self.writer.close()

    def recipe(
        self,
        total_steps: int,
        steps_per_epoch: int | None,
        unit: str = "images",
        sample_units: int = 1,
    ) -> Recipe:
        """The learning-rate plan (scaled to the global batch, linear warm-up) and the loop's
        length, the same in every framework; `unit`: what throughput counts (a transformer's
        tokens, `sample_units` to a sequence)."""
        a = self.args
        peak = scaled_lr(a.lr, a.lr_base_batch, self.global_batch, a.lr_scaling)
        plan = LRPlan(
            a.lr, peak, int(a.lr_warmup_epochs * (steps_per_epoch or 0)), total_steps, a.lr_schedule
        )
        return Recipe.from_args(
            a,
            total_steps=total_steps,
            global_batch=self.global_batch,
            plan=plan,
            crash_at=fault_step(a.inject_fault),
            unit=unit,
            sample_units=sample_units,
        )

    def total_steps(self, steps_per_epoch: int | None) -> int:
        a = self.args
        if a.epochs:
            assert steps_per_epoch is not None
            return steps_per_epoch * a.epochs
        return a.warmup_steps + a.steps

    def open_meter(self, gpu: Any = None) -> Meter:
        """Energy over the timed steps: this rank's GPU, or the node's CPU packages (metered
        by the node's first rank, whose package the others share)."""
        self.meter = Meter(gpu, first_on_node=self.launch.local_rank == 0)
        return self.meter

    def energy(self, gather: Callable[[Any], list[Any]], images: int) -> dict[str, Any]:
        """The summary's energy fields, from every rank's reading."""
        assert self.meter is not None
        r = self.meter.reading()
        readings = gather([r.energy_j, r.seconds, r.util, r.failed])
        return summary_fields([Reading(*x) for x in readings], images)

    def write_array_params(
        self,
        recipe: Recipe,
        data: Any,
        parameters: int,
        precision: str,
        cuda: bool,
        own: dict[str, Any],
        **extra: Any,
    ) -> None:
        """The params record of the trainers that read arrays (common.arrays: TensorFlow,
        MXNet), all in one order: the run, the model's size and precision, `own` (the
        framework's precision and layout settings), the data and the recipe, then `extra`."""
        assert self.writer is not None
        self.writer.write(
            "params",
            framework=self.framework,
            world_size=self.world,
            global_batch=self.global_batch,
            parameters=parameters,
            precision=precision,
            tf32=precision == "tf32",
            **own,
            total_steps=recipe.total_steps,
            steps_per_epoch=data.steps_per_epoch,
            train_images=data.train_images,
            eval_images=data.eval_images,
            lr_scaled=recipe.plan.scaled_lr,
            device="cuda" if cuda else "cpu",
            distributed=self.launch.distributed,
            **recipe_fields(self.args),
            **extra,
        )

    def write_env(
        self,
        versions: dict[str, Any],
        gather: Callable[[Any], list[Any]],
        device: str | None = None,
        backend: str | None = None,
        **extra: Any,
    ) -> None:
        """The env record: versions, where every rank ran and on what (gathered to rank 0),
        and what energy could be read there (or why not)."""
        assert self.writer is not None
        if self.meter is not None:
            extra = {
                "energy_source": self.meter.source,
                "energy_unavailable": self.meter.unavailable,
                **extra,
            }
        device = device or f"cpu: {cpu_model()} ({self.args.threads} thread(s))"
        hosts = gather(node_name())
        self.writer.write(
            "env",
            framework_versions=version_names({"python": sys.version.split()[0], **versions}),
            hostnames=hosts,
            devices=gather(device),
            world_size=self.world,
            dlscale_version=dlscale_version(),
            launcher=self.launched_by,
            backend=backend if self.launch.distributed else None,
            job_id=slurm_job_id(),
            nodes=sorted(set(hosts)),
            omp_num_threads=os.environ.get("OMP_NUM_THREADS"),
            cpu_affinity=gather(self.cores),
            **extra,
        )

    def progress(self, line: str) -> None:
        """A human line in the run log while it trains (`dlscale logs -f`, the TUI)."""
        if self.launch.rank == 0:
            print(f"{self.prog}: {line}", flush=True)

    def finish(
        self,
        recipe: Recipe,
        loop: Loop,
        digest: str,
        gather: Callable[[Any], list[Any]],
        barrier: Callable[[], None],
        after_readings: Callable[[], dict[str, Any]] | None = None,
        **extra: Any,
    ) -> float:
        """The end of a run, the same in every framework: every rank's weights digest and
        energy reading gathered, then what the framework measures past the timed steps
        (`after_readings`: they step the model further), the summary record with `extra`
        (what the framework observed itself), the run log's closing line, and the ranks
        leaving together. Returns the throughput."""
        assert self.writer is not None
        digests = gather(digest)
        energy = self.energy(
            gather, loop.timed_steps(self.args.warmup_steps) * recipe.units_per_step
        )
        measured = after_readings() if after_readings is not None else {}
        throughput = write_summary(
            self.writer, recipe, loop, self.world, digests, **extra, **energy, **measured
        )
        self.say_done(throughput, loop, recipe.unit)
        barrier()
        return throughput

    def say_done(self, throughput: float, loop: Loop, unit: str = "images") -> None:
        """The run log's closing line (rank 0)."""
        if self.launch.rank != 0:
            return
        timed = loop.timed_steps(self.args.warmup_steps)
        print(
            f"{self.prog}: {self.args.model} x{self.world} {throughput:.1f} {unit}/s over "
            f"{timed} timed steps"
            + (f", top-1 {loop.best_top1:.3f}" if loop.best_top1 is not None else "")
            + (f", time-to-accuracy {loop.tta:.1f} s" if loop.tta is not None else ""),
            flush=True,
        )


def weights_digest(named: Iterable[tuple[str, Any]]) -> str:
    """16 hex digits of SHA-256 over (name, values as float32) pairs, in the order given:
    equal on every rank exactly when the ranks ended with the same weights."""
    h = hashlib.sha256()
    for name, values in named:
        h.update(name.encode())
        h.update(np.ascontiguousarray(values, np.float32).tobytes())
    return h.hexdigest()[:16]


def start(prog: str, framework: str, args: argparse.Namespace, *, on_cpu: bool) -> Context:
    """What every trainer does first: read the launcher, refuse a recipe the data cannot
    take, and on CPU pin the rank to cores of its own (inside a Slurm job binding is
    Slurm's: it knows the allocation, a rank only its own node)."""
    launch = detect()
    fault_step(args.inject_fault)  # a malformed fault is a usage error before any work
    if args.dataset in (*common_data.SYNTHETIC, *TOKEN_DATASETS) and args.epochs:
        raise TrainerError(f"{args.dataset} has no epochs; give --steps")
    launched_by = launch.launcher
    if launch.world_size == 1:
        launch = dataclasses.replace(launch, launcher="single")
    cores = None
    if on_cpu and args.cpu_bind == "auto" and "SLURM_JOB_ID" not in os.environ:
        cores = bind_cpus(launch.local_rank, local_world_size(), args.threads)
    return Context(prog, framework, args, launch, launched_by, cores)


def slurm_job_id() -> str | None:
    """The job as dlscale tracks it: `ARRAYID_TASK` for a task of a job array (the id
    sacct, squeue and scancel take for it), else Slurm's job id."""
    array, task = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
    if array and task:
        return f"{array}_{task}"
    return os.environ.get("SLURM_JOB_ID")
