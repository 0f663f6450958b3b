"""`dlscale-tui`: wires the three screens (build, queue, results) to one engine Session and
runs the watcher that keeps the queue fresh. Screens render; the engine is called only from
worker threads, whose news comes back as messages.

What the screens show of the study is the app's reactive state (the last snapshot, the
warning, the experiment): each screen watches what it needs, so the app never has to know
which screens exist."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from pathlib import Path

import click
from textual import work
from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.notifications import SeverityLevel
from textual.reactive import reactive, var
from textual.screen import Screen
from textual.timer import Timer
from textual.worker import get_current_worker

from ..engine.errors import DlscaleError
from ..engine.session import Backoff, Session, Snapshot, given_as
from ..engine.text import is_utf8, printable
from .build import BuildScreen
from .dialogs import HelpScreen
from .errors import describe
from .messages import EngineFailed, QueueRefreshed
from .queue import QueueScreen
from .results import METRICS as RESULTS_METRICS
from .results import ResultsScreen


class DlscaleApp(App):
    CSS_PATH = "dlscale.tcss"
    TITLE = "dlscale"
    # ctrl+p: every action by name, for what the footer has no room to show.
    ENABLE_COMMAND_PALETTE = True
    MODES = {"build": BuildScreen, "queue": QueueScreen, "results": ResultsScreen}
    # F-keys work while typing in a field; the digits and letters work everywhere else.
    BINDINGS = [
        Binding("f1", "help", "Help", priority=True),
        Binding("f2", "show('build')", "Build", priority=True),
        Binding("f3", "show('queue')", "Queue", priority=True),
        Binding("f4", "show('results')", "Results", priority=True),
        Binding("ctrl+q", "quit", "Quit", show=False, priority=True),
        # Moving between fields with priority: the app then moves the focus before it hands
        # on the keys typed after tab, which otherwise could land in the field just left.
        Binding("tab", "focus_next", "Next field", show=False, priority=True),
        Binding("shift+tab", "focus_previous", "Previous field", show=False, priority=True),
        Binding("question_mark", "help", "Help", show=False),
        Binding("1", "show('build')", "Build", show=False),
        Binding("2", "show('queue')", "Queue", show=False),
        Binding("3", "show('results')", "Results", show=False),
        Binding("q", "quit", "Quit", show=False),
    ]

    snapshot: var[Snapshot | None] = var(None)  # the watcher's last tick
    warning: reactive[str | None] = reactive(None)  # controller unreachable: why
    experiment: reactive[str | None] = reactive(None)  # the study the screens show

    def __init__(self, session: Session, spec_path: str | None = None, watch: bool = True) -> None:
        super().__init__()
        self.session = session
        self.spec_path = spec_path
        self._watch = watch
        self._backoff = Backoff(first=0.5, cap=5.0)
        self._poll_timer: Timer | None = None

    def on_mount(self) -> None:
        self.sub_title = self.session.where
        known = self.session.experiments()
        if not self.spec_path and known:
            self.experiment = known[0]
            self.switch_mode("queue")
        else:
            self.switch_mode("build")
        if self._watch:
            self.poll_now()

    def watch_experiment(self, experiment: str | None) -> None:
        self.title = printable(f"dlscale: {experiment}") if experiment else "dlscale"
        self.poll_now()

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        """The palette (ctrl+p): dlscale's actions first, by what they do, then Textual's."""
        yield SystemCommand("Build: choose a study", "F2", lambda: self.action_show("build"))
        yield SystemCommand("Queue: the study's jobs", "F3", lambda: self.action_show("queue"))
        yield SystemCommand("Results: tables and charts", "F4", lambda: self.action_show("results"))
        yield SystemCommand("Next experiment", "e", self.action_next_experiment)
        yield SystemCommand("Help: every key", "F1", self.action_help)
        for name, help_text, action in (
            ("Submit the study", "ctrl+r on Build", "submit"),
            ("Save the study as a spec file", "ctrl+s on Build", "save"),
            ("Open a spec file", "ctrl+o on Build", "open"),
            ("Write the report", "w on Results", "write_report"),
            ("Sort the queue", "o on Queue", "sort"),
            ("Filter the queue", "/ on Queue", "search"),
        ):
            if hasattr(screen, f"action_{action}"):
                yield SystemCommand(name, help_text, getattr(screen, f"action_{action}"))
        yield from super().get_system_commands(screen)

    # --- navigation ----------------------------------------------------------------------

    def action_show(self, mode: str) -> None:
        if self.current_mode != mode:
            self.switch_mode(mode)

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen(RESULTS_METRICS))

    def action_next_experiment(self) -> None:
        """The next study the store knows (the Queue and Results screens bind it to e)."""
        names = self.snapshot.experiments if self.snapshot else []
        if len(names) < 2:
            return
        at = names.index(self.experiment) if self.experiment in names else -1
        self.experiment = names[(at + 1) % len(names)]

    # --- the watcher ---------------------------------------------------------------------

    def poll_now(self) -> None:
        """Refresh at once (after a submission, a cancel, a change of experiment)."""
        if not self._watch:
            return
        self._backoff.reset()
        if self._poll_timer is not None:
            self._poll_timer.stop()
            self._poll_timer = None
        self._refresh_queue(self.experiment)

    @work(thread=True, exclusive=True, group="watch", exit_on_error=False)
    def _refresh_queue(self, experiment: str | None) -> None:
        try:
            snap = self.session.refresh(experiment)
        except Exception as exc:  # shown in the banner; the next tick tries again
            if not get_current_worker().is_cancelled:
                self.post_message(EngineFailed("refresh", describe(exc)))
            return
        if not get_current_worker().is_cancelled:
            self.post_message(QueueRefreshed(snap))

    def on_queue_refreshed(self, message: QueueRefreshed) -> None:
        snap, before = message.snapshot, self.snapshot
        if snap.experiment != self.experiment:
            return  # an answer for the study the user just left
        self.snapshot = snap
        if before is None or before.counts != snap.counts or snap.new_records:
            self._backoff.reset()
        self._rearm()

    def watch_snapshot(self, snap: Snapshot | None) -> None:
        if snap is None:
            return
        # the backend's own sentence: a scheduler that did not answer, a local worker that
        # cannot run (and why)
        self.warning = snap.problem if snap.warning or not snap.reachable else None
        counts = ", ".join(f"{n} {s.lower()}" for s, n in sorted(snap.counts.items()))
        self.sub_title = f"{self.session.where} | {counts or 'no runs yet'}"

    def on_engine_failed(self, message: EngineFailed) -> None:
        if message.what == "refresh":
            self.warning = f"cannot refresh the queue: {message.message}; retrying"
            self._rearm()
        else:
            self.notify(
                message.message, title=f"{message.what} failed", severity="error", timeout=10
            )

    def notify(
        self,
        message: str,
        *,
        title: str = "",
        severity: SeverityLevel = "information",
        timeout: float | None = None,
        markup: bool = False,
    ) -> None:
        """Every toast is literal, whatever a caller (a screen, a widget) asks: its text
        comes from users, files and the engine (a path or a spec key may hold `[/]`), and
        control characters in it are shown as signs, not sent to the terminal."""
        super().notify(
            printable(message, newlines=True),
            title=printable(title),
            severity=severity,
            timeout=timeout,
            markup=False,
        )

    def _rearm(self) -> None:
        # One timer re-armed per finished poll, never stacked intervals.
        if self._watch:
            self._poll_timer = self.set_timer(
                self._backoff.next(), lambda: self._refresh_queue(self.experiment)
            )


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("spec", required=False, type=click.Path(dir_okay=False))
@click.option(
    "--profile",
    "profile_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="cluster profile TOML (examples/clusters/)",
)
@click.option(
    "--backend",
    type=click.Choice(["local", "slurm"]),
    default=None,
    help="default: slurm with --profile, else local",
)
@click.option("--partition", default=None, help="partition of the profile")
@click.option(
    "--home",
    envvar="DLSCALE_HOME",
    type=click.Path(),
    default=None,
    help="where the store and run folders live (default ~/.dlscale)",
)
def main(
    spec: str | None,
    profile_path: str | None,
    backend: str | None,
    partition: str | None,
    home: str | None,
) -> None:
    """The dlscale terminal app: build a scaling study, watch its jobs, read its results."""
    bad = next((v for v in (spec, profile_path, home, partition) if v and not is_utf8(v)), None)
    if bad is not None:  # as `dlscale` says it (engine/cli): a name that cannot be stored
        click.echo(f"dlscale-tui: {printable(bad)} is not UTF-8 text; give it in UTF-8", err=True)
        sys.exit(2)
    try:
        source = given_as(click.get_current_context(), "home")
        session = Session.open(home, backend, profile_path, partition, source)
    except DlscaleError as exc:
        click.echo(printable(f"dlscale-tui: {exc}", newlines=True), err=True)
        sys.exit(exc.exit_code)
    if spec and not Path(spec).exists():
        click.echo(printable(f"dlscale-tui: {spec}: no such file"), err=True)
        sys.exit(2)
    app = DlscaleApp(session, spec)
    app.run()
    # A crash ends the app with Textual's traceback and return code 1: the shell must see it.
    sys.exit(app.return_code or 0)


if __name__ == "__main__":
    main()
