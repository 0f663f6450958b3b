"""One home for a benchmark's row in benchmarks/results.jsonl.

Every row says where its numbers come from in the same words: the benchmark, when it ran
(UTC), the commit it measured (with "+changes" when the tree differed from it), the machine
(host, CPUs and their model) and the load average as the row was written. The benchmark
adds its own fields after those. Rows are appended, never rewritten: earlier rows are the
history docs/benchmarks.md cites."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import time
from pathlib import Path

from dlscale.trainers.common.launch_env import cpu_model  # the env record's words

RESULTS = Path(__file__).with_name("results.jsonl")


def _commit() -> str | None:
    """HEAD's short hash, "+changes" when tracked files differ; None outside a git checkout
    (a device machine gets a copy of the working tree)."""
    repo = Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(
            ["git", "-C", str(repo), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
        )
        if head.returncode != 0:
            return None
        dirty = subprocess.run(
            ["git", "-C", str(repo), "diff", "--quiet", "HEAD", "--"], timeout=10
        ).returncode
    except (OSError, subprocess.TimeoutExpired):
        return None
    return head.stdout.strip() + ("+changes" if dirty else "")


def machine() -> str:
    """The host, its CPU count and model: the words every row uses."""
    return f"{platform.node()} {os.cpu_count()} cpus {cpu_model()}"


def append_row(benchmark: str, fields: dict, path: Path = RESULTS) -> dict:
    """Write one row: the common header, then `fields` (which may add to, not replace, it).
    Returns the row as written."""
    row = {
        "benchmark": benchmark,
        "date": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
        "commit": _commit(),
        "machine": machine(),
        "load_average_1min": round(os.getloadavg()[0], 2),
    }
    clash = sorted(set(row) & set(fields))
    if clash:
        raise ValueError(f"{benchmark}: fields {clash} are the header's")
    row.update(fields)
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(row) + "\n")
    return row
