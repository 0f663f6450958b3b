"""The model of one training step at any scale, from one measured (or stated) step in one
node: the terms a projection adds, each a number or a numpy array (a Monte Carlo draw per
element), so the same code gives the central value, the interval's draws and the
calibration's grid of parameters.

A step of n = N x G ranks (N nodes of G devices), per-device batch b, k micro-batches
accumulated per optimizer step:

    m(b)   = t0 + b x u                   one micro-batch's compute on one device
    wait   = k x m(b) x sigma x E(n)      the wait for the slowest of n ranks
    C(N,G) = intra(G) + inter(N)          the hierarchical allreduce of one step's gradient
    T      = k x m(b) + wait + max(C - h x m(b), 0)

- E(n) is the expected maximum of n independent standard normals: each rank's step time
  jitters with coefficient of variation sigma, and a synchronous step waits for the slowest.
- t0 is the part of a step that does not shrink with the batch (launches, the optimizer's
  pass over the weights); u the time per sample. Throughput per device is then
  b / (t0 + b u): it falls as strong scaling shrinks the per-device batch.
- The allreduce is hierarchical: within the node over its device links, then across nodes
  over the node's NICs (commfit.py's alpha-beta model per tier: the inter-node tier's
  bandwidth is the node's, all its NICs together).
- h x m(b) is how much of the allreduce hides behind one micro-batch's backward pass: it
  shrinks with the batch, so under strong scaling more of the allreduce shows.

The base (g devices of one node, batch b_g, k_g, measured step T_g) fixes m(b_g) and h:
with a step-time breakdown (e exposed, C_g the allreduce) h = (C_g - e) / m(b_g) is measured
(below zero where more was exposed than the benchmark's allreduce takes: the extra grows with
the allreduce); without one h is the overlap stated or defaulted, and m(b_g) solves the
step equation above at the base's own scale, so the model gives the base back exactly.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Any

import numpy as np

from . import commfit

# The terms of a step, in the order shown; COMPUTE is what the step would take at the base's
# speed per sample, the rest is what the scale adds to it.
COMPUTE = "compute"
SMALL_BATCH = "small-batch overhead"
WAIT = "wait for the slowest rank"
INTRA_COMM = "exposed allreduce in the node"
INTER_COMM = "exposed allreduce across nodes"
TERMS = (COMPUTE, SMALL_BATCH, WAIT, INTRA_COMM, INTER_COMM)

MAX_OVERHEAD_SHARE = 0.9  # t0 above this share of the base's micro-batch is taken as this


@functools.cache
def expected_max(n: int) -> float:
    """E[max of n independent standard normals]: the integral of x n phi(x) Phi(x)^(n-1),
    on a grid fine enough for four digits (0 for one rank; 0.5642 for two)."""
    if n <= 1:
        return 0.0
    x = np.linspace(-9.0, 9.0, 6001)
    phi = np.exp(-x * x / 2) / math.sqrt(2 * math.pi)
    cdf = np.array([NormalDist().cdf(v) for v in x])
    f = x * n * phi * cdf ** (n - 1)
    return float(np.sum((f[1:] + f[:-1]) / 2 * np.diff(x)))


@dataclass(frozen=True)
class Net:
    """One step's gradient and the links it crosses: (latency s, s per byte) per tier,
    numbers or draws; None where the tier is unknown."""

    buckets: list[int]
    intra: tuple[Any, Any] | None
    inter: tuple[Any, Any] | None  # the node's: all its NICs together

    def tier_s(self, link: tuple[Any, Any] | None, ranks: int) -> Any:
        if ranks <= 1:
            return 0.0
        if link is None:
            raise ValueError("a tier the allreduce crosses has no link")
        return commfit.allreduce_time(link[0], link[1], self.buckets, ranks)

    def allreduce_s(self, nodes: int, per_node: int) -> tuple[Any, Any]:
        """(within the node, across nodes): reduce-scatter and all-gather over the node's
        device links, allreduce of the node's share across nodes over its NICs."""
        return self.tier_s(self.intra, per_node), self.tier_s(self.inter, nodes)


@dataclass
class Base:
    """What the model takes of the measured (or stated) step it starts from, in one node."""

    devices: int
    per_device_batch: float
    step_s: Any  # one optimizer step: devices x batch x accumulation / throughput
    accumulation: int = 1
    exposed_comm_s: float | None = None  # the step-time breakdown's; None: none measured
    comm_s: Any = None  # its allreduce as benchmarked; None: the model's from the links


@dataclass
class Terms:
    """The parameters not read off the base: jitter sigma, overhead t0 (s), overlap (the
    share of one micro-batch's compute the allreduce can hide behind), each with its
    source ("measured: ...", "stated: ...", "default: ...")."""

    jitter_cv: Any
    overhead_s: Any
    overlap: Any
    sources: dict[str, str] = field(default_factory=dict)


