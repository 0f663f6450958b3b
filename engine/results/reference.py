"""Published numbers a study reproduces (examples/studies/*/reference.toml), set next to the
user's own results in the report.

A reference names the paper, then one entry per published number: which result column it
is (the keys of analysis.results), for which framework, model and device count, on what
hardware, and whether the paper gives it exactly or as a bound ("more than 12 h").
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr

from ..config.spec import Number, StrictModel, load_toml_model
from .rows import ResultRow, number

METRICS = {
    "speedup": "x",
    "efficiency": "fraction of ideal",
    "throughput": "images/s",
    "runtime_s": "s (whole run)",
    "time_to_accuracy_s": "s",
}


class Paper(StrictModel):
    title: StrictStr
    authors: StrictStr
    venue: StrictStr
    url: StrictStr = ""


class PublishedNumber(StrictModel):
    metric: Literal[tuple(METRICS)]  # type: ignore[valid-type]
    framework: StrictStr = ""  # "": the paper does not say; the user's best framework is shown
    model: StrictStr
    loader: StrictStr = ""  # "": any loader
    devices: StrictInt = Field(ge=1)
    value: Number
    bound: Literal["=", "<", ">"] = "="
    hardware: StrictStr
    note: StrictStr = ""


class Reference(StrictModel):
    paper: Paper
    numbers: list[PublishedNumber] = Field(min_length=1)


class LoadedReference(BaseModel):
    model_config = ConfigDict(frozen=True)
    path: str
    reference: Reference


def load_reference(path: str | Path) -> LoadedReference:
    _, ref = load_toml_model(path, Reference)
    return LoadedReference(path=str(path), reference=ref)


def beside_spec(spec_path: str | None) -> Path | None:
    """A study keeps reference.toml next to its specs; found there without being named."""
    if not spec_path:
        return None
    candidate = Path(spec_path).expanduser().resolve().parent / "reference.toml"
    return candidate if candidate.is_file() else None


def compare(ref: Reference, rows: list[ResultRow]) -> list[dict[str, Any]]:
    """Each published number with the user's nearest counterpart: the same framework, model
    and device count when measured, else that framework and model at its largest scale
    (a CPU version of a GPU study), so the reader sees both and how far apart they are."""
    out = []
    for n in ref.numbers:
        mine = [
            r
            for r in rows
            if r["model"] == n.model
            and r.get(n.metric) is not None
            and n.framework in ("", r["framework"])
        ]
        # The paper's loader when measured; else the user's (a CPU version has no DALI).
        mine = [r for r in mine if n.loader in ("", r["loader"])] or mine
        same = [r for r in mine if r["ranks"] == n.devices]
        candidates = same or [r for r in mine if r["ranks"] == max(x["ranks"] for x in mine)]
        # The best of the user's frameworks at that scale: least time, most of the rest.
        sign = -1 if n.metric.endswith("_s") else 1
        pick = max(candidates, key=lambda r: sign * (number(r, n.metric) or 0.0), default=None)
        out.append(
            {
                "metric": n.metric,
                "unit": METRICS[n.metric],
                "framework": n.framework or (pick["framework"] if pick else "any"),
                "model": n.model,
                "paper_devices": n.devices,
                "paper_value": n.value,
                "bound": n.bound,
                "hardware": n.hardware,
                "note": n.note,
                "yours": number(pick, n.metric) if pick else None,
                "your_devices": pick["ranks"] if pick else None,
                "your_loader": pick["loader"] if pick else None,
                "same_scale": bool(same),
                "same_loader": pick is not None and n.loader in ("", pick["loader"]),
            }
        )
    return out
