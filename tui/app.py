"""`dlscale-tui`: wires the three screens (build, queue, results) to one engine Session and
runs the watcher that keeps the queue fresh. Screens render; the engine is called only from
worker threads, whose news comes back as messages.

What the screens show of the study is the app's reactive state (the last snapshot, the
warning, the experiment): each screen watches what it needs, so the app never has to know
which screens exist."""

from __future__ import annotations

import sys
import termios
import threading
import time
from collections.abc import Iterable
from pathlib import Path

import click
from textual import events, work
from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.notifications import SeverityLevel
from textual.reactive import reactive, var
from textual.screen import Screen
from textual.timer import Timer
from textual.worker import get_current_worker

from ..engine.errors import DlscaleError
from ..engine.io.text import is_utf8, printable, signs
from ..engine.session import Backoff, Session, Snapshot, given_as, leave_now
from . import keys
from .build import BuildScreen
from .dialogs import DetailScreen, HelpScreen
from .errors import describe
from .jobtable import JobTable
from .logview import LogView
from .messages import EngineFailed, Polling, QueueRefreshed, SiteLearned, ask
from .queue import QueueScreen
from .results import METRICS, PointTable, ResultsScreen, metric_words
from .submit import Submission
from .typeahead import KeyHandled, TypeAhead


