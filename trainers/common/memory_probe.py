"""The largest transformer a strategy fits: a bounded probe. Standard library only.

`python -m dlscale.trainers.common.memory_probe --memory-limit 2GiB --output probe.jsonl --
CMD...` runs CMD (a trainer's command line with a transformer model, through its launcher:
`python -m dlscale.trainers.common.spawn --ranks 2 -- python -m dlscale.trainers.torch_fsdp
--model gpt-mini ...`) again and again with `--gpt-layers L` added, L growing by about half
each time (1, 2, 3, 4, 6, 8, 12, ...), until an attempt runs out of memory. The last size
that fit, and every attempt's peak memory per rank, go into one `probe` record.

Bounded, so it never takes the machine down:
- each attempt runs under an address-space limit the probe sets itself (RLIMIT_AS, per rank
  process: the ranks inherit it through their launcher), so an allocation past it fails in
  that process alone, as an out-of-memory error;
- each attempt has a deadline, after which its process group (its own session) is ended;
- the probe stops at the first attempt that runs out of memory, and at any other failure
  (said as such: a failure is not a size that did not fit), and after --max-attempts.
On a GPU the device's own memory is the bound (a CUDA out-of-memory error), and the address
space is not limited: CUDA maps far more of it than it uses."""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .memory import LIMIT_KIND, limit_address_space
from .records import RecordWriter

# What a rank says when an allocation fails: torch's CPU and CUDA allocators, Python's,
# C++'s, and a thread or mapping the limit refused.
OUT_OF_MEMORY = re.compile(
    r"can't allocate memory|OutOfMemoryError|CUDA out of memory|MemoryError|"
    r"std::bad_alloc|Cannot allocate memory|failed to allocate",
    re.IGNORECASE,
)
TAIL_BYTES = 64 * 1024  # of each attempt's output, kept to read its reason


def ladder(start: int, attempts: int) -> list[int]:
    """Layer counts growing by about half: 1, 2, 3, 4, 6, 8, 12, 16, ... from `start`."""
    sizes = sorted({m << k for k in range(40) for m in (2, 3)} | {1})
    return [s for s in sizes if s >= start][:attempts]


def _size(text: str) -> int:
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(i?B)?\s*", text, re.IGNORECASE)
    if not m:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size such as 2GiB or 1500MiB")
    scale = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}[m[2].upper()]
    value = int(float(m[1]) * scale)
    if value < 2**28:
        raise argparse.ArgumentTypeError(f"{text}: under 256 MiB no interpreter with torch starts")
    return value


def _last_records(path: Path) -> dict[str, dict]:
    """The last record of each kind an attempt wrote."""
    out: dict[str, dict] = {}
    try:
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict) and isinstance(record.get("kind"), str):
                out[record["kind"]] = record
    except OSError:
        pass
    return out


def attempt(command: list[str], layers: int, limit: int | None, deadline_s: float, folder: Path):
    """One size: (fit, what it measured, why it stopped if it did not fit)."""
    output = folder / f"attempt-{layers}.jsonl"
    log = folder / f"attempt-{layers}.log"
    argv = [*command, "--gpt-layers", str(layers), "--output", str(output)]
    started = time.monotonic()
    with open(log, "wb") as sink:
        proc = subprocess.Popen(
            argv,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own group: ended whole at the deadline
            preexec_fn=(lambda: limit_address_space(limit)) if limit else None,
        )
        try:
            rc = proc.wait(timeout=deadline_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            rc = None
    with open(log, "rb") as f:
        f.seek(max(0, log.stat().st_size - TAIL_BYTES))
        tail = f.read().decode("utf-8", "replace")
    records = _last_records(output)
    summary, params = records.get("summary", {}), records.get("params", {})
    measured = {
        "layers": layers,
        "parameters": params.get("parameters"),
        "peak_memory_bytes_per_rank": summary.get("peak_memory_bytes_per_rank"),
        "seconds": round(time.monotonic() - started, 3),
    }
    if rc == 0 and summary.get("status") == "completed":
        return True, measured, None
    if rc is None:
        return False, measured, f"failed: no answer within {deadline_s:g} s"
    if OUT_OF_MEMORY.search(tail):
        return False, measured, "out of memory"
    lines = [ln for ln in tail.splitlines() if "error" in ln.lower()] or tail.splitlines() or [""]
    return False, measured, f"failed (exit {rc}): {lines[-1].strip()[:300]}"


def probe(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="dlscale-memory-probe", description=__doc__.split("\n")[0])
    p.add_argument("--memory-limit", type=_size, help="address space per rank process (CPU)")
    p.add_argument("--output", required=True, help="where the probe record is appended")
    p.add_argument("--start-layers", type=int, default=1)
    p.add_argument("--max-attempts", type=int, default=12)
    p.add_argument("--attempt-timeout", type=float, default=600.0, help="seconds")
    p.add_argument(
        "--keep", default=None, help="a folder to keep each attempt's records and log in"
    )
    p.add_argument("command", nargs=argparse.REMAINDER)
    args = p.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        p.error("give the trainer's command after --")
    if args.memory_limit is None and "cuda" not in command:
        p.error("give --memory-limit (a CPU probe runs each attempt under it)")
    fits: list[dict] = []
    tried: list[dict] = []
    stopped = "the ladder's end"
    with tempfile.TemporaryDirectory(prefix="dlscale-probe-") as scratch:
        folder = Path(args.keep or scratch)
        folder.mkdir(parents=True, exist_ok=True)
        for layers in ladder(args.start_layers, args.max_attempts):
            fit, measured, why = attempt(
                command, layers, args.memory_limit, args.attempt_timeout, folder
            )
            tried.append({**measured, "fit": fit, **({"reason": why} if why else {})})
            print(f"dlscale-memory-probe: {layers} layers: {'fit' if fit else why}", flush=True)
            if not fit:
                stopped = why or "failed"
                break
            fits.append(measured)
    last = fits[-1] if fits else {}
    with RecordWriter(args.output) as writer:
        writer.write(
            "probe",
            command=command,
            memory_limit_bytes=args.memory_limit,
            memory_limit_kind=LIMIT_KIND if args.memory_limit else None,
            attempts=tried,
            largest_fit_layers=last.get("layers"),
            largest_fit_parameters=last.get("parameters"),
            largest_fit_peak_memory_bytes_per_rank=last.get("peak_memory_bytes_per_rank"),
            stopped_by=stopped,
        )
    # exit 0 when the probe answered its question: it found an out-of-memory size or ran
    # its ladder out; a failure that is not memory leaves the answer unknown
    return 0 if stopped in ("out of memory", "the ladder's end") else 1


if __name__ == "__main__":
    sys.exit(probe())
