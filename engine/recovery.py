"""What a run folder keeps so that a lost store can be rebuilt from it: run.json, the run's
row as submitted (what planned it, which backend, which spec), beside its records."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

RUN_FILE = "run.json"
_FIELDS = ("run_id", "point_id", "experiment", "framework", "model", "dataset", "nodes",
           "ranks_per_node", "devices", "per_device_batch", "global_batch", "scaling",
           "precision", "loader", "repetition", "training", "rerun_of", "created")

def write_run_file(row: dict[str, Any], run_dir: Path, backend: str, spec_path: str = "",
                   spec_digest: str = "") -> None:
    """The run's row as submitted, beside its records, so a lost store can be rebuilt."""
    data = {k: row.get(k) for k in _FIELDS}
    if isinstance(data["training"], str):
        data["training"] = json.loads(data["training"])
    data.update(backend=backend, spec_path=spec_path, spec_digest=spec_digest)
    (run_dir / RUN_FILE).write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
