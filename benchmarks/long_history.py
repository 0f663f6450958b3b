"""How long does `dlscale check --history` take on a long history (issue 46, item 4)?

Before the change-point search was bounded, a history of 200,000 valid lines (48 MB)
printed its verdict and then spent over 240 s in the change-point step (1,000,000 lines:
over 300 s). This builds histories of that many lines for the recorded quickstart's points
(their values noisy, 10% slower for the last 200 checks, so there is a change to find
within the window searched), and times the whole command end to end as CI runs it (the
real `dlscale check` binary against a bundle baseline: its verdict, its change points and
its lines appended), in wall and in CPU time (on a loaded machine the second is the one
that says what the command costs). Also timed in process: reading the history, and the
change-point search alone.

    .venv/bin/python benchmarks/long_history.py [LINES ...]   (default: 200000 500000 1000000)

A line as this version writes it is about 450 bytes, so 1,000,000 of them (450 MB) pass
the history's 256 MiB bound: the check refuses the file in a sentence (exit 2), which is
timed too.
"""

from __future__ import annotations

import json
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from record import append_row

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
from dlscale.engine.errors import UserError  # noqa: E402
from dlscale.engine.results.regression import history  # noqa: E402
from dlscale.engine.results.regression.changepoints import WINDOW, change_points  # noqa: E402
from tui_text import recorded_study  # noqa: E402  (the tests' recorded quickstart)

DLSCALE = str(Path(sys.executable).parent / "dlscale")
SPEC = REPO / "tests" / "fixtures" / "tui-quickstart" / "spec.toml"


def _cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def _check(
    home: Path, bundle: Path, hist: Path
) -> tuple[float, float, subprocess.CompletedProcess]:
    """The command's wall time and its CPU time (what a loaded machine does not inflate)."""
    argv = [DLSCALE, "--home", str(home), "check", str(SPEC), "--baseline", str(bundle)]
    start, cpu = time.monotonic(), _cpu()
    proc = subprocess.run([*argv, "--history", str(hist)], capture_output=True, text=True)
    return time.monotonic() - start, _cpu() - cpu, proc


def build(template: list[dict], lines: int, path: Path) -> None:
    rng = random.Random(1)
    checks = lines // len(template)
    with open(path, "w", encoding="utf-8") as fh:
        for i in range(checks):
            slower = 0.9 if i >= checks - 200 else 1.0
            for entry in template:
                value = entry["value"] * slower * (1 + rng.gauss(0, 0.02))
                row = {**entry, "values": [value], "value": value, "label": f"c{i}"}
                fh.write(json.dumps(row, sort_keys=True) + "\n")


def main(sizes: list[int]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        home, bundle = base / "home", base / "baseline.tar.gz"
        recorded_study(home)
        subprocess.run(
            [DLSCALE, "--home", str(home), "export", "bundle", "-e", "quickstart"]
            + ["--out", str(bundle), "--site", "there"],
            check=True,
            capture_output=True,
        )
        first = base / "first.jsonl"
        _check(home, bundle, first)
        template = [json.loads(line) for line in first.read_text().splitlines()]
        out = []
        for lines in sizes:
            hist = base / f"h{lines}.jsonl"
            build(template, lines, hist)
            mb = hist.stat().st_size / 1e6
            start = time.monotonic()
            try:
                kept = history.read(hist)
            except UserError as exc:  # past the history's size bound: refused, in a sentence
                kept, refused = None, str(exc)
            read_s = time.monotonic() - start
            start = time.monotonic()
            found = []
            if kept is not None:
                for entry in template:
                    series = kept.series(entry["site"], entry["point"], entry["device"])
                    found = change_points([e.value for e in series if e.value], 0.05)
            search_s = time.monotonic() - start
            took, cpu, proc = _check(home, bundle, hist)
            said = [line for line in proc.stdout.splitlines() if "change point" in line]
            row = {
                "lines": lines,
                "mb": round(mb, 1),
                "points": len(template),
                "window": WINDOW,
                "read_s": round(read_s, 2),
                "change_points_s": round(search_s, 2),
                "found": [c.index for c in found],
                "check_s": round(took, 2),
                "check_cpu_s": round(cpu, 2),
                "exit": proc.returncode,
                "lines_said": said[:2],
                **({} if kept else {"refused": refused}),
            }
            print(json.dumps(row))
            out.append(row)
    append_row("long_history", {"by_lines": out})


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [200_000, 500_000, 1_000_000])
