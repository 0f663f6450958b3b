"""A report of several experiments at once (`dlscale report -e A -e B`), from this site or
imported from bundles: their runs and result rows together, each row naming its site, so
the results table gains experiment and site columns and the figures overlay one line per
experiment (charts.series). Only what differs from one experiment's report is here."""

from __future__ import annotations

from typing import Any

from ...runs import RunRow
from ...tracking.store import Store
from .. import analysis
from ..compare import site_of
from ..rows import ResultRow


def several(
    store: Store, experiments: list[dict[str, Any]]
) -> tuple[dict[str, Any], list[RunRow], list[ResultRow]]:
    """(the experiments as one for the page, all their runs, all their rows)."""
    names = [e["name"] for e in experiments]
    sites = {n: site_of(store, n) for n in names}
    runs = [r for n in names for r in store.runs(n)]
    rows: list[ResultRow] = []
    for n in names:
        for r in analysis.results(store, n):
            r["site"] = r["site"] or sites[n]
            rows.append(r)
    combined = {
        "name": " + ".join(names),
        "spec_path": ", ".join(e["spec_path"] or "-" for e in experiments),
        "spec_digest": ", ".join(e["spec_digest"] or "-" for e in experiments),
        "spec_text": "\n".join(
            f"# --- {e['name']} ({sites[e['name']]}) ---\n{e['spec_text'] or ''}"
            for e in experiments
        ),
        "site": None,
    }
    return combined, runs, rows
