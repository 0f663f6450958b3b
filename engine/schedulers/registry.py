"""The places a run can go, by name: the backends the CLI and the TUI offer."""
from __future__ import annotations

from ..errors import UserError
from ..tracking.store import Store
from .base import Scheduler
from .local import LocalScheduler
from .slurm import SlurmCLI

BACKENDS = ("local", "slurm")


def make_scheduler(backend: str, store: Store) -> Scheduler:
    if backend == "local":
        return LocalScheduler(store)
    if backend == "slurm":
        return SlurmCLI()
    raise UserError(f"--backend {backend!r}: unknown; allowed: {', '.join(BACKENDS)}")
