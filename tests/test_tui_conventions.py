"""The TUI follows Textual's conventions (issue 12, item 5): public API only, screens that
watch the app's reactive state instead of being called by name, one app action per thing
the user does, and workers that report back by posting a message."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import textual

from conftest import REPO
from dlscale.engine.launching.plan import Run
from dlscale.engine.session import Session, Snapshot
from dlscale.engine.tracking.queue import QueueRow
from dlscale.engine.tracking.store import Store
from dlscale.tui import queue as tui_queue
from dlscale.tui import results as tui_results
from dlscale.tui.app import DlscaleApp
from test_tui import field, type_into, until
from tui_text import drawn, recorded_study

TUI = REPO / "tui"


def _textual_private_names() -> set[str]:
    """Every underscore name Textual's own classes define or keep on themselves: its
    internals, which may change in any release without notice."""
    names = set()
    for path in Path(textual.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in ("self", "cls")
            ):
                names.add(node.attr)
            elif isinstance(node, ast.ClassDef):
                names |= {
                    b.name
                    for b in node.body
                    if isinstance(b, (ast.FunctionDef, ast.AsyncFunctionDef))
                }
    return {n for n in names if n.startswith("_") and not n.endswith("__")}


def _tui_sources():
    for path in sorted(TUI.glob("*.py")):
        yield path.name, ast.parse(path.read_text(encoding="utf-8"))


# Modules whose underscore names are their public API, not Textual's (os._exit).
STDLIB = ("os", "sys")


def test_tui_uses_no_private_textual_api():
    """No read, write, call or override of a Textual internal (DataTable's `_on_idle`,
    `_updated_cells`, `_clear_caches`...), no private Textual module, and no getattr
    around the rule: a Textual upgrade must not break the TUI silently. A name of our own
    that Textual also uses counts too: it would shadow Textual's."""
    private = _textual_private_names()
    assert {"_on_idle", "_updated_cells", "_clear_caches"} <= private  # the scan sees them
    found = []
    for name, tree in _tui_sources():
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and node.attr in private
                and not (isinstance(node.value, ast.Name) and node.value.id in STDLIB)
            ):
                found.append(f"{name}:{node.lineno}: .{node.attr}")
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in private:
                found.append(f"{name}:{node.lineno}: def {node.name}")
            elif (
                isinstance(node, ast.ImportFrom)
                and node.module
                and any(
                    part.startswith("_") and part != "__future__" for part in node.module.split(".")
                )
            ):
                found.append(f"{name}:{node.lineno}: from {node.module}")
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("getattr", "setattr", "hasattr")
                and len(node.args) > 1
                and isinstance(node.args[1], ast.Constant)
                and str(node.args[1].value).startswith("_")
            ):
                found.append(f"{name}:{node.lineno}: {node.func.id}(..., {node.args[1].value!r})")
    assert found == []


def _workers(tree: ast.Module):
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and any(
            isinstance(d, ast.Call) and getattr(d.func, "id", None) == "work"
            for d in node.decorator_list
        ):
            yield node


def test_workers_report_back_by_posting_messages_only():
    """Every worker ends by posting a Message (tui/messages.py): no call_from_thread, no
    return value for someone to collect, and every message class is one of messages.py."""
    from dlscale.tui import messages

    kinds = {
        n
        for n, v in vars(messages).items()
        if isinstance(v, type)
        and issubclass(v, textual.message.Message)
        and v.__module__ == messages.__name__
    }
    workers, bad = [], []
    for name, tree in _tui_sources():
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr == "call_from_thread":
                bad.append(f"{name}:{node.lineno}: call_from_thread")
        for fn in _workers(tree):
            workers.append(f"{name}:{fn.name}")
            posted = [
                c
                for c in ast.walk(fn)
                if isinstance(c, ast.Call) and getattr(c.func, "attr", None) == "post_message"
            ]
            # messages.ask(self, what, call, reply) posts reply's message or EngineFailed
            asked = [
                c
                for c in ast.walk(fn)
                if isinstance(c, ast.Call) and getattr(c.func, "id", None) == "ask"
            ]
            if not posted and not asked:
                bad.append(f"{name}:{fn.name}: posts no message")
            for c in asked:
                reply = c.args[3] if len(c.args) > 3 else None
                made = (
                    {
                        getattr(getattr(m, "func", None), "id", None)
                        for m in ast.walk(reply)
                        if isinstance(m, ast.Call)
                    }
                    if isinstance(reply, ast.Lambda)
                    else {getattr(reply, "id", None)}
                )
                if not made & kinds:  # the answer comes back as a message of messages.py
                    bad.append(f"{name}:{fn.name}:{c.lineno}: asks with a reply of {made}")
            for c in posted:
                made = c.args[0] if c.args else None
                kind = getattr(getattr(made, "func", None), "id", None)
                if kind not in kinds:
                    bad.append(
                        f"{name}:{fn.name}:{c.lineno}: posts {kind}, not a message "
                        "of tui/messages.py"
                    )
            if any(isinstance(r, ast.Return) and r.value is not None for r in ast.walk(fn)):
                bad.append(f"{name}:{fn.name}: returns a value")
    # The watcher, previews, framework checks, the profile, submit, results, the report,
    # the log lookup, cancel/resubmit and the log tail.
    assert len(workers) >= 10, workers
    assert bad == []


