"""Figures a user states instead of measuring them (`dlscale project --throughput ...`):
per-device throughput at one or more per-device batches, the gradient (a named model, or a
parameter count and dtype), the links per tier, the model's terms; and how each of the
model's terms is chosen: measured where dlscale has a measurement, else stated, else the
calibrated default, every one saying which."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ....trainers.common import comm
from . import calibration, commfit, scaling_model, strategies
from .commfit import INTER, INTRA, Link
from .projected import Mean, Setup

MEASURED, STATED, DEFAULT = "measured", "stated", "default"
JITTER, OVERHEAD, OVERLAP = "jitter", "overhead", "overlap"


def gradient_buckets(total_bytes: int) -> list[int]:
    """One step's gradient in DDP's buckets (1 MiB, then 25 MiB each): what the comm
    benchmark allreduces for a model it did not time."""
    first, size = comm.DDP_FIRST_BUCKET_BYTES, comm.DDP_BUCKET_BYTES
    if total_bytes <= first:
        return [int(total_bytes)]
    rest = total_bytes - first
    return [first] + [size] * (rest // size) + ([rest % size] if rest % size else [])


def named_parameters(model: str) -> tuple[int, str] | None:
    """A named model's parameter count and where it is from, or None."""
    got = calibration.gradients().get(model)
    return (got.parameters, got.where) if got else None


def mb(nbytes: float) -> str:
    return f"{nbytes / 1e6:,.1f} MB"


@dataclass
class Choice:
    """One term of the model: its value and where it came from, in words."""

    value: float
    kind: str  # MEASURED, STATED or DEFAULT
    how: str


def choose(
    cal: calibration.Calibration,
    measured: dict[str, Choice] | None = None,
    stated: dict[str, float | None] | None = None,
) -> scaling_model.Terms:
    """The model's terms: measured, else stated, else the calibrated default; the sources
    say which."""
    defaults = {JITTER: cal.jitter_cv, OVERHEAD: cal.overhead_s, OVERLAP: cal.overlap}
    picked: dict[str, Choice] = {}
    for name, value in defaults.items():
        if measured and name in measured:
            picked[name] = measured[name]
        elif stated and (said := stated.get(name)) is not None:
            picked[name] = Choice(float(said), STATED, "as stated")
        else:
            picked[name] = Choice(value, DEFAULT, "calibrated default, " + cal.terms_how())
    return scaling_model.Terms(
        picked[JITTER].value,
        picked[OVERHEAD].value,
        picked[OVERLAP].value,
        {k: f"{c.kind}: {c.how}" for k, c in picked.items()},
    )


def terms_lines(terms: scaling_model.Terms) -> list[str]:
    overlap = float(terms.overlap)
    return [
        f"jitter of a rank's step (coefficient of variation) {float(terms.jitter_cv):.3g}: "
        + terms.sources[JITTER],
        f"overhead per step that the batch does not shrink {1e3 * float(terms.overhead_s):.3g} "
        "ms: " + terms.sources[OVERHEAD],
        "overlap (share of a step's compute the allreduce can hide behind)"
        + (f" {overlap:.2f}" if math.isfinite(overlap) else "")
        + ": "
        + terms.sources[OVERLAP],
    ]


def overhead_fit(batches: list[float], steps: list[float]) -> tuple[float, float, str] | None:
    """(overhead s, s per sample, how) of step = overhead + batch x per-sample, least
    squares over two or more batches; the overhead kept at zero or above, and `how` saying
    so where the fit fell below (the throughput fell, or barely rose, as the batch grew)."""
    if len(set(batches)) < 2:
        return None
    u, t0 = np.polyfit(np.array(batches, dtype=float), np.array(steps, dtype=float), 1)
    how = (
        f"; the fit gave {1e3 * float(t0):.3g} ms, below zero (the throughput falls as the "
        "batch grows): kept at 0"
        if t0 < 0
        else ""
    )
    return max(float(t0), 0.0), float(u), how


@dataclass
class Figures:
    """What `dlscale project` was told, with no store behind it."""

    throughput: dict[float, float]  # per-device batch -> per-device throughput
    measured_on: int = 1  # devices of one node the throughputs were measured on
    model: str | None = None
    parameters: int | None = None
    dtype: str = "fp32"
    intra_gbps: float | None = None
    inter_gbps: float | None = None  # one NIC's
    nics_per_node: int = 1
    latency_us: float | None = None
    scaling: str = "weak"
    global_batch: float | None = None
    batch: float | None = None  # weak scaling's per-device batch
    accumulation: int = 1
    terms: dict[str, float | None] = field(default_factory=dict)  # JITTER, OVERHEAD, OVERLAP
    unit: str | None = None  # --unit; None: the model's own (counts)


