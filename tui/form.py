"""The Build screen's form: its fields, lists and titles, and how their text reads."""

from __future__ import annotations

import re
from typing import Any

# form widget id -> the spec field it edits (problems are reported against these)
FIELDS = {
    "name": "experiment.name",
    "frameworks": "experiment.frameworks",
    "models": "experiment.models",
    "datasets": "experiment.datasets",
    "scales": "experiment.scales",
    "batch": "experiment.per_device_batch",
    "precisions": "experiment.precisions",
    "loaders": "experiment.loaders",
    "repetitions": "experiment.repetitions",
    "steps": "training.steps",
}

# Spec fields the form has no field of its own for, and the field whose value a user
# changes to fix them (the warm-up must be shorter than the timed steps).
SHOWN_AT = {"experiment.global_batch": "batch", "training.warmup_steps": "steps"}


def field_of(spec_field: str) -> str | None:
    """The form's field a problem with `spec_field` is shown at (None: the panel's list)."""
    return SHOWN_AT.get(spec_field) or next((w for w, f in FIELDS.items() if f == spec_field), None)


LISTS = ("frameworks", "models", "datasets", "precisions", "loaders")


TITLES = {
    "name": "Experiment name",
    "frameworks": "Frameworks",
    "models": "Models",
    "datasets": "Datasets",
    "scales": "Scales (nodes x ranks per node)",
    "batch": "Batch per device",
    "precisions": "Precision",
    "loaders": "Data loader",
    "repetitions": "Repetitions",
    "steps": "Timed steps per run",
    "path": "Spec file",
    "profile": "Cluster profile (Slurm)",
}


def split_words(text: str) -> list[str]:
    return [w for w in re.split(r"[,\s]+", text.strip()) if w]


def as_list(v: Any) -> list[Any]:
    return v if isinstance(v, list) else [v] if v not in (None, "") else []
