"""`dlscale plan`'s views of a plan: grouped by framework x model x scale (the default, readable
at 10,000 runs), one row per run (--all), or JSON for scripts."""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from functools import cached_property

from rich.table import Table

from ..config.spec import LoadedSpec
from ..launching.estimate import Estimate
from ..launching.plan import Plan, Run, Totals
from ..results.formatting import fmt
from ..runs import scale_label


@dataclass
class PlanView:
    loaded: LoadedSpec
    plan: Plan
    estimate: Estimate
    known: dict[str, str]  # run id -> state, for runs the store has

    def state(self, run: Run) -> str:
        return self.known.get(run.run_id, "new")

    @cached_property
    def totals(self) -> Totals:
        """What `dlscale run` would submit (not completed, queued or running) and leave."""
        return self.plan.against(self.known)

    @property
    def todo(self) -> list[Run]:
        return self.totals.to_run

    def _title(self) -> str:
        return f"Plan of {self.loaded.spec.experiment.name} ({self.loaded.path})"

    def summary_table(self) -> Table:
        to_run = {r.run_id for r in self.todo}  # the totals line's, group by group
        groups: dict[tuple, list[Run]] = defaultdict(list)
        for r in self.plan.runs:
            groups[(r.framework, r.model, r.dataset, r.nodes, r.ranks_per_node)].append(r)
        t = Table(title=self._title(), title_justify="left")
        for col in (
            "framework",
            "model",
            "dataset",
            "scale",
            "devices",
            "runs",
            "to run",
            "devices in all",
            "est. device-hours",
        ):
            t.add_column(
                col,
                justify="right"
                if col in ("devices", "runs", "to run", "devices in all", "est. device-hours")
                else "left",
            )
        for (fw, model, dataset, nodes, rpn), runs in groups.items():
            todo = [r for r in runs if r.run_id in to_run]
            t.add_row(
                fw,
                model,
                dataset,
                scale_label(nodes, rpn),
                str(nodes * rpn),
                str(len(runs)),
                str(len(todo)),
                str(sum(r.devices for r in todo)),
                fmt(self._hours(todo), 3),
            )
        return t

    def runs_table(self) -> Table:
        t = Table(title=self._title(), title_justify="left")
        for col in (
            "run",
            "framework",
            "model",
            "dataset",
            "scale",
            "devices",
            "batch/dev",
            "precision",
            "rep",
            "state",
            "est. minutes",
        ):
            t.add_column(col)
        for run in self.plan.runs:
            secs = self.estimate.per_run.get(run.run_id)
            t.add_row(
                run.run_id,
                run.framework,
                run.model,
                run.dataset,
                run.scale,
                str(run.devices),
                str(run.per_device_batch),
                run.precision,
                str(run.repetition),
                self.state(run),
                fmt(secs / 60 if secs else None, 1),
            )
        return t

    def _hours(self, runs: list[Run]) -> float | None:
        """Device-hours of the runs whose time the store knows (None if it knows none)."""
        known = [r for r in runs if r.run_id in self.estimate.per_run]
        if not known:
            return None
        return sum(self.estimate.per_run[r.run_id] * r.devices for r in known) / 3600

    def totals_line(self) -> str:
        return f"{self.totals.words()}; {self.estimate.text(self.todo)}"

    def json(self, refusals: str = "") -> str:
        runs = [
            {
                "run_id": r.run_id,
                "framework": r.framework,
                "model": r.model,
                "dataset": r.dataset,
                "nodes": r.nodes,
                "ranks_per_node": r.ranks_per_node,
                "devices": r.devices,
                "per_device_batch": r.per_device_batch,
                "global_batch": r.global_batch,
                "scaling": r.scaling,
                "precision": r.precision,
                "loader": r.loader,
                "repetition": r.repetition,
                "state": self.state(r),
                "est_seconds": self.estimate.per_run.get(r.run_id),
            }
            for r in self.plan.runs
        ]
        todo = self.todo
        return json.dumps(
            {
                "experiment": self.loaded.spec.experiment.name,
                "spec": self.loaded.path,
                "runs": runs,
                "skipped": [list(pair) for pair in self.plan.skipped_pairs],
                "totals": {
                    "runs": len(runs),
                    "to_run": len(todo),
                    "active": self.totals.active,
                    "device_runs": sum(r.devices for r in todo),
                    "est_device_hours": self._hours(todo),
                },
                "refused": refusals.splitlines(),
            },
            indent=1,
            allow_nan=False,
        )
