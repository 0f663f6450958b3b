"""After each poll, the reruns a spec's `disturbed = "rerun"` asks for (issue 50): a run
that completed disturbed is rerun by whichever front end follows the store next (`dlscale
status`, `results`, `run --wait`, the TUI), since the local worker settles its own runs and
may leave no live job to poll. Above tracking/ (which follows) and study (which submits);
study is imported only when a rerun is due, so `dlscale status` starts light."""

from __future__ import annotations

from collections.abc import Callable

from .backends.base import Backend
from .backends.registry import make_backend
from .results import disturbed
from .tracking import follow
from .tracking.monitor import Tick
from .tracking.store import Store


def rerun_due(
    store: Store, backend_of: Callable[[str], Backend], only: str | None = None
) -> list[str]:
    """Rerun every run that is due (on backend `only`, where named), each through its own
    backend; what could not be rerun, a line each."""
    due = [r for r in disturbed.due(store) if only is None or r["backend"] == only]
    if not due:
        return []
    from .study import rerun_disturbed

    said = []
    for name in sorted({str(r["backend"]) for r in due}):
        said += rerun_disturbed(store, backend_of(name), [r for r in due if r["backend"] == name])
    return said


def refresh(store: Store) -> list[str]:
    """follow.refresh, then the reruns due: what a one-shot command does before it reads."""
    problems = follow.refresh(store)
    return problems + rerun_due(store, lambda name: make_backend(name, store))


def after_sync(store: Store, backend: Backend) -> Callable[[Tick], Tick]:
    """For monitor.wait_until_done: each tick followed by the reruns due on `backend`, a
    rerun that could not be made said as the tick's problem."""

    def then(tick: Tick) -> Tick:
        said = rerun_due(store, lambda _name: backend, backend.name)
        if not said:
            return tick
        return Tick(tick.states, tick.reachable, tick.new_records, tick.warning, said[0])

    return then


def reruns_of(store: Store) -> Callable[[list[str]], list[str]]:
    """For monitor.wait_until_done: the reruns of disturbed runs among those waited for."""

    def more(run_ids: list[str]) -> list[str]:
        if not disturbed.rerunning(store):
            return []
        return [
            r["run_id"]
            for rid in run_ids
            for r in store.reruns(rid)
            if r["run_id"] == disturbed.rerun_id(rid)
        ]

    return more
