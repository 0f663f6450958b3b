"""Expand a spec into runs, each with a stable id hashed from what determines its result.

With `comm_benchmark = true` a study also gets one communication benchmark run per framework,
model, dataset, scale of 2 or more devices and precision, planned before the training runs:
the trainer's `--comm-benchmark` mode times one step's gradient allreduce (trainers/common/
comm.py). Such a run is marked in its recipe (`comm_benchmark: true`), so its id is its own and
no training run's id changes; specs without the option plan exactly what they always did."""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from functools import cached_property
from pathlib import Path
from typing import Any

from ...trainers.common.flags import KNOBS
from ..config.custom import anchored, comm_declaration
from ..config.frameworks import COMM_BENCHMARK_FRAMEWORKS, NO_COMM_BENCHMARK
from ..config.spec import Experiment, LoadedSpec, Scale, model_fits_dataset
from ..runs import UNDER_WAY, Configuration, State
from .kept_code import SHA_FIELD, sha256_of, with_script_hash


@dataclass(frozen=True)
class Run(Configuration):
    """One repetition of a configuration, with the training recipe it runs."""

    repetition: int
    training: dict[str, Any] = field(hash=False, compare=False)

    def identity(self, with_repetition: bool = True) -> dict[str, Any]:
        d = {name: getattr(self, name) for name in RUN_FIELDS}
        if not with_repetition:
            d.pop("repetition")
        return d

    # Computed once per run: a 10,000-run plan asks for them many times (status, rendering).
    @cached_property
    def run_id(self) -> str:
        """Same parameters, same id: re-running a spec finds its finished runs."""
        return _identity_digest(self.identity())

    @cached_property
    def point_id(self) -> str:
        """The measurement point this run repeats (all repetitions share it)."""
        return _identity_digest(self.identity(with_repetition=False))

    @property
    def comm_benchmark(self) -> bool:
        return bool(self.training.get("comm_benchmark"))

    def label(self) -> str:
        axes = "".join(f" {k}={v}" for k, v in (self.training.get("axes") or {}).items())
        if self.comm_benchmark:
            return (
                f"{self.framework} {self.model} {self.dataset} {self.scale} "
                f"{self.precision} communication benchmark"
            )
        return (
            f"{self.framework} {self.model} {self.dataset} {self.scale} "
            f"b{self.per_device_batch}{axes} {self.precision} #{self.repetition}"
        )


# What a run id hashes: the configuration, the repetition and the recipe. Asked once:
# dataclasses.fields() walks the class at every call, twice per run.
RUN_FIELDS = tuple(f.name for f in fields(Run))


def digest(d: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(d, sort_keys=True, allow_nan=False).encode()).hexdigest()[:12]


_TRAINING_TEXT: dict[int, tuple[dict[str, Any], str]] = {}
_SLOT = "\u0000training\u0000"


def _identity_digest(identity: dict[str, Any]) -> str:
    """digest(identity), with the training recipe's JSON made once per recipe: the runs of
    a plan share a handful of recipe dicts, and dumping them dominated planning. The text
    hashed is exactly digest()'s, so run ids never change."""
    training = identity["training"]
    cached = _TRAINING_TEXT.get(id(training))
    if cached is None or cached[0] is not training:
        if len(_TRAINING_TEXT) > 256:  # a long-lived process (the TUI) plans again and again
            _TRAINING_TEXT.clear()
        named = (
            {**training, "custom": identity_of_declaration(training["custom"])}
            if isinstance(training.get("custom"), dict)
            else training
        )
        cached = _TRAINING_TEXT[id(training)] = (
            training,
            json.dumps(named, sort_keys=True, allow_nan=False),
        )
    text = json.dumps({**identity, "training": _SLOT}, sort_keys=True, allow_nan=False)
    text = text.replace(json.dumps(_SLOT, allow_nan=False), cached[1], 1)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


@dataclass
class Plan:
    runs: list[Run]
    skipped_pairs: list[tuple[str, str]]  # (model, dataset) combinations that do not fit
    notes: list[str] = field(default_factory=list)  # what the spec asked for and is not run

    def against(self, states: Mapping[str, str]) -> Totals:
        """The plan's runs against the store's states (run id -> state)."""
        return Totals(
            to_run=[
                r for r in self.runs if states.get(r.run_id) not in (State.COMPLETED, *UNDER_WAY)
            ],
            active=sum(1 for r in self.runs if states.get(r.run_id) in UNDER_WAY),
            completed=sum(1 for r in self.runs if states.get(r.run_id) == State.COMPLETED),
        )


