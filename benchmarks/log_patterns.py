"""How much does zero-change reporting cost a run? A declared framework's log of 10,000
lines (one throughput line per step, as examples/custom/gpt.py prints them, plus as many
lines of other output between them) is read with examples/custom/gpt-log.toml's patterns
when its job ends (engine/tracking/log_patterns.settle: read, match, write the records),
and the records are ingested into a real store (the ingest a built-in trainer's records
get too). Each is timed over several rounds on a fresh run folder; the medians are printed
and appended to benchmarks/results.jsonl.

    .venv/bin/python benchmarks/log_patterns.py [--lines 10000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from record import append_row

from dlscale.engine.config.spec import load_spec
from dlscale.engine.launching.plan import plan
from dlscale.engine.paths import RunPaths
from dlscale.engine.tracking.log_patterns import Patterns, settle, units_per_step
from dlscale.engine.tracking.store import Store

REPO = Path(__file__).resolve().parent.parent
SPEC = REPO / "examples" / "custom" / "gpt-log.toml"


def log_text(lines: int) -> str:
    """`lines` lines: every other one a step's line the patterns match, the rest other
    output (a warning, a progress line) they must pass over."""
    out = []
    for i in range(lines // 2):
        out.append(
            f"step {i + 1} loss {6.25 - i * 1e-5:.4f} time {20 + i % 7:.2f} ms "
            f"throughput {12000 + (i * 37) % 900:.1f} tokens/s"
        )
        out.append(f"[W socket.cpp:{i % 700}] some other output of the script, line {i}")
    return "\n".join(out) + "\n"


def one_round(store: Store, row: dict, text: str) -> dict[str, float]:
    paths = RunPaths.of(row)
    paths.root.mkdir(parents=True, exist_ok=True)
    paths.metrics.unlink(missing_ok=True)
    paths.log.write_text(text)
    training = json.loads(row["training"])
    log = training["custom"]["log"]
    start = time.perf_counter()
    patterns = Patterns(log, units_per_step(log, row, training), row["devices"])
    with open(paths.log) as fh:
        measured = patterns.read(fh)
    read_s = time.perf_counter() - start
    paths.metrics.unlink(missing_ok=True)
    start = time.perf_counter()
    why = settle(row, "localhost")
    settle_s = time.perf_counter() - start
    assert why is None, why
    store.conn.execute("DELETE FROM records WHERE run_id=?", (row["run_id"],))
    store.conn.execute(
        "UPDATE runs SET ingest_offset=0, ingest_lines=0 WHERE run_id=?", (row["run_id"],)
    )
    store.conn.commit()
    start = time.perf_counter()
    records = store.records.ingest(row["run_id"], paths.metrics)
    ingest_s = time.perf_counter() - start
    assert records == len(measured.rates) + len(measured.warmup) + 3, records
    return {"read_s": read_s, "settle_s": settle_s, "ingest_s": ingest_s, "records": records}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lines", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    text = log_text(args.lines)
    with tempfile.TemporaryDirectory() as tmp:
        store = Store(Path(tmp))
        run = plan(load_spec(SPEC)).runs[-1]  # 1x2: throughput from 2 ranks
        store.add_runs([run])
        row = store.run(run.run_id)
        rounds = [one_round(store, row, text) for _ in range(args.rounds)]
    med = {k: statistics.median(r[k] for r in rounds) for k in ("read_s", "settle_s", "ingest_s")}
    result = {
        "log_lines": args.lines,
        "rounds": args.rounds,
        "records": rounds[0]["records"],
        "read_ms": round(med["read_s"] * 1000, 2),
        "settle_ms": round(med["settle_s"] * 1000, 2),
        "ingest_ms": round(med["ingest_s"] * 1000, 2),
        "per_line_us": round(med["settle_s"] / args.lines * 1e6, 3),
    }
    print(
        f"{args.lines} log lines ({result['records']} records), median of {args.rounds}: "
        f"patterns read {result['read_ms']} ms, settle (read + write records) "
        f"{result['settle_ms']} ms ({result['per_line_us']} µs a line), ingest "
        f"{result['ingest_ms']} ms"
    )
    append_row("log_patterns", result)


if __name__ == "__main__":
    main()
