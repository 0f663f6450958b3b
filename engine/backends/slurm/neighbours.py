"""Whether a job that asked for its nodes whole got them (issue 50): the other jobs Slurm's
accounting says ran on the job's nodes while the run measured. A profile's `exclusive =
true` is a promise Slurm can break (a partition's OverSubscribe=FORCE, a reservation, an
administrator's job); a run that shared its nodes anyway is disturbed, and says with whom.

    sacct --allusers -X --state=RUNNING --nodelist=NODES --starttime=T0 --endtime=T1

lists the jobs (not their steps) that were running on those nodes in that window (with a
time window, sacct's --state selects the jobs in that state during it). Parsed as text,
tested against recorded output."""

from __future__ import annotations

import time
from typing import Any

FIELDS = "JobID,User,JobName,NodeList"
MAX_NAMED = 20  # other jobs named in the record (the count is whole)


def argv(nodes: str, start: float, end: float) -> list[str]:
    def at(t: float) -> str:
        return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t))

    return [
        "sacct",
        "--allusers",
        "-X",
        "--noheader",
        "--parsable2",
        "--state=RUNNING",
        f"--nodelist={nodes}",
        f"--starttime={at(start)}",
        f"--endtime={at(end)}",
        f"--format={FIELDS}",
    ]


def others(stdout: str, own: str) -> list[dict[str, str]]:
    """The jobs in sacct's answer that are not `own` ("123", or an array task "123_4"):
    each with its id, user, name and nodes. Lines of another shape are left out."""
    out = []
    for line in stdout.splitlines():
        parts = line.split("|")
        if len(parts) != 4 or not parts[0]:
            continue
        job, user, name, nodes = parts
        if job == own:
            continue
        out.append({"job": job, "user": user, "name": name, "nodes": nodes})
    return out


def record(
    nodes: str, found: list[dict[str, str]] | None, why: str | None = None
) -> dict[str, Any]:
    """The `neighbours` record's fields: the run's nodes and the other jobs on them (the
    first MAX_NAMED named), or why accounting could not say."""
    if found is None:
        return {"exclusive": True, "nodes": nodes, "unavailable": why}
    return {
        "exclusive": True,
        "nodes": nodes,
        "other_jobs": len(found),
        "named": found[:MAX_NAMED],
    }
