"""The projection (engine/results/) against every published scaling row dlscale keeps
(engine/results/published_scaling.toml, each row citing where it is from), leave one source
out: each source's rows are projected from their smallest published scale with the model's
defaults and its error calibrated on the other sources alone (calibration.check). Prints
every row (projected, its 95% interval, published, error) and the summary (median |error|,
the share of published values inside their interval), and appends both to results.jsonl.
Targets (issue 34): median |error| <= 10%, coverage >= 90%.

Run: .venv/bin/python benchmarks/projection_check.py [--markdown]
(--markdown: print docs/measuring.md's table of the rows instead, appending nothing)
"""

from __future__ import annotations

import statistics
import sys

from record import append_row

from dlscale.engine.results.projection import calibration


def summary(rows: list[dict]) -> dict:
    errors = [abs(r["error"]) for r in rows]
    return {
        "rows": len(rows),
        "median_abs_error": round(statistics.median(errors), 4),
        "coverage": round(sum(r["inside"] for r in rows) / len(rows), 4),
        "within_10pct": round(sum(e <= 0.10 for e in errors) / len(rows), 4),
    }


def markdown(rows: list[dict]) -> None:
    """The rows as docs/measuring.md shows them."""
    print(
        "| source | what | from | to | batch/device | projected | [95% interval] | published "
        "| error |\n|---|---|---:|---:|---:|---:|---:|---:|---:|"
    )
    for r in rows:
        batch = f"{r['batch_from']:g}" + (
            f" → {r['batch_to']:g}" if r["batch_to"] != r["batch_from"] else ""
        )
        error = f"{100 * r['error']:+.1f}%"
        print(
            f"| {r['source']} | {r['what']} | {r['from_devices']} | {r['to_devices']} | {batch} "
            f"| {r['projected']:,.0f} | [{r['low']:,.0f}, {r['high']:,.0f}] "
            f"| {r['published']:,.0f} | {error if r['inside'] else f'**{error}** (outside)'} |"
        )


def main() -> None:
    data = calibration.published()
    rows = calibration.check()
    if "--markdown" in sys.argv[1:]:
        markdown(rows)
        return
    print(
        f"{'source':17} {'what':42} {'from':>5} {'to':>5} {'projected':>10} "
        f"{'[95% interval]':>23} {'published':>10} {'error':>7} in"
    )
    for r in rows:
        print(
            f"{r['source']:17} {r['what'][:42]:42} {r['from_devices']:5} {r['to_devices']:5} "
            f"{r['projected']:10,.0f} [{r['low']:10,.0f},{r['high']:10,.0f}] "
            f"{r['published']:10,.0f} {100 * r['error']:+6.1f}% {'y' if r['inside'] else 'NO'}"
        )
    print()
    per_source = {}
    for s in data.sources:
        mine = [r for r in rows if r["source"] == s.id]
        per_source[s.id] = summary(mine)
        got = per_source[s.id]
        print(
            f"{s.id:17} {got['rows']:3} rows, median |error| {100 * got['median_abs_error']:5.1f}%,"
            f" inside {100 * got['coverage']:5.1f}%  (defaults fitted without it: "
            f"{mine[0]['defaults']})"
        )
    total = summary(rows)
    large = [r for r in rows if r["to_devices"] >= 256]
    print(
        f"\nall: {total['rows']} rows from {len(per_source)} sources ({len(large)} at 256 "
        f"devices or more): median |error| {100 * total['median_abs_error']:.1f}% "
        f"(target <= 10%), inside the 95% interval {100 * total['coverage']:.1f}% "
        f"(target >= 90%), within 10% {100 * total['within_10pct']:.1f}%"
    )
    # transformers apart (issue 52): the models counted in sequences (BERT, MPT, Llama)
    units = {m.id: m.unit for m in data.models}
    transformers = summary([r for r in rows if units[r["model"]] == "sequences"])
    fsdp = {f"{r.source}:{r.what}" for r in data.rows if r.strategy == "fsdp"}
    sharded = summary([r for r in rows if f"{r['source']}:{r['what']}" in fsdp])
    for name, got in (("transformer rows", transformers), ("  of which FSDP", sharded)):
        print(
            f"{name}: {got['rows']} rows, median |error| {100 * got['median_abs_error']:.1f}%, "
            f"inside the 95% interval {100 * got['coverage']:.1f}%, within 10% "
            f"{100 * got['within_10pct']:.1f}%"
        )
    cal = calibration.calibrated()
    print(
        f"calibrated on all sources (what a projection uses): jitter {cal.jitter_cv}, "
        f"overhead {1e3 * cal.overhead_s:g} ms, overlap {cal.overlap}; {cal.error.how()}"
    )
    append_row(
        "projection_check",
        {
            "method": "leave one source out (calibration.check)",
            "summary": total,
            "transformers": transformers,
            "fsdp": sharded,
            "per_source": per_source,
            "defaults_all_sources": {
                "jitter_cv": cal.jitter_cv,
                "overhead_s": cal.overhead_s,
                "overlap": cal.overlap,
                "error_low_per_reach": round(cal.error.low, 4),
                "error_high_per_reach": round(cal.error.high, 4),
            },
            "rows": [
                {
                    "source": r["source"],
                    "what": r["what"],
                    "from_devices": r["from_devices"],
                    "to_devices": r["to_devices"],
                    "projected": round(r["projected"], 1),
                    "low": round(r["low"], 1),
                    "high": round(r["high"], 1),
                    "published": r["published"],
                    "error": round(r["error"], 4),
                    "inside": r["inside"],
                }
                for r in rows
            ],
        },
    )


if __name__ == "__main__":
    main()
