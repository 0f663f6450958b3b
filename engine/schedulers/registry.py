"""The places a run can go, by name: the backends the CLI and the TUI offer."""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import UserError
from . import pyslurm_probe
from .base import Scheduler
from .local import LocalScheduler
from .pyslurm_backend import PyslurmScheduler
from .slurm import SlurmCLI

if TYPE_CHECKING:
    from ..config.profile import LoadedProfile
    from ..tracking.store import Store

BACKENDS = ("local", "slurm", "pyslurm")


def backend_kind(backend: str) -> str:
    """Where runs go. pyslurm is another way to reach the same Slurm, so its jobs are
    planned, recorded and followed as Slurm jobs (by either way of talking to Slurm)."""
    return "slurm" if backend == "pyslurm" else backend


def slurm_via(backend: str, profile: LoadedProfile | None) -> tuple[bool, str]:
    """Whether a Slurm backend talks through pyslurm, and why, in one line. `--backend
    pyslurm` where pyslurm cannot work is refused; `--backend slurm` with the profile's
    `pyslurm = "auto"` falls back to the commands."""
    if backend == "pyslurm":
        found = pyslurm_probe.check()
        if not found.usable:
            raise UserError(f"--backend pyslurm: {found.why}; --backend slurm uses "
                            "Slurm's commands")
        return True, f"using pyslurm: {found.why}"
    if profile is None or profile.profile.pyslurm != "auto":
        return False, ("using Slurm's commands (pyslurm only with --backend pyslurm, or "
                       "with pyslurm = \"auto\" in the profile)")
    found = pyslurm_probe.check()
    if found.usable:
        return True, f"using pyslurm (the profile's pyslurm = \"auto\"): {found.why}"
    return False, f"using Slurm's commands, not pyslurm: {found.why}"


def pyslurm_status(profile: LoadedProfile | None = None) -> str:
    """For `dlscale doctor`: which way `--backend slurm` talks to Slurm here, and whether
    pyslurm could."""
    _, why = slurm_via("slurm", profile)
    found = pyslurm_probe.check()
    return (f"slurm backend: {why}; pyslurm {'usable' if found.usable else 'not usable'} "
            f"here: {found.why}")


def scheduler_for(backend: str, store: Store,
                  profile: LoadedProfile | None = None) -> tuple[Scheduler, str | None]:
    """The scheduler for `--backend`, and for Slurm the line that says which way it talks
    to Slurm and why."""
    if backend == "local":
        return LocalScheduler(store), None
    if backend in ("slurm", "pyslurm"):
        use_pyslurm, why = slurm_via(backend, profile)
        return (PyslurmScheduler() if use_pyslurm else SlurmCLI()), why
    raise UserError(f"--backend {backend!r}: unknown; allowed: {', '.join(BACKENDS)}")


def make_scheduler(backend: str, store: Store,
                   profile: LoadedProfile | None = None) -> Scheduler:
    return scheduler_for(backend, store, profile)[0]
