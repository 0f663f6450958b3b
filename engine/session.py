"""One front end's view of the study: the store, the backend and cluster it submits to, and
the one scheduler client it polls with. The TUI holds a Session and calls it from worker
threads; every method is safe to call from any thread.

Raises only DlscaleError subclasses (UserError for bad input, SchedulerError/StoreError for
failures of the world), which the caller shows as a message.

The engine's words a front end needs beside a Session's methods are imported here as `X as
X` (CHOICES, QueueRow, Backoff...), so the TUI imports the engine through this module, errors
and the renderers only (tests/test_boundaries.py).
"""

from __future__ import annotations

import contextlib
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import disturbed_reruns, study, submitting
from .backends.base import Backend
from .backends.registry import BACKENDS, make_backend
from .backends.slurm.calls import Calls, Step
from .backends.slurm.calls import Waiting as Waiting
from .config import specfile
from .config.custom import declared_names
from .config.frameworks import FRAMEWORKS
from .config.profile import COMMAND_TIMEOUT_S, LoadedProfile, load_profile
from .config.spec import LoadedSpec as LoadedSpec
from .config.spec import load_spec
from .config.specfile import CHOICES as CHOICES
from .errors import PlanError, UserError
from .io.reading import read_text
from .launching import envs
from .launching.estimate import estimate
from .launching.plan import Totals, plan
from .leaving import leave_now as leave_now
from .paths import RunPaths
from .results import analysis, charts
from .results.explained import is_comm
from .results.points import unit_and_axes
from .results.rows import ResultRow, SideBySide
from .runs import ACTIVE, RunRow, State, scale_label
from .submitting import SubmitStep as SubmitStep
from .tracking import follow, logs, queue
from .tracking.logs import follow_chunks as follow_chunks
from .tracking.monitor import Backoff as Backoff
from .tracking.queue import QUEUE_COLUMNS as QUEUE_COLUMNS
from .tracking.queue import QueueRow as QueueRow
from .tracking.queue import queue_header as queue_header
from .tracking.store import Store, default_home
from .tracking.store.health import fault_message
from .where import backend_for, check_home
from .where import given_as as given_as


@dataclass(frozen=True)
class FrameworkChoice:
    name: str
    usable: bool
    why: str  # empty when usable


@dataclass(frozen=True)
class Preview:
    """What submitting the form would do, shown before the user commits to it."""

    totals: Totals | None = None  # the runs to submit and those left as they are
    estimate: str = ""  # from completed runs of the same setup, or says it is unknown
    limit_hours: float | None = None  # device-hours if every job used its time limit
    problems: tuple[specfile.Problem, ...] = ()  # field problems first, then plan refusals
    loaded: LoadedSpec | None = None

    @property
    def ok(self) -> bool:
        return self.loaded is not None and not self.problems

    @property
    def runs(self) -> int:
        return self.totals.runs if self.totals else 0

    @property
    def to_run(self) -> int:
        """Runs neither completed nor queued or running in the store already."""
        return len(self.totals.to_run) if self.totals else 0

    @property
    def active(self) -> int:
        """Queued, running or being submitted already: not submitted again."""
        return self.totals.active if self.totals else 0


@dataclass(frozen=True)
class RunDetail:
    """One run as the queue's detail view shows it; "" where there is nothing to show."""

    run_id: str
    label: str
    state: str
    reason: str  # whole, every line
    backend: str
    job_id: str
    nodes: str
    run_dir: str
    job_script: str
    log: str
    versions: dict[str, str]  # from the run's env record: framework, CUDA, NCCL, MPI...


def run_label(row: RunRow) -> str:
    """A run in a few words: what it measures, at which scale and batch, with which values
    of a declared framework's own axes, which repetition."""
    scale = f"{row['framework']} {row['model']} {scale_label(row['nodes'], row['ranks_per_node'])}"
    if is_comm(row):
        return f"{scale} {queue.COMM_WORDS}"
    axes = "".join(f" {k}={v}" for k, v in unit_and_axes(row)[1].items())
    return f"{scale} batch {row['per_device_batch']}{axes} #{row['repetition']}"