@dataclass(frozen=True)
class Totals:
    """What submitting a plan would do, as `dlscale plan` and the Build screen both say it:
    the runs to submit (neither completed nor queued, running or being submitted), and those
    left as they are."""

    to_run: list[Run]
    active: int  # queued, running or being submitted already: not submitted again
    completed: int

    @property
    def runs(self) -> int:
        return len(self.to_run) + self.active + self.completed

    @property
    def devices(self) -> int:
        """Devices over the runs to submit, each run's added up."""
        return sum(r.devices for r in self.to_run)

    def words(self) -> str:
        """`7 runs: 4 to run, 2 queued or running (not submitted again), 1 completed earlier;
        6 devices in all (each run's, added up)`."""
        kept = [f"{self.active} queued or running (not submitted again)"] if self.active else []
        runs = f"{self.runs} run{'' if self.runs == 1 else 's'}"
        devices = f"{self.devices} device{'' if self.devices == 1 else 's'}"
        return (
            f"{runs}: {len(self.to_run)} to run, "
            + ", ".join([*kept, f"{self.completed} completed earlier"])
            + f"; {devices} in all (each run's, added up)"
        )


def plan(loaded: LoadedSpec) -> Plan:
    exp, training = loaded.spec.experiment, loaded.spec.training
    # [training] is made of the knobs alone (spec.Training), so each key is one of KNOBS.
    recipe = {
        k: v
        for k, v in training.model_dump().items()
        if v is not None or not KNOBS[k].in_id_when_set
    }
    # One recipe per schedule, made once: runs share them (see _identity_digest). Without
    # lr_schedules the recipe is the spec's own, so run ids stay what they were.
    recipes = (
        [{**recipe, "lr_schedule": s} for s in exp.lr_schedules] if exp.lr_schedules else [recipe]
    )
    runs: list[Run] = []
    comm: list[Run] = []
    skipped: list[tuple[str, str]] = []
    batches = exp.batches
    # Declared frameworks (engine/config/custom.py): their declaration and user axes join
    # their recipes, so editing the command makes new runs.
    declared = {
        fw: declared_recipes(loaded, fw, recipes)
        for fw in exp.frameworks
        if fw in loaded.spec.frameworks
    }
    for model, dataset in itertools.product(exp.models, exp.datasets):
        if not declared and not model_fits_dataset(model, dataset):
            skipped.append((model, dataset))
            continue
        for fw, scale, batch, prec, loader, sched in itertools.product(
            exp.frameworks, exp.scales, batches, exp.precisions, exp.loaders, recipes
        ):
            # Only a framework's options that differ from its defaults join its recipe, so
            # specs without options keep the run ids they always had.
            options = loaded.spec.options_for(fw)
            own = [{**sched, "options": options} if options else sched]
            for fw_recipe in declared[fw][id(sched)] if fw in declared else own:
                runs += [
                    _run(exp, fw, model, dataset, scale, batch, prec, loader, rep, fw_recipe)
                    for rep in range(exp.repetitions)
                ]
        if exp.comm_benchmark:
            comm += _comm_runs(loaded, model, dataset, recipe)
    notes = []
    if exp.comm_benchmark:
        notes = [
            f"communication benchmark: none for {fw}: {NO_COMM_BENCHMARK[fw]}"
            for fw in exp.frameworks
            if fw in NO_COMM_BENCHMARK
        ] + [
            f"communication benchmark: none for {fw}: give its model's parameter count as "
            f"[frameworks.{fw}.comm] parameters = N, and dlscale times that gradient's "
            "allreduce with its launcher and software"
            for fw in exp.frameworks
            if fw in declared and loaded.spec.frameworks[fw].comm is None
        ]
        if all(s.devices == 1 for s in exp.scales):
            notes.append(
                "communication benchmark: none, every scale is one device (nothing to communicate)"
            )
    return Plan(comm + runs, skipped, notes)