def counts(fig: Figures) -> str:
    """What the stated throughput counts: as stated (--unit), else the named model's own
    (images for an image model, sequences for BERT), else "samples" (a bare --parameters)."""
    if fig.unit:
        return fig.unit
    got = calibration.gradients().get(fig.model or "")
    return got.unit if got else "samples"


def links(fig: Figures) -> dict[str, Link]:
    latency = (fig.latency_us or 0.0) * 1e-6
    lat = [f"--latency-us {fig.latency_us:g}"] if fig.latency_us is not None else []
    out = {}
    if fig.intra_gbps:
        out[INTRA] = Link(
            INTRA,
            latency,
            fig.intra_gbps,
            ((0.0, 0.0), (0.0, 0.0)),
            commfit.STATED,
            (f"--intra-gbps {fig.intra_gbps:g}", *lat),
        )
    if fig.inter_gbps:
        node = fig.inter_gbps * fig.nics_per_node
        out[INTER] = Link(
            INTER,
            latency,
            node,
            ((0.0, 0.0), (0.0, 0.0)),
            commfit.STATED,
            (f"--inter-gbps {fig.inter_gbps:g} x --nics-per-node {fig.nics_per_node}", *lat),
        )
    return out


def gradient(fig: Figures) -> tuple[int, str]:
    """(bytes, where from) of one step's gradient."""
    size = strategies.DTYPE_BYTES[fig.dtype]
    if fig.parameters is not None:
        return fig.parameters * size, f"stated: --parameters {fig.parameters:,} as {fig.dtype}"
    named = named_parameters(fig.model or "")
    if named is None:
        raise ValueError("no gradient: give --model NAME or --parameters N")
    count, where = named
    return (
        count * size,
        f"stated: --model {fig.model}, {count:,} parameters ({where}) as {fig.dtype}",
    )


def setup(fig: Figures, cal: calibration.Calibration) -> Setup:
    """The stated figures as a projection's setup: the base is the figure at the weak
    batch (--batch, else the first given), or the largest batch given for strong scaling."""
    batches = list(fig.throughput)
    if fig.scaling == "strong":
        b = max(batches)
    else:
        b = fig.batch if fig.batch in fig.throughput else batches[0]
    per_device = fig.throughput[b]
    g, k = fig.measured_on, fig.accumulation
    fit = overhead_fit(batches, [x * k / fig.throughput[x] for x in batches])
    measured: dict[str, Choice] = {}
    if fit is not None and fig.terms.get(OVERHEAD) is None:
        measured[OVERHEAD] = Choice(
            fit[0],
            STATED,
            f"fitted on the stated throughputs at batches {', '.join(f'{x:g}' for x in batches)}"
            f" ({1e3 * fit[1]:.3g} ms a sample){fit[2]}",
        )
    terms = choose(cal, measured, fig.terms)
    nbytes, grad_how = gradient(fig)
    buckets = gradient_buckets(nbytes)
    unit = f"{counts(fig)}/s"
    said = ", ".join(f"{x:g}={y:g}" for x, y in fig.throughput.items())
    inputs = [
        f"base: stated --throughput {said} {unit} per device, on {g} device(s) of one node; "
        f"projected from batch {b:g} ({per_device * g:,.1f} {unit} on {g})",
        f"gradient: {grad_how}: {mb(nbytes)} in {len(buckets)} DDP-sized bucket(s)",
        *[
            f"{lk.tier} link: stated, not measured ({', '.join(lk.inputs)}): "
            f"{lk.bandwidth_gbps:g} GB/s"
            for lk in links(fig).values()
        ],
        f"speedup and efficiency: against the stated {per_device:,.1f} {unit} per device at "
        f"batch {b:g} on {g} device(s)",
        *terms_lines(terms),
        "scaling: "
        + (
            f"strong, global batch {fig.global_batch:g}"
            if fig.scaling == "strong"
            else f"weak, {fig.batch or b:g} per device"
        ),
        cal.error.how(),
    ]
    return Setup(
        g,
        b,
        Mean(per_device * g, 0.0, 1, "stated"),
        links(fig),
        buckets,
        terms,
        cal,
        baseline=Mean(per_device, 0.0, 1, "stated per device"),
        accumulation=k,
        scaling=fig.scaling,
        global_batch=fig.global_batch,
        inputs=inputs,
        weak_batch=fig.batch,
    )
