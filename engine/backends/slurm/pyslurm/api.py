"""pyslurm, imported and called in this process: one libslurm call at a time, retried on the
errors of a busy or restarting controller."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ....errors import ControllerUnreachable, SchedulerError, SubmitError
from ..common import TRANSIENT


def import_pyslurm():
    """pyslurm, imported without keeping the dlopen flags it sets for the whole process
    (RTLD_DEEPBIND on every later extension module breaks some of them)."""
    flags = sys.getdlopenflags()
    try:
        import pyslurm  # type: ignore[import-not-found]
    except Exception as exc:  # ImportError, or a libslurm that does not load
        raise SchedulerError(f"pyslurm does not import: {type(exc).__name__}: {exc}") from None
    finally:
        sys.setdlopenflags(flags)
    return pyslurm


@dataclass
class Controller:
    """Slurm's controller (and its database) as pyslurm reaches them, shared by the
    backend that submits and the watcher that follows."""

    retries: int = 3  # attempts on transient errors
    sleep: Callable[[float], None] = time.sleep
    _site_config: Any = field(default=None, repr=False)  # asked once (config)

    def __post_init__(self) -> None:
        self.api = import_pyslurm()
        self.lock = threading.Lock()  # libslurm calls one at a time (the TUI polls in workers)

    def call(self, what: str, fn, *args, tries: int | None = None):
        """fn(*args) under the lock, retried on the errors of a busy or restarting
        controller (as the commands' watcher retries scancel). pyslurm's RPCError comes out
        as SubmitError or SchedulerError with Slurm's message, or as ControllerUnreachable
        when the retries are spent."""
        delay, message, tries = 1.0, "", tries or self.retries
        for attempt in range(tries):
            try:
                with self.lock:
                    return fn(*args)
            except self.api.RPCError as exc:
                message = " ".join(str(exc).split()) or f"{what} failed"
            if not any(t in message for t in TRANSIENT):
                raise (
                    SubmitError(message)
                    if what == "submit"
                    else SchedulerError(f"{what}: {message}")
                )
            if attempt < tries - 1:
                self.sleep(delay)
                delay *= 2
        raise ControllerUnreachable(f"{what}: {message}")

    def config(self) -> Any | None:
        """The controller's configuration (slurm.conf as it runs), asked once; None while
        the controller does not answer."""
        if self._site_config is None:
            try:
                self._site_config = self.call("config", self.api.slurmctld.Config.load)
            except (SchedulerError, ControllerUnreachable):
                return None
        return self._site_config