class DlscaleApp(App):
    CSS_PATH = "dlscale.tcss"
    TITLE = "dlscale"
    # ctrl+p: every action by name, for what the footer has no room to show.
    ENABLE_COMMAND_PALETTE = True
    MODES = {"build": BuildScreen, "queue": QueueScreen, "results": ResultsScreen}
    # F-keys work while typing in a field; the digits and letters work everywhere else.
    # The tooltips are the help's and the command palette's words (tui/keys.py).
    BINDINGS = [
        Binding("f1", "help", "Help", priority=True, tooltip="this help: every key"),
        Binding("f2", "show('build')", "Build", priority=True, tooltip="the Build screen"),
        Binding("f3", "show('queue')", "Queue", priority=True, tooltip="the Queue screen"),
        Binding("f4", "show('results')", "Results", priority=True, tooltip="the Results screen"),
        Binding(
            "ctrl+q",
            "quit",
            "Quit",
            show=False,
            priority=True,
            tooltip="quit (submitted jobs keep running)",
        ),
        # Moving between fields with priority: the app then moves the focus before it hands
        # on the keys typed after tab, which otherwise could land in the field just left.
        Binding(
            "tab", "focus_next", "Next field", show=False, priority=True, tooltip="the next field"
        ),
        Binding(
            "shift+tab",
            "focus_previous",
            "Previous field",
            show=False,
            priority=True,
            tooltip="the previous field",
        ),
        Binding("question_mark", "help", "Help", show=False, tooltip="this help: every key"),
        Binding("1", "show('build')", "Build", show=False, tooltip="the Build screen"),
        Binding("2", "show('queue')", "Queue", show=False, tooltip="the Queue screen"),
        Binding("3", "show('results')", "Results", show=False, tooltip="the Results screen"),
        Binding("q", "quit", "Quit", show=False, tooltip="quit (submitted jobs keep running)"),
    ]

    snapshot: var[Snapshot | None] = var(None)  # the watcher's last tick
    warning: reactive[str | None] = reactive(None)  # controller unreachable: why
    waiting: reactive[str | None] = reactive(None)  # a Slurm command slow to answer: which
    experiment: reactive[str | None] = reactive(None)  # the study the screens show
    submission: var[Submission | None] = var(None)  # a submission under way (tui/submit.py)
    messages: var[list[tuple[SeverityLevel, str]]] = var(list)  # said, the last on the status line

    def __init__(
        self,
        session: Session,
        spec_path: str | None = None,
        watch: bool = True,
        quit_within: float | None = None,
    ) -> None:
        super().__init__()
        self.session = session
        self.spec_path = spec_path
        self._watch = watch
        self._backoff = Backoff(first=0.5, cap=5.0)
        self._poll_timer: Timer | None = None
        # The command line's app: once quitting, the process is gone within this many
        # seconds, whatever a worker still waits on (dlscale-tui's main sets it).
        self.quit_within = quit_within
        self._where = session.where  # the header: where runs go, and what is followed
        self._following: tuple[str, ...] = ()
        self._counts = ""
        # Every key waits for the one before it to be handled (tui/typeahead.py).
        self.typeahead = TypeAhead(self, self.deliver_input)

    async def on_event(self, event: events.Event) -> None:
        if isinstance(event, events.Key | events.Paste) and not event.is_forwarded:
            await self.typeahead.take(event)
        else:
            await super().on_event(event)

    async def deliver_input(self, event: events.Key | events.Paste) -> None:
        """Textual's own handling of a key or a paste: the app's priority bindings, else
        the focused widget (the key then comes back up through the bindings)."""
        await super().on_event(event)

    def on_typeahead_key_handled(self, message: KeyHandled) -> None:
        self.typeahead.handled(message)

    def on_mount(self) -> None:
        self.typeahead.start()
        self.sub_title = self._where
        self.set_interval(1.0, self.show_waiting)
        if self._watch:
            self._learn_site()
        known = self.session.experiments()
        if not self.spec_path and known:
            self.experiment = known[0]
            self.switch_mode("queue")
        else:
            self.switch_mode("build")
        if self._watch:
            self.poll_now()

    def watch_experiment(self, experiment: str | None) -> None:
        self.title = signs(f"dlscale: {experiment}") if experiment else "dlscale"
        self.poll_now()

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        """The palette (ctrl+p): what every key does, by name and in words, from the
        bindings themselves (tui/keys.py): this screen's (the app's keys among them), then
        every other screen's, which the entry shows first. Not Textual's own (its Theme,
        Screenshot, a second Quit and a Keys panel F1 does better)."""
        fill = {"metrics": METRIC_WORDS}
        for title, help_text, callback in keys.commands(self, screen, **fill):
            yield SystemCommand(title, help_text, callback)  # type: ignore[arg-type]
        for title, help_text, callback in keys.elsewhere(self, PLACES, **fill):
            yield SystemCommand(title, help_text, callback)  # type: ignore[arg-type]

    # --- navigation ----------------------------------------------------------------------

    def action_show(self, mode: str) -> None:
        if self.current_mode != mode:
            self.switch_mode(mode)

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen(help_text))

    def action_next_experiment(self) -> None:
        """The next study the store knows (the Queue and Results screens bind it to e)."""
        names = self.snapshot.experiments if self.snapshot else []
        if len(names) < 2:
            return
        at = names.index(self.experiment) if self.experiment in names else -1
        self.experiment = names[(at + 1) % len(names)]

    # --- Slurm never holds the app ---------------------------------------------------------

    # A command is named as waited on once it has gone this long without an answer.
    WAIT_SHOWN_S = 2.0

    def show_waiting(self) -> None:
        """Say what the app waits on and for how long (`sacct: no answer for 23 s`)."""
        slow = [w for w in self.session.waiting() if w.seconds >= self.WAIT_SHOWN_S]
        self.waiting = "; ".join(str(w) for w in slow) or None

    @work(thread=True, group="site", exit_on_error=False)
    def _learn_site(self) -> None:
        """The cluster's limits and accounting, asked once now rather than at a submit."""
        # where Slurm does not answer, the first submission asks again
        ask(self, "site", self.session.learn_site, lambda _: SiteLearned())

    def on_site_learned(self, message: SiteLearned) -> None:
        message.stop()  # kept by the session: submissions and polls ask nothing again

    def exit(self, *args, **kwargs) -> None:  # type: ignore[override]
        self.leave()
        super().exit(*args, **kwargs)

    def on_unmount(self) -> None:
        self.leave()  # also after a crash, which ends the app without exit()
        if self.quit_within is not None:  # the terminal is given back right after this
            threading.Thread(target=_end_after, args=(self.quit_within, self), daemon=True).start()

    def leave(self) -> None:
        """Quitting: every Slurm command in flight is ended by its own pid, and none starts
        again."""
        if self.session.calls.closed:
            return
        if self._poll_timer is not None:
            self._poll_timer.stop()
        self.session.close()

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
            following = self.session.following()
            self.post_message(Polling(following))
            shown = self.snapshot
            if following and (shown is None or shown.experiment != experiment):
                # The last known states at once: a slow Slurm must not leave the screen
                # empty until it answers (the status line says what is awaited).
                first = self.session.refresh(experiment, poll=False)
                if not get_current_worker().is_cancelled:
                    self.post_message(QueueRefreshed(first, polled=False))
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
        if not message.polled:
            return  # the poll itself is still under way
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
        self._counts = counts or "no runs yet"
        self.show_where(self._following)

    def on_polling(self, message: Polling) -> None:
        self._following = message.backends  # what this tick asks, before it answers
        self.show_where(message.backends)

    def show_where(self, polled: tuple[str, ...]) -> None:
        """The header names where runs go and the backends actually polled (a store of
        Slurm runs opened without a profile polls Slurm: `local` alone would be wrong),
        from the first poll on, before Slurm answers."""
        self._where = self.session.where_polled(polled)
        self.sub_title = f"{self._where} | {self._counts}" if self._counts else self._where

    def on_engine_failed(self, message: EngineFailed) -> None:
        if message.what == "site":
            return  # said again, with the reason, by a submission that needs it
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
        """Every message goes to the status line (the screens' last line but the footer's);
        an error is a toast as well, at the top, clear of the rows: it needs attention.
        Every toast is literal, whatever a caller (a screen, a widget) asks: its text
        comes from users, files and the engine (a path or a spec key may hold `[/]`), and
        control characters in it are shown as signs, not sent to the terminal."""
        self.say(f"{title}: {message}" if title else message, severity)
        if severity != "error":
            return
        lines = message.splitlines()
        if len(lines) > TOAST_LINES:  # the rest is where the toast points (a panel, a row)
            more = len(lines) - TOAST_LINES + 1
            message = "\n".join([*lines[: TOAST_LINES - 1], f"... and {more} more lines"])
        super().notify(
            signs(message, newlines=True),
            title=signs(title),
            severity=severity,
            timeout=timeout,
            markup=False,
        )

    def say(self, text: str, severity: SeverityLevel = "information") -> None:
        """A message on the status line (kept in `messages`, the last MESSAGES of them)."""
        self.messages = [*self.messages[-(MESSAGES - 1) :], (severity, text)]

    def _rearm(self) -> None:
        # One timer re-armed per finished poll, never stacked intervals.
        if self._watch and not self.session.calls.closed:
            self._poll_timer = self.set_timer(
                self._backoff.next(), lambda: self._refresh_queue(self.experiment)
            )


