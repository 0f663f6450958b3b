"""How long does reading the end of a log take when it has few line breaks?

A log of 1 GB without a single newline, and 1 GB of carriage-return progress output
(tqdm/Keras redrawing one bar), are written into a temporary folder; the time to get the
last 2 lines (`dlscale logs -n 2`, the TUI's tail) and a failed run's reason line
(`dlscale status` on a failed run) is measured on each (target: < 0.2 s). On smaller files
of the same two kinds the tail before issue 11 (below, unchanged) is timed against the
current one, alternating in each round, for the ratio; the old one grows quadratically,
so it is not run at 1 GB.

    .venv/bin/python benchmarks/logs.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import tempfile
import time
from pathlib import Path

from record import append_row

from dlscale.engine.tracking.logs import failure_reason, tail_lines

GB = 1 << 30
MB = 1 << 20
LABEL = {"no newline": "no newline", "\r progress": "\\r progress"}


# --- the tail before issue 11, verbatim, for the ratio ---------------------------------------

_OLD_ERROR = re.compile(r"dlscale-[\w-]+: error: .*")


def old_tail_lines(path, n=20, block=64 * 1024):
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            pos = fh.tell()
            data = b""
            while pos > 0 and data.count(b"\n") <= n:
                step = min(block, pos)
                pos -= step
                fh.seek(pos)
                data = fh.read(step) + data
    except FileNotFoundError:
        return []
    lines = data.decode("utf-8", errors="replace").splitlines()
    return lines[-n:]


def old_failure_reason(path, context=5):
    lines = old_tail_lines(path, 200)
    if not lines:
        return f"no log at {path}"
    errors = [m.group(0) for line in lines if (m := _OLD_ERROR.search(line))]
    tail = [line for line in lines if line.strip()][-context:]
    head = errors[-1] if errors else tail[-1] if tail else "the job failed without output"
    return "\n".join([head, *("  | " + line for line in tail)])


# --- the logs -------------------------------------------------------------------------------


def unit(kind: str) -> bytes:
    """1 MiB of one kind of output."""
    if kind == "no newline":
        text = b"".join(b"step %d loss 0.%04d " % (i, i % 9999) for i in range(60000))
    else:  # "\r progress": a tqdm bar redrawn with \r, never a newline
        text = b"".join(
            b"\r%3d%%|%-20s| %d/100000 [00:%02d<00:10, 91.2it/s]"
            % (i % 100, b"#" * (i % 100 // 5), i, i % 60)
            for i in range(30000)
        )
    return (text * (MB // len(text) + 1))[:MB]


def write(path: Path, kind: str, size: int, ending: bytes = b"") -> Path:
    block = unit(kind)
    with open(path, "wb") as fh:
        for _ in range(size // MB):
            fh.write(block)
        fh.write(ending)
    return path


def timed(fn, *args) -> float:
    """Milliseconds one call takes."""
    t0 = time.perf_counter()
    fn(*args)
    return (time.perf_counter() - t0) * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="dlscale-bench-logs-") as tmp:
        result = measure(Path(tmp), args.rounds)
    append_row("logs", result)


def measure(folder: Path, rounds: int) -> dict:
    kinds = ("no newline", "\r progress")
    ending = b"\ndlscale-torch-ddp: error: rank 0: injected fault\n"
    result = {
        "rounds": rounds,
        "gb": {},
        "old_vs_new": {},
    }
    print(f"{'log':<14} {'size':>6} {'last 2 lines ms':>16} {'failure reason ms':>18}")
    for kind in kinds:
        path = write(folder / "big.log", kind, GB)
        tails, reasons = [], []
        for _ in range(rounds):
            tails.append(timed(tail_lines, path, 2))
            reasons.append(timed(failure_reason, path))
        assert len(tail_lines(path, 2)) == (1 if kind == "no newline" else 2)
        t, r = statistics.median(tails), statistics.median(reasons)
        print(f"{LABEL[kind]:<14} {'1 GB':>6} {t:>16.2f} {r:>18.2f}")
        result["gb"][kind] = {"tail_ms": tails, "reason_ms": reasons}
        path.unlink()

    print(
        f"\n{'log':<14} {'size':>6} {'old tail ms':>12} {'new tail ms':>12} {'old/new':>9}"
        f" {'old reason ms':>14} {'new reason ms':>14}"
    )
    for kind in kinds:
        for size in (1 * MB, 4 * MB, 16 * MB):
            path = write(folder / "small.log", kind, size, ending)
            runs: dict[str, list[float]] = {"old": [], "new": [], "old_r": [], "new_r": []}
            for _ in range(rounds):  # alternating, so drift hits both alike
                runs["old"].append(timed(old_tail_lines, path, 2))
                runs["new"].append(timed(tail_lines, path, 2))
                if size <= 4 * MB:
                    runs["old_r"].append(timed(old_failure_reason, path))
                runs["new_r"].append(timed(failure_reason, path))
            med = {k: statistics.median(v) if v else None for k, v in runs.items()}
            ratio = med["old"] / med["new"]
            old_r = f"{med['old_r']:>14.1f}" if med["old_r"] is not None else f"{'-':>14}"
            print(
                f"{LABEL[kind]:<14} {size // MB:>4} MB {med['old']:>12.1f} {med['new']:>12.2f} "
                f"{ratio:>9.0f} {old_r} {med['new_r']:>14.2f}"
            )
            result["old_vs_new"][f"{kind} {size // MB} MB"] = {
                "old_tail_ms": runs["old"],
                "new_tail_ms": runs["new"],
                "old_reason_ms": runs["old_r"],
                "new_reason_ms": runs["new_r"],
                "tail_ratio": ratio,
            }
            path.unlink()
    return result


if __name__ == "__main__":
    main()
