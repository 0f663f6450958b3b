"""The app's screen as plain text, for assertions (the same render export_screenshot uses)."""

from __future__ import annotations

import io
import time
from collections.abc import Callable

from rich.console import Console

from conftest import HANG_S


def screen_text(app) -> str:
    width, height = app.size
    console = Console(
        width=width,
        height=height,
        file=io.StringIO(),
        force_terminal=True,
        color_system="truecolor",
        record=True,
        legacy_windows=False,
        safe_box=False,
    )
    console.print(
        app.screen._compositor.render_update(full=True, screen_stack=app._background_screens)
    )
    return console.export_text()


async def drawn(pilot, shown: Callable[[str], bool], timeout: float = HANG_S) -> str:
    """The screen's text once `shown(text)` holds, or the last text after `timeout`: a loaded
    machine draws a table's new rows, or a screen's content, a frame or more after the widget
    holds them. The assert that follows says what was drawn when it never was. A screen that
    is right returns at once; the timeout only ends a wait that would never hold (in a full
    run beside the niced other-Python suites, a Results row held by the table was not yet
    drawn after 10 s)."""
    end = time.monotonic() + timeout
    text = screen_text(pilot.app)
    while not shown(text) and time.monotonic() < end:
        await pilot.pause(0.1)
        text = screen_text(pilot.app)
    return text


def recorded_study(home, edit=None, comm: bool = False) -> str:
    """A store holding the quickstart study as recorded from a real local run (metrics and
    logs in tests/fixtures/tui-quickstart), with fixed job times so screens are repeatable.
    `edit(run_id, lines)` may change a run's metric lines before they are ingested. `comm`:
    the quickstart as examples/quickstart.toml has it now, its 2-rank communication
    benchmark too (tests/fixtures/quickstart-comm, recorded from a real run).
    Returns the experiment name."""
    import json
    import shutil
    from pathlib import Path

    from dlscale.engine.config.spec import load_spec
    from dlscale.engine.launching.plan import plan
    from dlscale.engine.tracking.store import Store

    fixtures = Path(__file__).parent / "fixtures"
    folders = [fixtures / "tui-quickstart"] + ([fixtures / "quickstart-comm"] if comm else [])
    jobs = {}
    for folder in folders:
        jobs.update(
            {k: (folder, v) for k, v in json.loads((folder / "jobs.json").read_text()).items()}
        )
    loaded = load_spec(folders[-1] / "spec.toml")
    store = Store(home)
    store.save_experiment(loaded.spec.experiment.name, "spec.toml", loaded.text, loaded.digest)
    for run in plan(loaded).runs:
        store.add_run(run)
        row = store.start_attempt(run.run_id)
        src, job = jobs[run.run_id]
        for name in ("metrics.jsonl", "run.log"):
            shutil.copy(src / "runs" / run.run_id / name, Path(row["run_dir"]) / name)
        if edit is not None:
            metrics = Path(row["run_dir"]) / "metrics.jsonl"
            lines = edit(run.run_id, metrics.read_text().splitlines(keepends=True))
            metrics.write_text("".join(lines))
        store.jobs.add("local", job["job_id"], run.run_id, job["state"])
        store.jobs.update(
            "local",
            job["job_id"],
            state=job["state"],
            nodes="localhost",
            started=1_000.0,
            ended=1_000.0 + job["elapsed_s"],
        )
        store.records.ingest(run.run_id, Path(row["run_dir"]) / "metrics.jsonl")
        store.update_run(run.run_id, state=job["state"])
    store.close()
    return loaded.spec.experiment.name


AXIS_SPEC = """\
[experiment]
name = "models-x-batches"
frameworks = ["gpt"]
models = ["gpt2-tiny", "gpt2-small", "gpt2-medium", "gpt2-large"]
datasets = ["synthetic-tokens"]
scales = ["1x1", "1x2"]
per_device_batch = [8, 16]
precisions = ["fp32"]
repetitions = 1

[experiment.axes]
mode = ["fail", "ok"]

[training]
steps = 6
warmup_steps = 2

[frameworks.gpt]
script = "{script}"
command = ["{{python}}", "{{script}}", "--mode", "{{mode}}"]
launcher = "torchrun"
unit = "tokens"
"""


def axis_study(home) -> str:
    """A study as a new user writes one: 4 models x 2 batch sizes x 1 and 2 ranks of a
    declared framework, with an axis of its own (`mode = fail/ok`): the `fail` runs failed,
    the `ok` ones measured a throughput that falls with the model's size. Fixed numbers and
    job times, so screens are repeatable. Returns the experiment name."""
    import json
    from pathlib import Path

    from dlscale.engine.config.spec import load_spec
    from dlscale.engine.launching.plan import plan
    from dlscale.engine.tracking.store import Store

    home = Path(home)
    home.mkdir(parents=True, exist_ok=True)
    script = Path(__file__).parent.parent / "examples" / "custom" / "gpt.py"
    spec = home / "models-x-batches.toml"
    spec.write_text(AXIS_SPEC.format(script=script))
    loaded = load_spec(spec)
    store = Store(home)
    store.save_experiment(loaded.spec.experiment.name, str(spec), loaded.text, loaded.digest)
    size = {"gpt2-tiny": 1, "gpt2-small": 2, "gpt2-medium": 4, "gpt2-large": 8}
    for i, run in enumerate(plan(loaded).runs):
        store.add_run(run)
        row = store.start_attempt(run.run_id)
        job = f"local-{i + 1}"
        failed = run.training["axes"]["mode"] == "fail"
        metrics = Path(row["run_dir"]) / "metrics.jsonl"
        throughput = 24000.0 * run.per_device_batch / 8 / size[run.model] * run.devices**0.9
        summary = {"status": "completed", "throughput": round(throughput, 1)}
        summary |= {"timed_steps": 6, "warmup_steps": 2, "elapsed_s": 3.0}
        metrics.write_text(
            ""
            if failed
            else json.dumps({"kind": "summary", "schema": 1, "time": 0.0, **summary}) + "\n"
        )
        Path(row["run_dir"], "run.log").write_text(
            "RuntimeError: asked to fail (--mode fail)\n" if failed else "done\n"
        )
        state = "FAILED" if failed else "COMPLETED"
        store.jobs.add("local", job, run.run_id, state)
        store.jobs.update(
            "local", job, state=state, nodes="localhost", started=1000.0 + i, ended=1010.0 + i
        )
        store.records.ingest(run.run_id, metrics)
        store.update_run(
            run.run_id,
            state=state,
            reason="RuntimeError: asked to fail (--mode fail)" if failed else None,
        )
    store.close()
    return loaded.spec.experiment.name
