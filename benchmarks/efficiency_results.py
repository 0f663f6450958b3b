"""What explaining the efficiency costs `dlscale results` (issue 17).

Builds a store of 2,000 completed runs (4 frameworks x 25 scales x 5 batches x 4
repetitions, each with an env and a summary carrying the step-time breakdown, no energy) plus
one communication benchmark run per multi-device scale, and times analysis.results (what
`dlscale results`, the report and the TUI's results screen call) with the efficiency fields
and with them switched off, alternating in rounds; prints the medians and the median of the
paired ratios.

    .venv/bin/python benchmarks/efficiency_results.py
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path

from record import append_row

from dlscale.engine.launching.plan import Run
from dlscale.engine.results import analysis
from dlscale.engine.results import explained as efficiency
from dlscale.engine.tracking.store import Store

ROUNDS = 7


def line(kind: str, **fields) -> str:
    return json.dumps({"kind": kind, "schema": 1, "time": 0.0, **fields}) + "\n"


def build(home: Path) -> int:
    store = Store(home)
    n = 0
    for fw in ("pytorch-ddp", "deepspeed", "horovod-pytorch", "tensorflow"):
        for nodes in (1, 2, 4, 8, 16):
            for rpn in (1, 2, 4, 8, 16):
                runs = [
                    Run(
                        "big",
                        fw,
                        "resnet20",
                        "synthetic-cifar",
                        nodes,
                        rpn,
                        b,
                        b * nodes * rpn,
                        "weak",
                        "fp32",
                        "native",
                        rep,
                        {"steps": 30},
                    )
                    for b in (8, 16, 32, 64, 128)
                    for rep in range(4)
                ]
                if nodes * rpn > 1 and fw != "tensorflow":
                    runs.append(
                        Run(
                            "big",
                            fw,
                            "resnet20",
                            "synthetic-cifar",
                            nodes,
                            rpn,
                            8,
                            8 * nodes * rpn,
                            "weak",
                            "fp32",
                            "native",
                            0,
                            {"steps": 30, "comm_benchmark": True},
                        )
                    )
                for run in runs:
                    store.add_run(run)
                    path = home / f"{run.run_id}.jsonl"
                    body = line(
                        "env",
                        framework_versions={},
                        hostnames=["h"],
                        devices=["cpu"],
                        world_size=run.devices,
                        dlscale_version="0",
                        energy_unavailable="no readable RAPL package energy",
                    )
                    if run.comm_benchmark:
                        body += line(
                            "comm",
                            collective="allreduce",
                            backend="gloo",
                            world_size=run.devices,
                            comm_bytes=1_078_888,
                            bucket_bytes=25 << 20,
                            comm_time_s=0.01,
                            comm_algbw_gbps=0.1,
                            comm_busbw_gbps=0.1,
                        )
                    body += line(
                        "summary",
                        status="completed",
                        throughput=100.0 + run.repetition,
                        timed_steps=10,
                        warmup_steps=1,
                        elapsed_s=1.0,
                        compute_time_s=0.1,
                        exposed_comm_s=0.01,
                        forward_s=0.03,
                        backward_s=0.05,
                        optimizer_s=0.02,
                        data_wait_s=0.0,
                        energy_per_image_j=None,
                    )
                    path.write_text(body)
                    store.records.ingest(run.run_id, path)
                    store.update_run(run.run_id, state="COMPLETED")
                    n += 1
    store.close()
    return n


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        runs = build(home)
        store = Store(home)
        real = (efficiency.fields, efficiency.attach, efficiency.is_comm, efficiency.schedule_of)
        # Off: no fields, no benchmarks or energy reasons looked up, no schedule read (the
        # benchmark runs are still left out of the points, as they must be).
        off = (lambda p: {}, lambda *a: None, efficiency.is_comm, lambda r: None)
        times: dict[str, list[float]] = {"with": [], "without": []}
        points = len(analysis.results(store, "big"))  # warm: scipy, the page cache
        for _ in range(ROUNDS):
            for name, fns in (("with", real), ("without", off)):
                (
                    efficiency.fields,
                    efficiency.attach,
                    efficiency.is_comm,
                    efficiency.schedule_of,
                ) = fns
                t0 = time.perf_counter()
                analysis.results(store, "big")
                times[name].append((time.perf_counter() - t0) * 1000)
        store.close()
    ratio = statistics.median(a / b for a, b in zip(times["with"], times["without"]))
    out = {
        "rounds": ROUNDS,
        "runs": runs,
        "points": points,
        "with_ms": round(statistics.median(times["with"]), 1),
        "without_ms": round(statistics.median(times["without"]), 1),
        "ratio": round(ratio, 3),
    }
    print(
        f"analysis.results over {runs} runs ({points} points): {out['with_ms']} ms with the "
        f"efficiency fields, {out['without_ms']} ms without; paired ratio {out['ratio']} "
        f"(median of {ROUNDS} rounds)"
    )
    append_row("efficiency_results", out)


if __name__ == "__main__":
    main()