def declared_recipes(
    loaded: LoadedSpec, framework: str, recipes: list[dict[str, Any]]
) -> dict[int, list[dict[str, Any]]]:
    """A declared framework's recipes for each schedule's recipe (by its id): one per
    combination of the user's axes' values, each made once and shared by its runs."""
    axes = loaded.spec.experiment.axes
    combos = [dict(zip(axes, values)) for values in itertools.product(*axes.values())]
    # Its script and venv as absolute paths, whichever copy of the spec (a file, the Build
    # screen's form saved beside the store) is submitted.
    folder = Path(loaded.path).absolute().parent
    decl = with_script_hash(
        anchored(
            {"frameworks": {framework: loaded.spec.frameworks[framework].model_dump()}}, folder
        )["frameworks"][framework]
    )
    return {
        id(sched): [{**sched, "custom": decl, **({"axes": a} if a else {})} for a in combos]
        for sched in recipes
    }


def identity_of_declaration(decl: dict[str, Any]) -> dict[str, Any]:
    """What of a declaration (its script made absolute by declared_recipes) makes its runs
    what they are: the script by its content, not by where it lies (the spec's copy in the
    Build screen names it by another path; an edited script makes new runs); where its
    software comes from is the environment's, as for a built-in framework, not the run's."""
    out = {k: v for k, v in decl.items() if k not in ("software", SHA_FIELD)}
    # complete_when at its default is left out, so runs declared before it keep their ids
    if out.get("complete_when") == "exit":
        del out["complete_when"]
    if isinstance(out.get("log"), dict):  # fields added since, at their default: left out
        out["log"] = {
            k: v
            for k, v in out["log"].items()
            if not (k in ("complete_when", "step") and v is None)
        }
    script = out.get("script")
    if isinstance(script, str):
        # the hash the declaration carries (one read of the file gives both the run's id
        # and what kept_code keeps); else read now
        sha = decl.get(SHA_FIELD) or sha256_of(Path(script))
        if sha:  # else refused when the spec was read; kept as written
            out["script"] = f"{Path(script).name}@sha256:{sha}"
    return out


def _run(
    exp: Experiment,
    framework: str,
    model: str,
    dataset: str,
    scale: Scale,
    batch: int,
    precision: str,
    loader: str,
    repetition: int,
    recipe: dict[str, Any],
) -> Run:
    """The run of one value of every axis. `batch` is the spec's: per device (weak
    scaling) or global (strong), which validation makes a whole multiple of the devices."""
    per_device = batch if exp.scaling == "weak" else batch // scale.devices
    return Run(
        experiment=exp.name,
        framework=framework,
        model=model,
        dataset=dataset,
        nodes=scale.nodes,
        ranks_per_node=scale.ranks_per_node,
        per_device_batch=per_device,
        global_batch=per_device * scale.devices,
        scaling=exp.scaling,
        precision=precision,
        loader=loader,
        repetition=repetition,
        training=recipe,
    )


def _comm_runs(loaded: LoadedSpec, model: str, dataset: str, recipe: dict[str, Any]) -> list[Run]:
    """One benchmark per framework, scale of 2+ devices and precision: the allreduce depends
    on the model and its classes (the gradient), the scale and the framework's options
    (Horovod's fp16 compression), not on the batch, the loader, the lr schedule or a
    declared framework's axis values."""
    exp = loaded.spec.experiment
    batch = exp.batches[0]
    out = []
    for fw in exp.frameworks:
        marked = _comm_recipe(loaded, fw, recipe)
        if marked is None:
            continue
        for scale, prec in itertools.product(exp.scales, exp.precisions):
            if scale.devices > 1:
                out.append(
                    _run(exp, fw, model, dataset, scale, batch, prec, exp.loaders[0], 0, marked)
                )
    return out


def _comm_recipe(loaded: LoadedSpec, fw: str, recipe: dict[str, Any]) -> dict[str, Any] | None:
    """The recipe of a framework's benchmark runs, marked as such; None where it has none:
    a built-in framework without a benchmark, or a declared one that gives no model size
    (its benchmark is custom.comm_declaration's)."""
    decl = loaded.spec.frameworks.get(fw)
    if decl is not None:
        if decl.comm is None:
            return None
        custom = declared_recipes(loaded, fw, [recipe])[id(recipe)][0]["custom"]
        return {**recipe, "custom": comm_declaration(custom), "comm_benchmark": True}
    if fw not in COMM_BENCHMARK_FRAMEWORKS:
        return None
    options = loaded.spec.options_for(fw)
    return {**recipe, **({"options": options} if options else {}), "comm_benchmark": True}
