"""The code a baseline ran (issue 51, item 1): a declared script edited in place after the
baseline was measured, the most natural change in CI, is never measured as the baseline.
Its bytes are kept when its runs are submitted; `check --interleave` and `rerun` run the
kept copy, and say so; where no copy is kept they refuse before anything runs, naming the
file and both hashes. Real runs of a standard-library script on the local backend (about
20 s on 2 busy cores)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

from conftest import dlscale
from dlscale.engine.tracking.store import Store

SCRIPT = """\
import sys
import time

RATE = {rate}
for step in range(int(sys.argv[1])):
    time.sleep(0.01)
    print(f"step {{step}} throughput {{RATE:.1f}} images/s", flush=True)
"""


def _spec(path: Path, name: str) -> Path:
    path.write_text(f"""\
[experiment]
name = "{name}"
frameworks = ["bench"]
models = ["mlp"]
datasets = ["synthetic"]
scales = ["1x1"]
per_device_batch = [8]
repetitions = 2

[training]
steps = 5

[frameworks.bench]
script = "bench.py"
command = ["{{python}}", "{{script}}", "{{steps}}"]
unit = "images"

[frameworks.bench.log]
throughput = 'throughput ([0-9.]+) images/s$'
throughput_per = "total"
""")
    return path


def _rates(store: Store, run_ids: list[str]) -> list[float]:
    summaries = store.records.last("summary", run_ids)
    return [round(summaries[r]["throughput"], 1) for r in run_ids]


def test_an_edit_in_place_is_never_measured_as_the_baseline(tmp_path, home):
    script = tmp_path / "bench.py"
    script.write_text(SCRIPT.format(rate=100.0))
    base, study = _spec(tmp_path / "base.toml", "base"), _spec(tmp_path / "study.toml", "study")
    dlscale("run", str(base), "--wait", check=0)
    store = Store(home)
    measured = [r["run_id"] for r in store.runs("base")]
    assert _rates(store, measured) == [100.0, 100.0]

    # The change under test, made as CI makes it: the script edited where it lies.
    script.write_text(SCRIPT.format(rate=50.0))
    # The script reports a fixed rate, which other work on the machine cannot move: its
    # pairs count even when the machine is busy (CI), disturbed or not.
    proc = dlscale(
        "check", str(study), "--baseline", "base", "--run", "--interleave",
        "--max-repetitions", "3", "--junit", str(tmp_path / "j.xml"), "--disturbed", "count",
    )  # fmt: skip
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "the baseline's repeats run bench.py as it was measured" in proc.stdout
    repeats = [r["run_id"] for r in store.runs("base") if r["run_id"] not in measured]
    assert repeats and set(_rates(store, repeats)) == {100.0}  # the kept copy ran
    assert set(_rates(store, [r["run_id"] for r in store.runs("study")])) == {50.0}
    junit = (tmp_path / "j.xml").read_text()
    assert "bench.py as it was measured" in junit
    # its runs' time, though a script read from its log measures none of its own
    assert float(ET.fromstring(junit).find("testsuite/testcase").get("time")) > 0.1, junit

    # A plain rerun repeats what the run ran, too.
    dlscale("rerun", measured[0], "--wait", check=0)
    newest = max(store.runs("base"), key=lambda r: r["created"])
    assert newest["run_id"] not in measured + repeats
    assert _rates(store, [newest["run_id"]]) == [100.0]

    # Without the kept copy, nothing runs: refused, naming the file and both hashes.
    for kept in (home / "code").rglob("bench.py"):
        kept.unlink()
    before = len(store.runs())
    proc = dlscale(
        "check", str(study), "--baseline", "base", "--run", "--interleave",
        "--junit", str(tmp_path / "j2.xml"),
    )  # fmt: skip
    assert proc.returncode == 2, proc.stdout + proc.stderr
    said = " ".join(proc.stderr.split())
    assert f"{script} changed since it was measured (sha256 " in said, said
    assert "no copy of what its runs ran is kept" in said and "Traceback" not in said
    assert len(store.runs()) == before
    proc = dlscale("rerun", measured[0], check=2)
    assert "a rerun would measure other code" in " ".join(proc.stderr.split())
    assert len(store.runs()) == before

    # The script put back as measured: repeated as it is, with nothing to say.
    script.write_text(SCRIPT.format(rate=100.0))
    proc = dlscale(
        "check", str(base).replace("base.toml", "study.toml"), "--baseline", "base",
        "--run", "--interleave", "--max-repetitions", "2",
    )  # fmt: skip
    assert "as it was measured" not in proc.stdout
    assert json.loads(newest["training"])["custom"]["script_sha256"]

    # A run from before code was kept: a plain rerun repeats it as it always did (nothing
    # tells whether it changed); a check's baseline it cannot be (--interleave refuses).
    old = measured[1]
    training = json.loads(store.run(old)["training"])
    del training["custom"]["script_sha256"]
    store.update_run(old, training=json.dumps(training, sort_keys=True))
    dlscale("rerun", old, "--wait", check=0)
    proc = dlscale(
        "check", str(study), "--baseline", "base", "--run", "--interleave",
    )  # fmt: skip
    assert proc.returncode == 2 and "cannot be told" in " ".join(proc.stderr.split())