@dataclass
class Fixed:
    """The base resolved: one micro-batch's compute m(b_g), the hiding ratio h, the time
    per sample u and the overhead t0 actually used, and what had to be assumed."""

    micro_s: Any
    hide: Any
    per_sample_s: Any
    overhead_s: Any
    notes: list[str] = field(default_factory=list)


def fix_base(base: Base, terms: Terms, net: Net) -> Fixed:
    """Split the base's step into compute, its own wait and its exposed allreduce."""
    g, k = base.devices, base.accumulation
    a = 1.0 + terms.jitter_cv * expected_max(g)
    t = np.asarray(base.step_s, dtype=float)
    notes: list[str] = []
    # the base's allreduce: the links' model where there are links (so the model gives the
    # base back at its own scale), else the benchmark's time
    if g > 1 and net.intra is not None:
        c = np.asarray(net.allreduce_s(1, g)[0], dtype=float)
    else:
        c = np.asarray(base.comm_s if base.comm_s is not None and g > 1 else 0.0, dtype=float)
    if base.exposed_comm_s is not None and g > 1:
        e = min(base.exposed_comm_s, 0.999 * float(np.min(t)))
        micro = (t - e) / (k * a)
        hide = (c - e) / micro
    else:
        omega = np.asarray(terms.overlap, dtype=float)
        plain = t / (k * a)  # the allreduce all hidden
        solved = (t - c) / np.maximum(k * a - omega, 1e-9)  # the part beyond omega x m shown
        shown = c > omega * plain
        micro = np.where(shown, solved, plain)
        hide = omega * np.ones_like(micro)
        over = shown & (solved <= 0)
        micro = np.where(over, plain, micro)
        hide = np.where(over, c / plain, hide)
    bench = float(base.comm_s) if base.comm_s is not None and g > 1 else 0.0
    model = float(np.median(c))
    step_s = float(np.median(t))
    if g > 1 and max(bench, model) >= step_s:
        # The allreduce alone takes longer than the whole measured step: it cannot have
        # been exposed; the step is taken as compute with that allreduce hidden behind it.
        timed = [f"the comm benchmark's {1e3 * bench:.3g} ms"] if bench else []
        timed += [f"the links' model {1e3 * model:.3g} ms"] if net.intra is not None else []
        notes.append(
            f"the base's allreduce ({'; '.join(timed)}) is longer than its whole measured "
            f"step ({1e3 * step_s:.3g} ms): it cannot all have been exposed. The benchmark "
            "times the allreduce alone, apart from training, and here timed a slower one "
            "than the training step had (or the links stated are slower than the base "
            "ran). "
            + (
                "The projection takes the breakdown's compute and exposed time as measured, "
                "the rest of that allreduce as hidden behind compute,"
                if base.exposed_comm_s is not None
                else "The projection takes the base's step as compute with that allreduce "
                "hidden behind it,"
            )
            + " and adds only what grows beyond it at larger scales."
        )
    t0 = np.minimum(np.asarray(terms.overhead_s, dtype=float), MAX_OVERHEAD_SHARE * micro)
    per_sample = (micro - t0) / base.per_device_batch
    return Fixed(micro, hide, per_sample, t0, notes)


def step(
    fixed: Fixed,
    terms: Terms,
    net: Net,
    base: Base,
    nodes: int,
    per_node: int,
    per_device_batch: float,
    accumulation: int = 1,
) -> dict[str, Any]:
    """One optimizer step at nodes x per_node: each term of TERMS and "step" (seconds)."""
    n = nodes * per_node
    micro = fixed.overhead_s + per_device_batch * fixed.per_sample_s
    at_base_speed = per_device_batch * fixed.micro_s / base.per_device_batch
    compute = accumulation * micro
    wait = compute * terms.jitter_cv * expected_max(n)
    intra, inter = net.allreduce_s(nodes, per_node)
    total = intra + inter
    exposed = np.maximum(total - fixed.hide * micro, 0.0)
    share = intra / np.maximum(total, 1e-300)  # of the exposed part, how much is the node's
    return {
        COMPUTE: accumulation * at_base_speed,
        SMALL_BATCH: accumulation * (micro - at_base_speed),
        WAIT: wait,
        INTRA_COMM: exposed * share,
        INTER_COMM: exposed * (1 - share),
        "step": compute + wait + exposed,
    }


def dominant(terms: dict[str, Any]) -> tuple[str, float]:
    """The term beyond compute that costs the most, and its share of the step."""
    name = max(TERMS[1:], key=lambda t: float(np.median(terms[t])))
    return name, float(np.median(terms[name]) / np.median(terms["step"]))