@dataclass(frozen=True)
class Snapshot:
    """One refresh of the queue: the experiment's rows and whether the scheduler answered."""

    experiment: str | None
    rows: list[queue.QueueRow]
    counts: dict[str, int]
    reachable: bool = True
    warning: str | None = None
    new_records: int = 0
    experiments: list[str] = field(default_factory=list)
    problem: str | None = None  # what to say of a poll that went wrong (Watcher.problem)
    polled: tuple[str, ...] = ()  # the backends this refresh asked (those with live jobs)
    # runs handed to the scheduler by this session that no poll reaching it has asked
    # about yet: "not yet seen by Slurm", not PENDING, which only Slurm can say
    unseen: frozenset[str] = frozenset()

    @property
    def live(self) -> int:
        return sum(self.counts.get(s, 0) for s in ACTIVE)


class Session:
    def __init__(
        self,
        home: str | Path | None = None,
        backend: str = "local",
        profile_path: str | None = None,
        partition: str | None = None,
    ) -> None:
        if backend not in BACKENDS:
            raise UserError(f"--backend {backend!r}: unknown; allowed: {', '.join(BACKENDS)}")
        self._local = threading.local()
        # Every Slurm command of this session goes through one runner: its time is short
        # (the profile's command_timeout), a front end can say what it waits on, and
        # close() ends them all at once.
        self.calls = Calls(COMMAND_TIMEOUT_S)
        self._site_lock = threading.Lock()
        self._site: tuple[Backend, object | None] | None = None  # (target, what it said)
        self.home = Path(home) if home else default_home()
        _ = self.store  # open it now: a store that cannot open is an error at start, not later
        self._lock = threading.Lock()  # one backend client, used by one thread at a time
        self._followers: dict[str, Backend] = {}
        # Submitting (sbatch, retried while a controller is slow) can take minutes: it has a
        # lock and a backend client of its own, so the queue refreshes meanwhile and shows
        # the runs being submitted. `submitter(name, store, profile, partition)` makes it.
        self._submit_lock = threading.Lock()
        self.submitter = self._make_backend
        # What a submission under way is doing (submit_steps): its commands, and the
        # site's if it waits on the app's first question to the cluster.
        self._submit_steps: list[Step] = []
        self._site_steps: list[Step] = []
        self._submit_started: float | None = None
        self._handed: dict[str, float] = {}  # run id -> when its job was handed over
        self._handed_lock = threading.Lock()
        self._choice = threading.Lock()  # backend, profile, partition change together
        self._queue = queue.QueueReader()  # rows kept between ticks: only changed ones made anew
        self._choose(backend, load_profile(profile_path) if profile_path else None, partition)

    @classmethod
    def open(
        cls,
        home: str | None,
        backend: str | None,
        profile_path: str | None,
        partition: str | None,
        home_given_as: str = "--home",
    ) -> Session:
        """A session as a front end's options ask for it: the backend they choose (slurm with
        a profile, else local; an option that backend would ignore is refused) and a home
        that can be written (UserError naming it and `home_given_as` if not)."""
        backend = backend_for(backend, profile_path, partition)
        check_home(home, home_given_as)
        return cls(home, backend, profile_path, partition)

    def _choose(self, backend: str, profile: LoadedProfile | None, partition: str | None) -> None:
        """Where submissions go from now on; the target backend is made once per choice
        (pyslurm's probe runs a child process)."""
        target = make_backend(backend, self.store, profile, partition, calls=self.calls)
        if target.needs_profile and profile is None:
            raise PlanError(
                f"--backend {backend} needs --profile CLUSTER.toml (see examples/clusters/)"
            )
        if profile is not None:
            profile.profile.partition(partition)  # raises PlanError when unknown
        with self._choice:
            self.backend, self.profile, self.partition = backend, profile, partition
            self.target = target
            self.calls.timeout = profile.profile.command_timeout if profile else COMMAND_TIMEOUT_S

    def _make_backend(
        self,
        name: str,
        store: Store,
        profile: LoadedProfile | None = None,
        partition: str | None = None,
    ) -> Backend:
        """A backend of this session's: its Slurm commands go through `calls`."""
        return make_backend(name, store, profile, partition, calls=self.calls)

    def learn_site(self) -> object | None:
        """What the cluster submitted to says of itself (its limits, whether it keeps
        accounting), asked once (a front end asks at its start, in a worker) and handed to
        every submission and follower from then on, so a submission asks nothing of
        sacctmgr. Local: nothing to ask."""
        with self._site_lock:
            target = self.target
            if self._site is None or self._site[0] is not target:
                with self.calls.recording() as self._site_steps:
                    self._site = (target, target.learn_site())
            return self._site[1]

    def waiting(self) -> list[Waiting]:
        """The Slurm commands in flight, the longest waiting first (sacct: 23 s)."""
        return self.calls.waiting()

    def close(self) -> None:
        """End every Slurm command in flight, by its own pid, and start none from now on
        (a front end quitting: nothing of it is left waiting on Slurm)."""
        self.calls.close()

    def use_cluster(self, profile_path: str | None, partition: str | None = None) -> None:
        """Submit to this cluster profile from now on (Slurm), or to this machine (None).
        Raises SpecError (file:line: field) for a profile that does not validate and
        PlanError for an unknown partition; the current choice is kept then."""
        if not profile_path:
            self._choose("local", None, None)
            return
        self._choose("slurm", load_profile(profile_path), partition)

    # SQLite connections are not shared between threads: each thread gets its own.
    @property
    def store(self) -> Store:
        s = getattr(self._local, "store", None)
        if s is None:
            s = self._local.store = Store(self.home)
        return s

    def _follower(self, name: str) -> Backend:
        """The backend that polls the jobs recorded with `name`; one per name, kept for its
        caches (one that holds a store, the local one, is made per thread)."""
        made = self._followers.get(name)
        if made is None or getattr(made, "store", self.store) is not self.store:
            made = self._followers[name] = self._make_backend(name, self.store)
            site = self._site
            if site is not None and site[1] is not None and name == self.target.name:
                made.knows_site(site[1])
        return made

    @property
    def where(self) -> str:
        """The header's words: the backend, and cluster:partition for Slurm."""
        return self.target.describe()

    def following(self) -> tuple[str, ...]:
        """The backends a refresh polls now: those with live jobs in the store."""
        return tuple(follow.backends_in_use(self.store))

    def where_polled(self, polled: tuple[str, ...]) -> str:
        """The header's words once a refresh has asked `polled`: the backend submitted to,
        and the ones followed when they are others (a store of Slurm runs opened without
        a profile polls Slurm: the header must not say local alone)."""
        here = self.where
        others = [p for p in polled if p != self.target.name]
        return f"{here}, following {' and '.join(others)} jobs" if others else here

    # --- build ---------------------------------------------------------------------------

    def framework_choices(self, data: dict[str, Any] | None = None) -> list[FrameworkChoice]:
        """Each framework, and why it cannot be chosen here: no trainer yet, or no working
        environment on this machine (the fix, `dlscale env create ...`, is in the reason).
        On Slurm, a framework the profile gives an environment is the site's word. With a
        spec's `data`, the frameworks it declares follow ([frameworks.NAME]: the user's own
        scripts, whose software is their declaration's)."""
        profile = self.target.site_profile()
        out = []
        for f in FRAMEWORKS.values():
            problems = envs.check_frameworks([f.name], self.home, profile)
            why = problems[0].removeprefix(f"{f.name}: ") if problems else ""
            fix = re.search(r"`(dlscale [^`]*env create[^`]*)`", why)
            if fix:  # a list row has room for the fix, not the whole story
                why = f"{'broken' if 'broken' in why else 'no'} environment: {fix[1]}"
            out.append(FrameworkChoice(f.name, not problems, why))
        return out + [FrameworkChoice(name, True, "") for name in declared_names(data or {})]

    def preview(self, data: dict[str, Any], path: str = "<unsaved spec>") -> Preview:
        loaded, problems = specfile.check(data, path)
        if loaded is None:
            return Preview(problems=tuple(problems))
        p = plan(loaded)
        refusals: list[specfile.Problem] = []
        try:
            study.check_plan(loaded, p, self.target, self.home)
        except PlanError as exc:
            refusals = [specfile.Problem("", line) for line in str(exc).splitlines()]
        state = {r["run_id"]: r["state"] for r in self.store.runs(loaded.spec.experiment.name)}
        totals = p.against(state)
        secs = self.target.time_limit_s()
        limit = totals.devices * secs / 3600 if secs else None
        return Preview(
            totals,
            estimate(self.store, totals.to_run).text(totals.to_run),
            limit,
            tuple(refusals),
            loaded,
        )

    def study_spec(self, experiment: str) -> str | None:
        """A spec file holding the study as it was last submitted, for the Build screen to
        open: the file it was submitted from while that still says the same; else the
        submitted text kept as specs/NAME.toml beside the store (written only where no
        file is); None when the store has no spec for it."""
        row = next((e for e in self.store.experiments() if e["name"] == experiment), None)
        if row is None or not row.get("spec_text"):
            return None
        text = row["spec_text"]
        given = Path(row["spec_path"]) if row.get("spec_path") else None
        try:
            if given is not None and given.is_file() and read_text(given) == text:  # bounded
                return str(given)
        except (OSError, UnicodeDecodeError):
            pass  # unreadable now: the kept copy below
        kept = self.home / "specs" / f"{experiment}.toml"
        try:
            kept.parent.mkdir(parents=True, exist_ok=True)
            with open(kept, "x", encoding="utf-8") as fh:  # never over another file
                fh.write(text)
        except FileExistsError:
            pass
        except OSError:
            return None
        return str(kept)

    # How long a submission waits for the scheduler's first answer before giving up, with
    # nothing stored: a front end says so at once instead of sitting at "Submitting...".
    REACH_S = 15.0

    @property
    def reach_s(self) -> float:
        """How long a submission waits for the scheduler's first answer: REACH_S, or the
        profile's command_timeout where that is shorter."""
        return min(self.REACH_S, self.calls.timeout)

    def submit(self, loaded: LoadedSpec) -> study.SubmitReport:
        """Submit the study. Raises ControllerUnreachable within reach_s when the scheduler
        does not answer, before any run is stored."""
        with self._choice:  # not the refresh's lock: a slow poll must not hold this up
            backend, profile, partition = self.backend, self.profile, self.partition
        with self._submit_lock, self.calls.recording() as self._submit_steps:
            self._submit_started = time.monotonic()
            target = self.submitter(backend, self.store, profile, partition)
            target.check_reachable(self.reach_s)
            target.knows_site(self.learn_site())  # asked once, at the app's start
            report = study.submit(self.store, loaded, target)
            self._handed_over([run.run_id for run in report.submitted + report.resubmitted])
            return report

    def submit_steps(self) -> list[SubmitStep]:
        """What the last submission did or is doing, step by step: each Slurm command it
        ran, and those of the cluster's first question if it waited on them."""
        started = self._submit_started
        if started is None:
            return []
        site = [s for s in self._site_steps if s.ended is None or s.ended >= started]
        return submitting.steps([*site, *self._submit_steps])

    def submitting_rows(self, loaded: LoadedSpec) -> list[QueueRow]:
        """The runs submitting `loaded` will store, as rows SUBMITTING: a front end shows
        them the moment the user submits, before the scheduler has said anything."""
        name = loaded.spec.experiment.name
        done = {r["run_id"] for r in self.store.runs(name) if r["state"] == State.COMPLETED}
        return submitting.planned_rows(loaded, done)

    def _handed_over(self, run_ids: list[str]) -> None:
        if self.backend != "local":  # a local job is known from the moment it is stored
            now = time.monotonic()
            with self._handed_lock:
                self._handed.update(dict.fromkeys(run_ids, now))

    # --- queue ---------------------------------------------------------------------------

    # The Build screen's spec files (config.specfile): read with their problems, checked,
    # saved where the form says, loaded to submit.
    read_spec = staticmethod(specfile.read)
    check_spec = staticmethod(specfile.check)
    save_spec = staticmethod(specfile.save)
    spec_choices = staticmethod(specfile.choices)
    load_spec = staticmethod(load_spec)

    def experiments(self) -> list[str]:
        """Most recently touched first."""
        return [
            e["name"]
            for e in sorted(self.store.experiments(), key=lambda e: e["updated"] or 0, reverse=True)
        ]

    def refresh(self, experiment: str | None, poll: bool = True) -> Snapshot:
        """Ask each backend with live jobs about all of them at once, ingest, read rows;
        poll=False: the rows as the store holds them, asking no backend (what a front end
        shows while a slow scheduler has not answered yet)."""
        reachable, warning, problem, new, polled = True, None, None, 0, []
        with self._lock if poll else contextlib.nullcontext():
            asked = time.monotonic()
            for name, tick in follow.sync_live(self.store, self._follower) if poll else []:
                reachable = reachable and tick.reachable
                warning = warning or tick.warning
                problem = problem or tick.problem
                new += tick.new_records
                polled.append(name)
            if poll:  # a run this poll found disturbed, where its spec says "rerun"
                problem = problem or next(
                    iter(disturbed_reruns.rerun_due(self.store, self._follower)), None
                )
            if poll and reachable and polled:  # the scheduler answered about them
                with self._handed_lock:
                    self._handed = {r: t for r, t in self._handed.items() if t >= asked}
        rows = self._queue.rows(self.store, experiment)
        return Snapshot(
            experiment,
            rows,
            queue.counts(rows),
            reachable,
            warning,
            new,
            self.experiments(),
            problem,
            tuple(polled),
            self._unseen(),
        )

    def _unseen(self) -> frozenset[str]:
        with self._handed_lock:
            return frozenset(self._handed)

    def cancel(self, run_ids: list[str]) -> list[str]:
        with self._lock:
            return follow.cancel(self.store, run_ids, self._follower)

    def resubmit(self, run_ids: list[str]) -> list[tuple[str, str]]:
        with self._submit_lock:
            done = study.resubmit(
                self.store, run_ids, lambda name: self.submitter(name, self.store)
            )
        self._handed_over([run_id for run_id, _ in done])
        return done

    def log_path(self, run_id: str) -> Path:
        return RunPaths.of(self.store.run(run_id)).log

    def run(self, run_id: str) -> RunRow:
        return self.store.run(run_id)

    def page_log(self, run_id: str) -> int:
        """The run's log in the user's $PAGER, on the terminal (the TUI suspends first)."""
        return logs.page(self.log_path(run_id))

    def run_detail(self, run_id: str) -> RunDetail:
        """Everything the queue's detail view shows of one run."""
        row = self.store.run(run_id)
        paths = RunPaths.of(row)
        job = self.store.jobs.get(row["backend"], row["job_id"]) if row["job_id"] else None
        env = self.store.records.last("env", [row["run_id"]]).get(row["run_id"], {})
        versions = env.get("framework_versions")
        return RunDetail(
            run_id=row["run_id"],
            label=run_label(row),
            state=row["state"],
            reason=row.get("reason") or (job or {}).get("reason") or "",
            backend=row["backend"] or "",
            job_id=row["job_id"] or "",
            nodes=(job or {}).get("nodes") or "",
            run_dir=str(paths.root),
            job_script=str(paths.job_script) if paths.job_script.is_file() else "",
            log=str(paths.log),
            versions={str(k): str(v) for k, v in (versions or {}).items() if v is not None}
            if isinstance(versions, dict)
            else {},
        )

    # --- results -------------------------------------------------------------------------

    def results(self, experiment: str | None) -> list[ResultRow]:
        return analysis.results(self.store, experiment)

    def notes(self, experiment: str | None) -> list[str]:
        """What the results leave out (metric lines skipped on ingest), by run and line."""
        return analysis.notes(self.store, experiment)

    def projection_chart(
        self, experiment: str | None, metric: str, width: int, height: int
    ) -> tuple[str, list[str]]:
        """The study's scaling projected past what was measured (`dlscale project`), as the
        Results screen draws it (measured lines, projected points marked as such), and its
        held-out checks in words: every one, the misses first, with whether it missed."""
        from .results.projection import project
        from .results.projection.tables import held_out_line, not_projected

        name = self.store.pick_experiment(experiment)
        families = project.of_study(self.store, name).families
        drawn = project.chart_series(families, metric)
        if any(s["projected"] for s in drawn):
            chart = charts.projection_chart(drawn, metric, width, height, color=True)
        else:  # nothing to draw past the measured: why, a line a family, as `dlscale project`
            chart = "\n".join(not_projected(f) for f in families) or "nothing to project"
        checks = sorted((held_out_line(f) for f in families), key=lambda c: not c[1])
        return chart, [("MISSED: " if missed else "") + line for line, missed in checks]

    def side_by_side(self, a: str, b: str) -> SideBySide:
        """Two experiments' points matched by configuration (`dlscale compare A B`)."""
        from .results import compare

        return compare.side_by_side(self.store, a, b)

    def write_report(self, experiment: str | None, fmt: str = "html") -> Path:
        """`dlscale report` for this experiment, into the current folder's report-NAME/."""
        from .results.report import document

        name = self.store.pick_experiment(experiment)
        return Path(document.build(self.store, name, f"report-{name}", fmt).path)

    @staticmethod
    def chart(
        results: list[ResultRow], metric: str, model: str | None, width: int, height: int
    ) -> str:
        return charts.chart(results, metric, model, width, height, color=True)


def damage_message(exc: BaseException, home: Path | None = None) -> str | None:
    """For the TUI: what to say when a worker's error is a fault of the world (a damaged,
    locked, read-only or full store; a full disk), as the CLI says it (else None)."""
    return fault_message(exc, Path(home) if home else default_home())