METRIC_WORDS = ", ".join(metric_words(m) for m in METRICS)
# The screens the palette offers the keys of from anywhere: (mode, name, the classes whose
# bindings are its keys).
PLACES: list[tuple[str, str, list[type]]] = [
    ("build", "Build", [BuildScreen]),
    ("queue", "Queue", [JobTable, QueueScreen]),
    ("results", "Results", [PointTable, ResultsScreen]),
]


def help_text(width: int = 76) -> str:
    """F1: every key of every screen, from their bindings (tui/keys.py), `width` wide."""
    return keys.help_text(
        [
            ("Anywhere", [DlscaleApp], [("ctrl+p", "every action, by name (the command palette)")]),
            (
                "Build (F-keys and ctrl-keys also work while typing in a field)",
                [BuildScreen],
                [("space", "tick or untick a choice in a list: [x] chosen, [ ] not")],
            ),
            ("Queue", [JobTable, QueueScreen], []),
            ("A run's detail (enter on the Queue)", [DetailScreen], []),
            ("Results", [PointTable, ResultsScreen], []),
            ("A log (l on the Queue)", [LogView], []),
        ],
        width,
        metrics=METRIC_WORDS,
    )


# A toast's lines at most: at 80x24 a taller one covered the screen (tcss bounds it too).
TOAST_LINES = 3
MESSAGES = 100  # kept: the status line shows the last


# How long quitting may take: the shell's prompt is back within this, whatever Slurm does.
QUIT_WITHIN_S = 0.5


def _end_after(seconds: float, app: App) -> None:
    """The process ends `seconds` after the app closed if it has not ended by itself: a
    worker still in a store query, a projection or a report holds nothing up (Slurm's
    commands were ended already, by their own pids). Never before the terminal is given
    back (out of raw mode), which Textual does right after the app closes."""
    time.sleep(seconds)
    end = time.monotonic() + 5
    while _raw_terminal() and time.monotonic() < end:
        time.sleep(0.05)
    leave_now(app.return_code or 0)


def _raw_terminal() -> bool:
    try:
        return not termios.tcgetattr(sys.stdin.fileno())[3] & termios.ICANON
    except (termios.error, OSError, ValueError):
        return False  # not a terminal


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
    app = DlscaleApp(session, spec, quit_within=QUIT_WITHIN_S)
    app.run()
    # A crash ends the app with Textual's traceback and return code 1: the shell must see it.
    # The prompt comes back now: unloading the interpreter's modules took over a second on
    # a busy login node, and nothing is left to write (the store commits as it goes).
    leave_now(app.return_code or 0)


if __name__ == "__main__":
    main()
