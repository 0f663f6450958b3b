"""The build screen: choose frameworks, models, datasets, scales and the rest, see the run
count and device-hours before submitting, load and save the choices as a spec file.

The form keeps the spec as a dict (what was loaded, with the form's fields on top), so keys
the form does not show (warm-up, threads, target accuracy) survive a load-edit-save."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.timer import Timer
from textual.widgets import Button, Footer, Header, Input, SelectionList
from textual.widgets.selection_list import Selection
from textual.worker import get_current_worker

from ..engine.session import CHOICES, Preview, Session, Snapshot
from .dialogs import PathScreen
from .errors import describe
from .form import FIELDS, LISTS, TITLES, as_list, field_of, split_words
from .messages import ClusterChosen, FrameworksChecked, PreviewReady, StudyFound, ask
from .screens import AppScreen
from .submit import SubmitButton
from .widgets import Banner, Choices, Plain, StatusLine, TextField, literal

DEFAULTS: dict[str, Any] = {
    "experiment": {
        "name": "my-study",
        "frameworks": ["pytorch-ddp"],
        "models": ["resnet20"],
        "datasets": ["synthetic-cifar"],
        "scales": ["1x1", "1x2"],
        "per_device_batch": [64],
        "precisions": ["auto"],
        "loaders": ["native"],
        "repetitions": 3,
    },
    "training": {"steps": 30, "warmup_steps": 5},
}
# A change is checked once typing pauses this long: checking on every key kept the app's
# message loop busy, and the preview is only read when the hands stop.
PREVIEW_DELAY = 0.15


class BuildScreen(AppScreen):
    # The tooltips are the help's and the command palette's words (tui/keys.py).
    BINDINGS = [
        Binding("ctrl+r", "submit", "Submit", priority=True, tooltip="submit the study"),
        Binding("ctrl+s", "save", "Save", priority=True, tooltip="save the choices as a spec file"),
        Binding("ctrl+o", "open", "Open", priority=True, tooltip="open a spec file"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.data: dict[str, Any] = copy.deepcopy(DEFAULTS)
        self.loaded_from: str | None = None  # the file the form was filled from, unchanged
        self.loaded_data: dict[str, Any] | None = None
        self.preview: Preview | None = None
        self.file_problems: list[str] = []  # the opened file's own errors (file:line)
        self._serial = 0
        self._filling = False
        self._bad: dict[str, str] = {}
        self._file_had_data = False
        self.frameworks_checked = False
        self._preview_timer: Timer | None = None
        self.checked_serial = -1  # the form change the panel shows
        self._counts_seen: dict[str, int] | None = None  # the study's runs by state
        self.shown_data: dict[str, Any] = self.data  # what the lists' choices come from
        self.submit_when_checked = False  # ctrl+r came while a change was being checked

    def compose(self) -> ComposeResult:
        yield Header()
        yield Banner(id="banner")
        with Horizontal(id="build"):
            # Not a stop of its own for tab: the fields are (each scrolls into view).
            with VerticalScroll(id="form", can_focus=False):
                yield self._text_field("name")
                yield Choices(id="frameworks")
                yield Choices(id="models")
                yield Choices(id="datasets")
                yield self._text_field("scales", "1x1, 1x2, 2x2")
                yield self._text_field("batch", "64, 128")
                yield Choices(id="precisions")
                yield Choices(id="loaders")
                yield self._text_field("repetitions", "3")
                yield self._text_field("steps", "30")
                yield self._text_field("path", "where ctrl+s saves, e.g. my-study.toml")
                yield self._text_field("profile", "empty: this machine (local backend)")
            with Vertical(id="preview-pane"):
                # Scrolls (tab to it): a long list of errors never hides under the button.
                with VerticalScroll(id="preview-scroll"):
                    yield Plain(id="preview")
                yield SubmitButton(id="submit")
        yield StatusLine(classes="status")
        yield Footer(compact=True, show_command_palette=False)

    @staticmethod
    def _text_field(wid: str, placeholder: str = "") -> Input:
        w = TextField(placeholder=placeholder, id=wid)
        w.border_title = TITLES[wid]
        return w

    def on_mount(self) -> None:
        for wid in LISTS:
            self.query_one(f"#{wid}").border_title = TITLES[wid]
        # Whether a framework's environment works is asked of its python (a subprocess per
        # framework): in a worker, with the list filled in when the answers come.
        self.query_one("#frameworks", SelectionList).add_options(
            [
                Selection(
                    literal(f"{name} (checking its environment...)"), name, False, disabled=True
                )
                for name in CHOICES["frameworks"]
            ]
        )
        self._check_frameworks(self.data)
        self.offer(CHOICES)
        profile = self.app.session.profile
        self.query_one("#profile", Input).value = profile.path if profile else ""
        if self.app.spec_path:
            self.load(self.app.spec_path)
        else:
            self.fill(self.data)
            if self.app.experiment:  # reopened on a study: the form shows it, not defaults
                self._find_study(self.app.experiment)
        # A list, not a text field: the keys are commands until a field is chosen (q quits).
        self.query_one("#frameworks", SelectionList).focus()
        # Completed runs change what the preview says ("7 to run"): check it again.
        self.watch(self.app, "snapshot", self._snapshot_changed, init=False)

    def _snapshot_changed(self, snap: Snapshot | None) -> None:
        if snap is None:
            return
        counts = snap.counts if snap.experiment == self.form_experiment() else None
        if counts is not None and counts != self._counts_seen:
            self._counts_seen = counts
            self.changed()

    def form_experiment(self) -> str:
        return self.query_one("#name", Input).value.strip()

    @work(thread=True, exclusive=True, group="study", exit_on_error=False)
    def _find_study(self, experiment: str) -> None:
        session = self.app.session
        ask(
            self,
            "opening the study",
            lambda: session.study_spec(experiment),
            lambda path: StudyFound(path) if path else None,
        )

    def on_study_found(self, message: StudyFound) -> None:
        message.stop()
        if self.loaded_from is None:  # the user opened nothing meanwhile
            self.load(message.path)

    def offer(self, choices: dict[str, tuple[str, ...]]) -> None:
        """The lists' choices (a spec that declares its own framework brings its own models
        and datasets); a list is filled anew only when its choices change."""
        for wid in LISTS[1:]:
            sl = self.query_one(f"#{wid}", SelectionList)
            if tuple(o.value for o in sl.options) != choices[wid]:  # type: ignore[attr-defined]
                chosen = set(sl.selected)
                sl.clear_options()
                sl.add_options([Selection(literal(v), v, v in chosen) for v in choices[wid]])

    @work(thread=True, exclusive=True, group="frameworks", exit_on_error=False)
    def _check_frameworks(self, data: dict[str, Any]) -> None:
        session = self.app.session
        ask(
            self,
            "checking the frameworks",
            lambda: session.framework_choices(data),
            FrameworksChecked,
        )

    def on_frameworks_checked(self, message: FrameworksChecked) -> None:
        message.stop()
        choices = message.choices
        fw = self.query_one("#frameworks", SelectionList)
        wanted = set(as_list(self.data.get("experiment", {}).get("frameworks")))
        wanted |= set(fw.selected)
        self._filling = True
        fw.clear_options()
        fw.add_options(
            [
                Selection(
                    literal(c.name if c.usable else f"{c.name} ({c.why})"),
                    c.name,
                    c.name in wanted,
                    disabled=not c.usable,
                )
                for c in choices
            ]
        )
        self._filling = False
        self.frameworks_checked = True
        self.changed()

    # --- form <-> data -------------------------------------------------------------------

    def fill(self, data: dict[str, Any]) -> None:
        choices = Session.spec_choices(data)
        if choices["frameworks"] != Session.spec_choices(self.shown_data)["frameworks"]:
            self._check_frameworks(copy.deepcopy(data))  # its declared frameworks listed
        self.shown_data = data
        self._filling = True
        self.offer(choices)
        exp, training = data.get("experiment", {}), data.get("training", {})
        batch = exp.get("per_device_batch", exp.get("global_batch", []))
        texts = {
            "name": exp.get("name") if isinstance(exp.get("name"), str) else "",
            "scales": ", ".join(
                str(s) if not isinstance(s, dict) else f"{s.get('nodes')}x{s.get('ranks_per_node')}"
                for s in as_list(exp.get("scales", []))
            ),
            "batch": ", ".join(str(b) for b in as_list(batch)),
            "repetitions": str(exp.get("repetitions", 3)),
            "steps": str(training.get("steps", "")),
            "path": self.loaded_from or "",
        }
        for wid, text in texts.items():
            self.query_one(f"#{wid}", Input).value = text
        for wid in LISTS:
            sl = self.query_one(f"#{wid}", SelectionList)
            sl.deselect_all()
            for v in as_list(exp.get(wid, DEFAULTS["experiment"].get(wid, []))):
                if isinstance(v, str) and v in choices[wid]:
                    sl.select(v)
        self.batch_title()
        self._filling = False
        self.changed()

    def batch_title(self) -> None:
        strong = self.data.get("experiment", {}).get("scaling") == "strong"
        self.query_one("#batch").border_title = (
            "Global batch (strong scaling)" if strong else TITLES["batch"]
        )

    def read_form(self) -> tuple[dict[str, Any], dict[str, str]]:
        """The spec dict the form shows, and the fields that do not even parse."""
        data = copy.deepcopy(self.data)
        exp = data.setdefault("experiment", {})
        training = data.setdefault("training", {})
        bad: dict[str, str] = {}
        exp["name"] = self.query_one("#name", Input).value.strip()
        for wid in LISTS:
            exp[wid] = list(self.query_one(f"#{wid}", SelectionList).selected)
        exp["scales"] = split_words(self.query_one("#scales", Input).value)
        batch_key = "global_batch" if exp.get("scaling") == "strong" else "per_device_batch"
        for wid, (table, key) in {
            "batch": (exp, batch_key),
            "repetitions": (exp, "repetitions"),
            "steps": (training, "steps"),
        }.items():
            words = split_words(self.query_one(f"#{wid}", Input).value)
            try:
                values = [int(w) for w in words]
            except ValueError:
                bad[wid] = f"{' '.join(words)!r} is not a whole number"
                continue
            if wid == "batch":
                table[key] = values
            elif len(values) != 1:
                bad[wid] = "give one whole number"
            else:
                table[key] = values[0]
        if "steps" in training and training.get("steps") is not None:
            training.pop("epochs", None)  # the form sets steps; a spec gives one of the two
        return data, bad

    def changed(self) -> None:
        """The form changed: check it once typing pauses (PREVIEW_DELAY)."""
        if self._filling or not self.is_mounted:
            return
        self._serial += 1  # a preview under way is of an older form now
        # Until the new form is checked, what the panel says is of the old one.
        self.query_one("#submit", Button).disabled = True
        if self._preview_timer is not None:
            self._preview_timer.stop()
        self._preview_timer = self.set_timer(PREVIEW_DELAY, self.check_form)

    def check_form(self) -> None:
        self._preview_timer = None
        data, bad = self.read_form()
        self._bad = bad
        self._run_preview(data, self._serial)

    @work(thread=True, exclusive=True, group="preview", exit_on_error=False)
    def _run_preview(self, data: dict[str, Any], serial: int) -> None:
        session, name = self.app.session, self._shown_name(data)
        ask(
            self,
            "preview",
            lambda: session.preview(data, name),
            # a later edit's preview is under way: this one is stale
            lambda p: None if get_current_worker().is_cancelled else PreviewReady(p, serial),
        )

    def on_preview_ready(self, message: PreviewReady) -> None:
        if message.serial != self._serial:
            return  # the form changed since; a newer preview is coming
        self.checked_serial = message.serial
        self.preview = p = message.preview
        by_field: dict[str, list[str]] = {}
        general: list[str] = []
        for pr in p.problems:
            wid = field_of(pr.field)
            (by_field.setdefault(wid, []) if wid else general).append(
                pr.message if wid else str(pr)
            )
        for wid, msg in self._bad.items():
            by_field[wid] = [msg]
        for wid in FIELDS:
            w = self.query_one(f"#{wid}")
            msgs = by_field.get(wid)
            w.set_class(bool(msgs), "invalid")
            w.border_subtitle = literal("; ".join(msgs)) if msgs else None
        lines: list[str] = []
        if self.file_problems:
            lines += ["The spec file does not validate:", *self.file_problems]
            if self.loaded_data is None and not self._file_had_data:
                lines.append("(the form shows defaults; ctrl+s saves a valid spec)")
            lines.append("")
        if p.ok and not self._bad and p.totals is not None:
            lines += [
                p.totals.words(),  # as `dlscale plan` says it
                p.estimate
                if p.to_run
                else "nothing to run: every run is queued, running or completed (queue: F3)"
                if p.active
                else "nothing to run: every run completed earlier (results: F4)",
            ]
            if p.limit_hours is not None:
                lines.append(f"at most {p.limit_hours:.2f} device-hours at the time limit")
            lines += ["", "ctrl+r submits"]
        else:
            lines += ["Cannot submit yet:"] + [f"- {g}" for g in general]
            # Each field's reason whole here: its border has one line for it.
            lines += [f"- {TITLES[w]}: {'; '.join(m)}" for w, m in by_field.items()]
        self.query_one("#preview", Plain).update("\n".join(lines))
        self.query_one("#submit", Button).disabled = (
            not (p.ok and not self._bad)
            or self.query_one("#profile", Input).has_class("invalid")
            or self.query_one(SubmitButton).submitting
        )
        if self.submit_when_checked:
            self.submit_when_checked = False
            self.action_submit()

    @property
    def checking(self) -> bool:
        """A change of the form has not been checked yet (the panel shows an older one)."""
        return self.checked_serial != self._serial

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "profile":
            self._use_cluster(event.value.strip())
        elif event.input.id != "path":
            self.changed()

    @work(thread=True, exclusive=True, group="cluster", exit_on_error=False)
    def _use_cluster(self, path: str) -> None:
        session = self.app.session
        current = session.profile.path if session.profile else ""
        if path == current:  # the field may still show another file's problem: clear it
            self.post_message(ClusterChosen(changed=False))
            return
        try:
            session.use_cluster(path or None)
        except Exception as exc:
            self.post_message(ClusterChosen(describe(exc)))
            return
        self.post_message(ClusterChosen())

    def on_cluster_chosen(self, message: ClusterChosen) -> None:
        message.stop()
        w = self.query_one("#profile", Input)
        if message.problem is not None:
            w.add_class("invalid")
            w.border_subtitle = literal(message.problem.splitlines()[0])
            self.query_one("#submit", Button).disabled = True
            return
        if not message.changed and not w.has_class("invalid"):
            return
        w.remove_class("invalid")
        w.border_subtitle = None
        if message.changed:
            snap = self.app.snapshot
            self.app.show_where(snap.polled if snap else ())
        self.changed()

    def on_selection_list_selected_changed(self, event: SelectionList.SelectedChanged) -> None:
        self.changed()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "submit":
            self.action_submit()

    # --- submitting: whether the form may go; the button submits it -------------------

    def action_submit(self) -> None:
        button = self.query_one(SubmitButton)
        if button.submitting:
            self.notify(
                "a submission is under way; the queue (F3) shows its runs as "
                "SUBMITTING, and a message says when it is done",
                severity="warning",
            )
            return
        if self.checking:  # the last keys are being checked: submit once they pass
            self.submit_when_checked = True
            return
        data, bad = self.read_form()
        p = self.preview
        if (
            bad
            or p is None
            or not p.ok
            or self.preview_stale(data)
            or self.query_one("#profile", Input).has_class("invalid")
        ):
            self.notify(
                "the study cannot be submitted yet: see the fields in red and the "
                "panel on the right",
                severity="error",
            )
            return
        path = self._spec_name(data)
        assert p.loaded is not None  # p.ok
        button.submit(data, path, saved=path == self.loaded_from, runs=p.to_run, loaded=p.loaded)

    def preview_stale(self, data: dict[str, Any]) -> bool:
        return (
            self.preview is None
            or self.preview.loaded is None
            or self.preview.loaded.spec.model_dump() != spec_dump(data)
        )

    # --- files ---------------------------------------------------------------------------

    def load(self, path: str) -> None:
        data, problems = Session.read_spec(path)
        self.file_problems = problems
        if problems:
            self.notify(
                "\n".join(problems[:5]),
                title=f"{path} does not validate",
                severity="error",
                timeout=15,
            )
        self.loaded_from = path
        self._file_had_data = bool(data)
        # Tables the form does not show ride along; a misshapen one (`training = 5`) starts empty.
        self.data = (
            {
                **copy.deepcopy(data),
                **{t: dict(v if isinstance(v := data.get(t), dict) else {}) for t in DEFAULTS},
            }
            if data
            else copy.deepcopy(DEFAULTS)
        )
        self.loaded_data = copy.deepcopy(self.data) if not problems else None
        self.fill(self.data)
        name = self.data["experiment"].get("name")
        if isinstance(name, str) and name:
            self.app.experiment = name  # the queue and results screens show this study

    def action_open(self) -> None:
        def opened(path: str | None) -> None:
            if path:
                if not Path(path).is_file():
                    self.notify(f"{path}: no such file", severity="error")
                    return
                self.load(path)

        self.app.push_screen(PathScreen("Open a spec file", self.loaded_from or ""), opened)

    def action_save(self) -> None:
        path = self.query_one("#path", Input).value.strip()
        if not path:
            self.notify(
                "give the spec file's path in the 'Spec file' field first", severity="warning"
            )
            self.query_one("#path", Input).focus()
            return
        data, bad = self.read_form()
        if bad:
            self.notify("fix the fields marked in red first", severity="error")
            return
        try:
            Session.save_spec(data, path)
        except Exception as exc:
            self.notify(describe(exc), title="not saved", severity="error", timeout=10)
            return
        self.loaded_from, self.loaded_data, self.file_problems = path, data, []
        self.notify(f"saved {path}")

    def _shown_name(self, data: dict[str, Any]) -> str:
        """What the preview's messages call the spec: the file it is, or the form, which
        is saved (beside the store) only when it is submitted."""
        if self.loaded_from and data == self.loaded_data:
            return self.loaded_from
        return "the form"

    def _spec_name(self, data: dict[str, Any]) -> str:
        if self.loaded_from and data == self.loaded_data:
            return self.loaded_from
        name = data.get("experiment", {}).get("name") or "study"
        return str(self.app.session.home / "specs" / f"{name}.toml")


def spec_dump(data: dict[str, Any]) -> dict[str, Any] | None:
    loaded, _ = Session.check_spec(data)
    return loaded.spec.model_dump() if loaded else None
