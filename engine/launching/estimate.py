"""How long a plan will take, from this store's own history (never from a guess).

A run's time is taken from a completed run of the same configuration (framework, model,
dataset, scale, batch, precision, training recipe) in any experiment; runs with no such
history are counted and named as unknown rather than given an invented number.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from ..runs import State
from ..tracking.store import Store
from .plan import Run


def _config_key(
    framework, model, dataset, nodes, rpn, batch, precision, loader, training: str
) -> tuple:
    return (framework, model, dataset, nodes, rpn, batch, precision, loader, training)


@dataclass
class Estimate:
    per_run: dict[str, float] = field(default_factory=dict)  # run id -> wall seconds

    def text(self, runs: list[Run]) -> str:
        known = [r for r in runs if r.run_id in self.per_run]
        unknown = len(runs) - len(known)
        if not runs:
            return "nothing to run"
        if not known:
            return (
                f"time unknown: none of these {len(runs)} runs has been measured here "
                "before (an estimate comes from a completed run of the same setup)"
            )
        hours = sum(self.per_run[r.run_id] * r.devices for r in known) / 3600
        wall = sum(self.per_run[r.run_id] for r in known) / 60
        msg = f"estimated {hours:.3f} device-hours, {wall:.1f} min of wall time"
        if unknown:
            msg += (
                f" for {len(known)} runs; {unknown} run(s) were never measured here with the "
                "same setup, so their time is unknown"
            )
        return msg + " (from measured runs in this store)"


def estimate(store: Store, runs: list[Run]) -> Estimate:
    history: dict[tuple, list[float]] = {}
    durations = {}
    completed = store.runs(states=(State.COMPLETED,))
    for backend in {r["backend"] for r in completed if r["backend"]}:
        for j in store.jobs.find(backend, states=(State.COMPLETED,)):
            # Slurm's own elapsed time where the watcher kept it, else start to end
            if j["elapsed"]:
                durations[j["run_id"]] = j["elapsed"]
            elif j["started"] and j["ended"]:
                durations[j["run_id"]] = j["ended"] - j["started"]
    for r in completed:
        if r["run_id"] in durations:
            key = _config_key(
                r["framework"],
                r["model"],
                r["dataset"],
                r["nodes"],
                r["ranks_per_node"],
                r["per_device_batch"],
                r["precision"],
                r["loader"],
                r["training"],
            )
            history.setdefault(key, []).append(durations[r["run_id"]])
    est = Estimate()
    if not history:
        return est
    recipes: dict[int, str] = {}  # a plan's runs share a few recipe dicts: dump each once
    for run in runs:
        recipe = recipes.get(id(run.training))
        if recipe is None:
            recipe = recipes[id(run.training)] = json.dumps(
                run.training, sort_keys=True, allow_nan=False
            )
        key = _config_key(
            run.framework,
            run.model,
            run.dataset,
            run.nodes,
            run.ranks_per_node,
            run.per_device_batch,
            run.precision,
            run.loader,
            recipe,
        )
        if key in history:
            est.per_run[run.run_id] = sum(history[key]) / len(history[key])
    return est
