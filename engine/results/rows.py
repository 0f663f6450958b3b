"""The shapes results travel in, typed: a point's result row (`dlscale results`, the report,
the TUI, charts, CSV and JSON), a comparison's row, and a projection's row and family.
Each is built in one place (analysis.results, compare.rows, projection.project) and read by
checked key everywhere else: mypy holds every reader to these names, and
tests/test_rows.py holds the builders to them.

TypedDicts rather than dataclasses: the rows are what JSON and CSV write, key for key, and
the names are the output's documented field names (docs/running.md)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, TypedDict


class ResultRow(TypedDict):
    """One measurement point: all repetitions of one configuration on one kind of device."""

    run_id: str  # its first run
    run_ids: list[str]
    experiment: str
    framework: str
    model: str
    dataset: str
    nodes: int
    ranks: int  # devices in all
    ranks_per_node: int
    per_device_batch: int
    global_batch: int
    scaling: str  # weak or strong
    precision: str
    loader: str
    device: str | None  # "cpu", or the GPU's model
    site: str | None  # where it was measured, for a point imported from a bundle
    state: str
    repetitions: int
    n: int  # repetitions that count (stats.counted)
    throughput: float | None  # the mean, per second, in `unit`s
    throughput_median: float | None
    throughput_ci95: float | None  # stats.INTERVAL's half-width
    throughput_cv: float | None
    noisy: bool
    speedup: float | None
    efficiency: float | None
    baseline_run_id: str | None
    baseline: str | None  # the baseline point's label
    speedup_own: float | None  # against the framework's own 1-device point
    efficiency_own: float | None
    time_to_accuracy_s: float | None
    time_to_accuracy_ci95: float | None
    runtime_s: float | None
    reached_target: str | None  # "2/3": repetitions that reached the target of those evaluated
    best_top1: float | None
    unit: str  # what the throughput counts: images, or a declared framework's tokens
    axes: dict[str, Any]  # a declared framework's own axes' values
    test_slowdown: float | None  # the test-only DLSCALE_TEST_SLOWDOWN it was made with
    # other work on the machine (results/disturbed.py): completed runs judged disturbed, run
    # id -> what disturbed it; how many completed runs had a record to judge; the
    # experiment's action (flag: counted and marked, leave-out: not counted); the CV of the
    # counted runs judged quiet, where some counted ones were disturbed
    disturbed: dict[str, list[str]]
    disturbed_judged: int
    disturbed_action: str
    throughput_cv_quiet: float | None
    disturbed_rerun: dict[str, str]  # disturbed = "rerun": a disturbed run -> its rerun
    # where the efficiency goes (explained.efficiency_fields)
    lr_schedule: str | None
    step_time_s: float | None
    compute_time_s: float | None
    exposed_comm_s: float | None
    other_s: float | None
    forward_s: float | None
    backward_s: float | None
    optimizer_s: float | None
    data_wait_s: float | None
    comm_time_s: float | None
    comm_busbw_gbps: float | None
    comm_algbw_gbps: float | None
    comm_run_id: str | None
    predicted_step_s: float | None
    predicted_efficiency: float | None
    energy_per_image_j: float | None
    images_per_joule: float | None
    mean_power_w: float | None
    device_util: float | None
    # a transformer's (trainers/common/mfu.py): PaLM's FLOPs count over the step, against
    # the device's peak for its precision; and the largest device's peak memory
    achieved_tflops_per_device: float | None
    mfu: float | None
    peak_memory_bytes: float | None
    unmeasured: dict[str, str]  # field -> why it has no value


class CompareSide(TypedDict):
    """One side of a compared pair: the point's numbers at its site."""

    experiment: str
    site: str
    device: str | None
    n: int
    throughput: float | None
    throughput_ci95: float | None
    throughput_cv: float | None
    noisy: bool
    speedup: float | None
    efficiency: float | None
    state: str
    test_slowdown: float | None


class CompareRow(TypedDict):
    """Two experiments' points of one configuration, side by side (compare.rows)."""

    framework: str
    model: str
    dataset: str
    nodes: int
    ranks_per_node: int
    per_device_batch: int
    global_batch: int
    scaling: str
    precision: str
    loader: str
    lr_schedule: str | None
    matched: bool
    a: CompareSide | None
    b: CompareSide | None
    ratio: float | None  # B / A
    ratio_low: float | None
    ratio_high: float | None  # None: unbounded
    p_value: float | None
    significant: bool | None
    env_differences: dict[str, list[str]]


class SideBySide(TypedDict):
    """What `dlscale compare` and the TUI show of two experiments (compare.side_by_side)."""

    a: str
    b: str
    sites: list[str]
    ratio_method: str
    test_method: str
    rows: list[CompareRow]
    env_differences: dict[str, list[str]]


def number(row: Mapping[str, Any], key: str) -> float | None:
    """A row's numeric field chosen by name (a chart's metric, a figure's bar): the value as a
    float where it is a finite number, else None."""
    value = row.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


class Interval(TypedDict):
    """A value and its 95% interval, as JSON holds it (no upper bound: `ci95_high` None)."""

    value: float
    ci95_low: float
    ci95_high: float | None


# A projection row's kinds: measured here, projected by the model, or a figure a user stated.
MEASURED = "measured"
PROJECTED = "projected"
STATED = "stated"


class ProjectionRow(TypedDict, total=False):
    """One scale of a projection (`dlscale project`, the report, the TUI's chart): measured,
    projected or stated (its `kind`), or not projected and `why`. Built in
    projection/project.py (measured_row, projected_row, stated_row) only."""

    kind: str
    nodes: int
    ranks_per_node: int
    ranks: int
    global_batch: float
    per_device_batch: float
    throughput: Interval
    step_time_s: Interval
    speedup: Interval
    efficiency: Interval
    why: str  # not projected: why
    inputs: list[str]
    stated: bool  # a link it crossed was stated, not measured
    links_used: dict[str, str]
    link: str
    terms_s: dict[str, float]
    dominant: dict[str, Any]
    notes: list[str]


# A study's largest measured scale projected from the others (`from`): how far off it was.
# The functional form: "from" is a keyword.
HeldOut = TypedDict(
    "HeldOut",
    {
        "nodes": int,
        "ranks_per_node": int,
        "ranks": int,
        "why": str,
        "from": list[str],
        "base": str,
        "base_devices": int,
        "measured_throughput": float,
        "projected_throughput": Interval,
        "error": "float | None",
        "outside_interval": bool,
        "stated": bool,
        "inputs": list[str],
    },
    total=False,
)


class Family(TypedDict, total=False):
    """One projected family (a framework, model, precision, batch, loader and device): its
    rows, the links and inputs it used, what bounded its intervals and its held-out check.
    Built in projection/project.py (_family, from_figures) only."""

    family: str
    experiment: str
    framework: str
    model: str | None
    precision: str
    scaling: str
    per_device_batch: float
    loader: str
    device: str | None
    unit: str
    rows: list[ProjectionRow]
    held_out: HeldOut | None
    inputs: list[str]
    notes: list[str]
    bounds: list[str]
    why: str
    links: dict[str, dict[str, Any]]
    base: str
    baseline: str | None
    gradient_bytes: int
    skipped: list[str]
