"""The app's screen as plain text, for assertions (the same render export_screenshot uses)."""

from __future__ import annotations

import io

from rich.console import Console


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


def recorded_study(home, edit=None) -> str:
    """A store holding the quickstart study as recorded from a real local run (metrics and
    logs in tests/fixtures/tui-quickstart), with fixed job times so screens are repeatable.
    `edit(run_id, lines)` may change a run's metric lines before they are ingested.
    Returns the experiment name."""
    import json
    import shutil
    from pathlib import Path

    from dlscale.engine.config.spec import load_spec
    from dlscale.engine.launching.plan import plan
    from dlscale.engine.tracking.store import Store

    src = Path(__file__).parent / "fixtures" / "tui-quickstart"
    jobs = json.loads((src / "jobs.json").read_text())
    loaded = load_spec(src / "spec.toml")
    store = Store(home)
    store.save_experiment(loaded.spec.experiment.name, "spec.toml", loaded.text, loaded.digest)
    for run in plan(loaded).runs:
        store.add_run(run)
        row = store.start_attempt(run.run_id)
        job = jobs[run.run_id]
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