def _rows(experiment: str, n: int, state: str = "PENDING") -> list[QueueRow]:
    return [
        QueueRow(
            f"{experiment[:4]}{i:08x}",
            experiment,
            "pytorch-ddp",
            "resnet20",
            "1x2",
            64,
            i,
            "local",
            f"local-{i}",
            state,
            "",
            None,
            None,
            None,
            None,
        )
        for i in range(n)
    ]


def _snapshot(experiment: str, rows: list[QueueRow], experiments=()) -> Snapshot:
    counts: dict[str, int] = {}
    for r in rows:
        counts[r.state] = counts.get(r.state, 0) + 1
    return Snapshot(experiment, rows, counts, experiments=list(experiments or [experiment]))


async def test_screens_show_a_new_snapshot_without_being_registered(home):
    """The app holds the snapshot as a reactive; the queue screen, the header and the
    results screen follow it, and nothing registers screens for the app to call."""
    app = DlscaleApp(Session(home, "local"), watch=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("f3")
        table = app.screen.query_one(tui_queue.JobTable)
        assert table.row_count == 0
        assert not hasattr(app, "views")
        app.snapshot = _snapshot("alpha", _rows("alpha", 3))
        await pilot.pause()
        assert table.row_count == 3
        assert "alpha: 3 pending" in str(field(app, "queue-summary").render())
        assert app.sub_title.endswith("| 3 pending")
        # A later tick with one run running: the same screen shows it, in place.
        rows = _rows("alpha", 3)
        rows[1] = QueueRow(**{**rows[1].__dict__, "state": "RUNNING", "nodes": "node7"})
        app.snapshot = _snapshot("alpha", rows)
        await pilot.pause()
        assert "RUNNING" in str(table.get_row(rows[1].run_id))
        assert "2 pending, 1 running" in str(field(app, "queue-summary").render())
        # A hidden screen follows too: the queue changes while Results is shown.
        await pilot.press("f4")
        app.snapshot = _snapshot("alpha", _rows("alpha", 5))
        await pilot.press("f3")
        assert app.screen.query_one(tui_queue.JobTable).row_count == 5


def test_next_experiment_is_one_app_action():
    assert hasattr(DlscaleApp, "action_next_experiment")
    for screen in (tui_queue.QueueScreen, tui_results.ResultsScreen):
        assert not hasattr(screen, "action_next_experiment")
        keys = {b.key: b.action for b in screen.BINDINGS}
        assert keys["e"] == "app.next_experiment"


def _second_experiment(home, name: str = "other") -> None:
    store = Store(home)
    store.save_experiment(name, f"{name}.toml", "", "0")
    store.add_run(
        Run(
            name,
            "pytorch-ddp",
            "resnet20",
            "synthetic-cifar",
            1,
            1,
            8,
            8,
            "weak",
            "fp32",
            "native",
            0,
            {"steps": 4},
        )
    )
    store.close()


async def test_e_shows_the_next_experiment_on_the_queue_and_results_screens(home):
    first = recorded_study(home)
    _second_experiment(home)
    app = DlscaleApp(Session(home, "local"))
    async with app.run_test(size=(120, 40)) as pilot:
        await until(
            pilot,
            lambda: app.snapshot and len(app.snapshot.experiments) == 2,
            what="both experiments",
        )
        shown = app.experiment
        await pilot.press("e")
        assert app.experiment != shown
        await until(
            pilot,
            lambda: (
                app.snapshot.experiment == app.experiment
                and app.screen.query_one("#jobs").row_count == len(app.snapshot.rows)
            ),
            what="the other experiment's jobs",
        )
        await pilot.press("f4")
        before = app.experiment
        await pilot.press("e")
        assert app.experiment != before
        # Results reload for the study now chosen, as they did when the screen had its own e:
        # the recorded study's two points, or the other study's one planned run.
        points = 2 if app.experiment == first else 1
        await until(
            pilot,
            lambda: field(app, "results").row_count == points,
            what=f"the results of {app.experiment}",
        )
        planned = app.experiment != first
        assert ("PLANNED" in await drawn(pilot, lambda t: ("PLANNED" in t) == planned)) == planned
        # Offered where it works, by the help (the footer keeps room for F2-F4 at 80x24).
        bound = {b.binding.action for b in app.screen.active_bindings.values()}
        assert "app.next_experiment" in bound


@pytest.mark.framework  # plans pytorch-ddp: needs torch where dlscale runs
async def test_a_refused_profile_is_cleared_when_the_field_goes_back(home, tmp_path):
    """The profile field marks a file that does not validate; emptying the field again
    (this machine, the profile already in use) takes the mark away and allows submitting.
    Before, the worker said nothing when the path was the one in use, so the mark stayed."""
    bad = tmp_path / "bad-cluster.toml"
    bad.write_text('name = "x"\n[[partitions]]\nname = "p"\nnodes = "two"\n')
    app = DlscaleApp(Session(home, "local"), watch=False)
    async with app.run_test(size=(100, 40)) as pilot:
        await until(pilot, lambda: not field(app, "submit").disabled, what="submittable")
        await type_into(pilot, "profile", str(bad))
        # a half-typed path is invalid too (no such file): wait for the whole path's mark
        await until(
            pilot,
            lambda: "partitions[0].nodes" in (field(app, "profile").border_subtitle or ""),
            what="the bad profile's mark",
        )
        assert field(app, "submit").disabled
        await type_into(pilot, "profile", "")
        await until(
            pilot, lambda: not field(app, "profile").has_class("invalid"), what="the mark cleared"
        )
        assert field(app, "profile").border_subtitle is None
        await until(pilot, lambda: not field(app, "submit").disabled, what="submit again")
        assert app.session.backend == "local"
