"""The metric-record format: one JSON object per line, written by rank 0 only.

This module is the single definition of the format. Trainers write through `RecordWriter`;
the engine reads through `parse_record`. It imports only the standard library, because it
runs inside every framework's environment on the compute nodes.

Order in a file: one `params` record first, one `env` record, then `interval` and `eval`
records as training goes, and one `summary` record last. Units are in the field names
(`_s` seconds, `images_per_s`).
"""
from __future__ import annotations

import json
import time
from typing import IO, Any

SCHEMA = 1

# Fields each kind must carry. More fields are allowed: frameworks add their own.
REQUIRED: dict[str, tuple[str, ...]] = {
    "params": ("framework", "model", "dataset", "per_device_batch", "world_size"),
    "env": ("framework_versions", "hostnames", "devices", "world_size", "dlscale_version"),
    "interval": ("step", "images_per_s", "loss"),
    "eval": ("step", "epoch", "top1", "elapsed_s"),
    "summary": ("status", "throughput", "timed_steps", "warmup_steps", "elapsed_s"),
}
KINDS = tuple(REQUIRED)


class RecordError(ValueError):
    """A line that is not a valid metric record."""


class RecordWriter:
    """Appends records to a JSON-lines file, flushed per record so a watcher sees progress
    and a killed run keeps what it wrote. On ranks other than 0 it writes nothing."""

    def __init__(self, path: str | None, enabled: bool = True) -> None:
        self._file: IO[str] | None = None
        if enabled and path:
            self._file = open(path, "a", encoding="utf-8")

    def write(self, kind: str, **fields: Any) -> dict[str, Any]:
        if kind not in REQUIRED:
            raise RecordError(f"unknown record kind {kind!r}; allowed: {', '.join(KINDS)}")
        missing = [f for f in REQUIRED[kind] if f not in fields]
        if missing:
            raise RecordError(f"{kind} record lacks {', '.join(missing)}")
        record = {"kind": kind, "schema": SCHEMA, "time": time.time(), **fields}
        if self._file is not None:
            self._file.write(json.dumps(record, sort_keys=True) + "\n")
            self._file.flush()
        return record

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def __enter__(self) -> "RecordWriter":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def parse_record(line: str) -> dict[str, Any]:
    """Parse one line; raise RecordError naming what is wrong."""
    try:
        record = json.loads(line)
    except json.JSONDecodeError as exc:
        raise RecordError(f"not JSON: {exc.msg}") from None
    if not isinstance(record, dict):
        raise RecordError("a record must be a JSON object")
    kind = record.get("kind")
    if kind not in REQUIRED:
        raise RecordError(f"unknown record kind {kind!r}; allowed: {', '.join(KINDS)}")
    missing = [f for f in REQUIRED[kind] if f not in record]
    if missing:
        raise RecordError(f"{kind} record lacks {', '.join(missing)}")
    return record
