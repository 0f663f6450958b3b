"""A declared framework's software, as the meter around its script asked the script's own
Python after the run (trainers/common/metered.py, trainers/common/interpreter.py): its
version and its key libraries', so the report's set-up and `compare` say what a script ran
with, as they do for the built-in trainers.

A script read through log patterns gets them in the env record made from its log
(log_patterns.py); a script that writes its own records and leaves libraries out of its
env record gets a second env record after its summary, its own versions kept and the
interpreter's added, which every reader of a run's last env record then sees.
"""

from __future__ import annotations

import json
from typing import Any

from ...trainers.common.records import RecordWriter
from ..io.reading import read_bounded
from ..paths import RunPaths
from .store import Store

SOFTWARE_BYTES = 64 << 10  # a few dozen names and versions
NAME_CHARS = 200


def versions(paths: RunPaths) -> dict[str, str]:
    """{library: version} the run's interpreter held; {} where it was not asked or did not
    answer (a name or version that is not short text is left out)."""
    try:
        data = json.loads(read_bounded(paths.software, SOFTWARE_BYTES, follow=False))
    except (OSError, ValueError, RecursionError):
        return {}
    found = data.get("versions") if isinstance(data, dict) else None
    if not isinstance(found, dict):
        return {}
    return {
        k: v
        for k, v in found.items()
        if isinstance(k, str) and isinstance(v, str) and len(k) + len(v) < NAME_CHARS
    }


def settle(store: Store, run_id: str) -> bool:
    """For a completed run whose script wrote its own env record: a second one with the
    interpreter's versions added where the script gave none. Returns whether one was
    written (the caller ingests it)."""
    row = store.run(run_id)
    paths = RunPaths.of(row)
    probed = versions(paths)
    envs = store.records.of(run_id, "env")
    if not probed or not envs:
        return False
    env: dict[str, Any] = envs[-1]
    own = env.get("framework_versions") or {}
    if not set(probed) - set(own):
        return False  # the script said it all (or this was settled already)
    fields = {k: v for k, v in env.items() if k not in ("kind", "schema", "time")}
    fields["framework_versions"] = {**probed, **own}
    fields["versions_from"] = "the script, and its interpreter as the meter asked it"
    with RecordWriter(str(paths.metrics)) as out:
        out.write("env", **fields)
    return True
