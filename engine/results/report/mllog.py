"""A run's stored metric records as MLPerf Training `:::MLLOG` lines (mlcommons/logging).

One line per event: `:::MLLOG {json}` with the keys namespace, time_ms, event_type
(POINT_IN_TIME, INTERVAL_START, INTERVAL_END), key, value and metadata, in time order. Key
names, event types and the benchmark's name are the `mlperf-logging` package's own
(`mllog.constants`), imported only here, when a log is written. The logs meet MLPerf
Training 4.0.0's open-division rules as its compliance checker applies them; what they
cannot meet, and why, is in docs/reports.md.

Times come from the records' own clocks: run_start is the moment the timed loop began (the
first evaluation's time less its elapsed_s, else the env record written just before the
loop), run_stop the end of training, or the evaluation that reached the target, so MLPerf's
score (run_stop - run_start) is dlscale's time-to-accuracy. dlscale's own figures go under
keys prefixed `dlscale_`.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType
from typing import Any

from ...errors import UserError
from ...io.outputs import OutputFolder
from ...runs import RunRow, declaration
from ...tracking.store import Store

PREFIX = ":::MLLOG "
_BREAKDOWN = (
    "data_wait_s",
    "forward_s",
    "backward_s",
    "optimizer_s",
    "compute_time_s",
    "exposed_comm_s",
)


def _constants() -> ModuleType:
    try:
        from mlperf_logging.mllog import constants
    except ImportError:
        raise UserError(
            "writing MLLOG files needs the mlperf-logging package (a dlscale dependency): "
            "pip install mlperf-logging"
        ) from None
    return constants


class _Log:
    """Events as they are added, each stamped with its time and the record it came from."""

    def __init__(self) -> None:
        self.c = _constants()
        self.out: list[dict[str, Any]] = []

    def add(
        self, t: float, line: int, event_type: str, key: str, value: Any, **metadata: Any
    ) -> None:
        self.out.append(
            {
                "namespace": "",
                "time_ms": int(round(t * 1000)),
                "event_type": event_type,
                "key": key,
                "value": value,
                "metadata": {"file": "metrics.jsonl", "lineno": line, **metadata},
            }
        )

    def point(self, t: float, line: int, key: str, value: Any, **metadata: Any) -> None:
        self.add(t, line, self.c.POINT_IN_TIME, key, value, **metadata)

    def start(self, t: float, line: int, key: str, **metadata: Any) -> None:
        self.add(t, line, self.c.INTERVAL_START, key, None, **metadata)

    def stop(self, t: float, line: int, key: str, **metadata: Any) -> None:
        self.add(t, line, self.c.INTERVAL_END, key, None, **metadata)


def _first(records: list[tuple[int, dict[str, Any]]], kind: str) -> tuple[int, dict[str, Any]]:
    return next(((n, r) for n, r in records if r["kind"] == kind), (0, {}))


def mllog_events(records: list[dict[str, Any]], run: RunRow) -> list[dict[str, Any]]:
    """MLLOG events from a run's records (in file order, as the store keeps them), sorted by
    time (events of one moment keep the order MLPerf's rules expect)."""
    if not records:
        return []
    log = _Log()
    c = log.c
    numbered = list(enumerate(records, 1))
    p_line, params = _first(numbered, "params")
    e_line, env = _first(numbered, "env")
    s_line, summary = _first(numbered, "summary")
    evals = [(n, r) for n, r in numbered if r["kind"] == "eval"]
    batch = params.get(
        "global_batch", params.get("per_device_batch", 0) * params.get("world_size", 0)
    )

    target = summary.get("target_accuracy", params.get("target_accuracy"))
    hit = next(
        ((n, r) for n, r in evals if target is not None and r["top1"] >= target),
        None,
    )
    # When the timed loop began: an evaluation says exactly (its elapsed_s counts from
    # there; the one that reached the target, so the score is its time-to-accuracy); else
    # the env record, the trainer's last write before the loop.
    if evals:
        _, first = hit or evals[0]
        t0 = float(first["time"]) - float(first["elapsed_s"])
    else:
        t0 = float((env or params or records[0])["time"])
    if hit is not None:
        t_end, end_line = float(hit[1]["time"]), hit[0]
    elif summary.get("total_wall_s") is not None:
        t_end, end_line = t0 + float(summary["total_wall_s"]), s_line
    else:  # recorded before total_wall_s was: the last step's interval ended training
        end_line, last = max(
            ((n, r) for n, r in numbered if r["kind"] in ("interval", "eval")),
            default=(len(records), records[-1]),
            key=lambda nr: nr[0],
        )
        t_end = float(last["time"])

    # Before the run: what it is, then initialisation (model and data ready by the params
    # record) up to the loop's start. dlscale clears no caches: cache_clear says so (False).
    t_init = min(float(params.get("time", t0)), t0)
    line = p_line or 1
    log.point(t_init, line, c.CACHE_CLEAR, False)
    log.start(t_init, line, c.INIT_START)
    # The built-in trainers' ResNets are MLPerf's "resnet" benchmark; a declared framework's
    # model is its own, named as declared.
    benchmark = params.get("model") or run["model"] if declaration(run) else c.RESNET
    log.point(t_init, line, c.SUBMISSION_BENCHMARK, benchmark, dlscale_model=params.get("model"))
    log.point(t_init, line, c.SUBMISSION_ORG, "dlscale")
    log.point(t_init, line, c.SUBMISSION_DIVISION, c.OPEN)
    log.point(t_init, line, c.SUBMISSION_STATUS, c.RESEARCH)
    devices = env.get("devices") or []
    log.point(
        t_init,
        line,
        c.SUBMISSION_PLATFORM,
        f"{len(devices)}x{devices[0] if devices else 'unknown'}",
        nodes=env.get("nodes"),
        job_id=env.get("job_id"),
    )
    log.point(t_init, line, "dlscale_model", params.get("model"))
    log.point(t_init, line, "dlscale_run_id", run["run_id"])
    log.point(t_init, line, "dlscale_framework", params.get("framework"))
    log.point(t_init, line, "dlscale_dataset", params.get("dataset"))
    log.point(t_init, line, c.GLOBAL_BATCH_SIZE, batch)
    log.point(t_init, line, "dlscale_per_device_batch", params.get("per_device_batch"))
    log.point(t_init, line, "dlscale_world_size", params.get("world_size"))
    log.point(t_init, line, c.OPT_NAME, c.SGD)
    log.point(t_init, line, c.OPT_BASE_LR, params.get("lr_scaled", params.get("lr")))
    log.point(t_init, line, c.OPT_LR_WARMUP_EPOCHS, params.get("lr_warmup_epochs", 0.0))
    log.point(t_init, line, "dlscale_lr_schedule", params.get("lr_schedule"))
    log.point(t_init, line, "dlscale_precision", params.get("precision"))
    log.point(t_init, line, c.SEED, params.get("seed"))
    # MLPerf's sample counts are the data sets' sizes; a synthetic run has no set, so its
    # training samples are the images it trained on.
    trained = summary.get("steps", 0) * batch if summary else None
    log.point(t_init, line, c.TRAIN_SAMPLES, params.get("train_images") or trained)
    if evals and params.get("eval_images") is not None:
        log.point(t_init, line, c.EVAL_SAMPLES, params["eval_images"])
    if env:
        log.point(
            t_init,
            e_line,
            "dlscale_versions",
            env["framework_versions"],
            dlscale_version=env["dlscale_version"],
            launcher=env.get("launcher"),
        )
    log.stop(t0, e_line or line, c.INIT_STOP)
    log.start(t0, e_line or line, c.RUN_START)

    # Training: a block of epochs up to each evaluation (and one after the last, if training
    # went on), the evaluation itself, the interval records as tracked_stats.
    block_t, done_epochs = t0, 0
    for n, rec in evals:
        t_eval = float(rec["time"])
        t_eval_start = max(t_eval - float(rec.get("eval_s") or 0.0), block_t)
        count = rec["epoch"] - done_epochs
        if count > 0:
            log.start(block_t, n, c.BLOCK_START, first_epoch_num=done_epochs + 1, epoch_count=count)
            log.stop(t_eval_start, n, c.BLOCK_STOP, first_epoch_num=done_epochs + 1)
        log.start(t_eval_start, n, c.EVAL_START, epoch_num=rec["epoch"])
        log.stop(t_eval, n, c.EVAL_STOP, epoch_num=rec["epoch"])
        log.point(
            t_eval,
            n,
            c.EVAL_ACCURACY,
            rec["top1"],
            epoch_num=rec["epoch"],
            step_num=rec["step"],
            elapsed_s=rec["elapsed_s"],
        )
        block_t, done_epochs = t_eval, rec["epoch"]
        if hit is not None and n == hit[0]:
            break
    if hit is None and summary and t_end > block_t:
        epochs = summary.get("epochs_done", 0) - done_epochs
        last_step = evals[-1][1]["step"] if evals else 0
        samples = (summary.get("steps", 0) - last_step) * batch
        size = {"epoch_count": epochs} if epochs > 0 else {"samples_count": samples}
        if epochs > 0 or samples > 0:
            first = {"first_epoch_num": done_epochs + 1}
            log.start(block_t, s_line, c.BLOCK_START, **first, **size)
            log.stop(t_end, s_line, c.BLOCK_STOP, **first, **size)
    for n, rec in numbered:
        if rec["kind"] == "interval":
            log.point(
                float(rec["time"]),
                n,
                "tracked_stats",
                {"throughput": rec["images_per_s"], "loss": rec["loss"]},
                step_num=rec["step"],
                epoch_num=rec.get("epoch"),
                includes_warmup=rec.get("includes_warmup"),
            )
        elif rec["kind"] == "comm":
            log.point(
                float(rec["time"]),
                n,
                "dlscale_comm_benchmark",
                rec["comm_busbw_gbps"],
                unit="GB/s bus bandwidth",
                collective=rec["collective"],
                backend=rec["backend"],
                world_size=rec["world_size"],
                comm_bytes=rec["comm_bytes"],
                comm_time_s=rec["comm_time_s"],
                comm_algbw_gbps=rec["comm_algbw_gbps"],
            )

    # MLPerf's run_stop: the target reached (success), or without a target (a throughput
    # run) the timed steps completed; otherwise aborted.
    completed = summary.get("status") == "completed"
    ok = hit is not None or (completed and target is None)
    log.stop(t_end, end_line, c.RUN_STOP, status=c.SUCCESS if ok else c.ABORTED)
    if summary:
        _summary_events(log, s_line, summary)
    order = {id(e): i for i, e in enumerate(log.out)}
    return sorted(log.out, key=lambda e: (e["time_ms"], order[id(e)]))


def _summary_events(log: _Log, line: int, rec: dict[str, Any]) -> None:
    """dlscale's own figures from the summary record, at the time it was written."""
    t = float(rec["time"])
    log.point(
        t,
        line,
        "dlscale_throughput",
        rec["throughput"],
        unit="images/s",
        timed_steps=rec["timed_steps"],
        warmup_steps=rec["warmup_steps"],
        images_timed=rec.get("images_timed"),
    )
    parts = {k: rec[k] for k in _BREAKDOWN if rec.get(k) is not None}
    if parts:
        log.point(t, line, "dlscale_step_breakdown", parts, unit="s")
    if rec.get("energy_per_image_j") is not None:
        log.point(
            t,
            line,
            "dlscale_energy_per_image_j",
            rec["energy_per_image_j"],
            energy_j=rec.get("energy_j"),
            mean_power_w=rec.get("mean_power_w"),
            device_util=rec.get("device_util"),
        )
    if rec.get("time_to_accuracy_s") is not None:
        log.point(
            t,
            line,
            "dlscale_time_to_accuracy_s",
            rec["time_to_accuracy_s"],
            target_accuracy=rec.get("target_accuracy"),
        )


def lines(store: Store, run_id: str) -> list[str]:
    run = store.run(run_id)
    return [
        PREFIX + json.dumps(e, allow_nan=False)
        for e in mllog_events(store.records.of(run["run_id"]), run)
    ]


def write(store: Store, run_ids: list[str], folder: OutputFolder) -> list[Path]:
    """One `RUN_ID.mllog` file per run that has records, each through the one writer;
    returns the files written."""
    written = []
    for rid in run_ids:
        text = lines(store, rid)
        if text:
            name = f"{store.run(rid)['run_id']}.mllog"
            written.append(folder.write(name, "\n".join(text) + "\n"))
    return written


def parse(line: str) -> dict[str, Any]:
    """One `:::MLLOG` line back to its event (ValueError when the line is not one)."""
    if not line.startswith(PREFIX):
        raise ValueError(f"not an MLLOG line: {line[:40]!r}")
    return json.loads(line[len(PREFIX) :])
