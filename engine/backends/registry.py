"""The places a run can go, by name: the backends the CLI and the TUI offer."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import UserError
from ..paths import RunPaths
from .base import Backend
from .local.backend import LocalBackend
from .slurm.commands import SlurmCLI
from .slurm.pyslurm import probe
from .slurm.pyslurm.backend import PyslurmBackend

if TYPE_CHECKING:
    from ..config.profile import LoadedProfile
    from ..tracking.store import Store
    from .slurm.calls import Calls

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
        found = probe.check()
        if not found.usable:
            raise UserError(
                f"--backend pyslurm: {found.why}; --backend slurm uses Slurm's commands"
            )
        return True, f"using pyslurm: {found.why}"
    if profile is None or profile.profile.pyslurm != "auto":
        return False, (
            "using Slurm's commands (pyslurm only with --backend pyslurm, or "
            'with pyslurm = "auto" in the profile)'
        )
    found = probe.check()
    if found.usable:
        return True, f'using pyslurm (the profile\'s pyslurm = "auto"): {found.why}'
    return False, f"using Slurm's commands, not pyslurm: {found.why}"


def pyslurm_status(profile: LoadedProfile | None = None) -> str:
    """For `dlscale doctor`: which way `--backend slurm` talks to Slurm here, and whether
    pyslurm could."""
    _, why = slurm_via("slurm", profile)
    found = probe.check()
    return (
        f"slurm backend: {why}; pyslurm {'usable' if found.usable else 'not usable'} "
        f"here: {found.why}"
    )


def make_backend(
    backend: str,
    store: Store,
    profile: LoadedProfile | None = None,
    partition: str | None = None,
    connect: bool = True,
    calls: Calls | None = None,
) -> Backend:
    """The backend for `--backend` (or a run's recorded one), where it sends runs; a Slurm
    backend's `note` says which way it talks to Slurm and why. A Slurm backend without a
    profile can follow, cancel and repeat jobs; planning new runs needs the profile.
    connect=False: for planning only, which asks nothing of the cluster (no pyslurm probe).
    `calls`: a front end's runner, through which every Slurm command (and the pause between
    retries) goes, so that closing it ends them all."""
    if backend == "local":
        return LocalBackend(store)
    if backend in ("slurm", "pyslurm"):
        use_pyslurm, why = slurm_via(backend, profile) if connect else (False, None)
        cls = PyslurmBackend if use_pyslurm else SlurmCLI
        if calls is None:
            made = cls(profile=profile, partition=partition, home=store.home)
        else:
            made = cls(
                profile=profile,
                partition=partition,
                home=store.home,
                runner=calls,
                sleep=calls.sleep,
            )
        made.note = why
        return made
    raise UserError(f"--backend {backend!r}: unknown; allowed: {', '.join(BACKENDS)}")


def backend_of_folder(attempts: list[RunPaths]) -> str:
    """Which backend made a run's folder, from its attempts' files (a store rebuilt from
    the folders asks): Slurm's runs keep their job script there."""
    return "slurm" if any(a.job_script.exists() for a in attempts) else "local"


def takes_profile(backend: str) -> bool:
    """Whether the backend goes to a cluster a profile describes."""
    return backend in ("slurm", "pyslurm")


def job_of_records(backend: str, env: dict | None) -> str | None:
    """The job a run's env record names, for a backend whose jobs outlive the store (a
    rebuilt store asks Slurm about it; a local job ended with its worker)."""
    return (env or {}).get("job_id") if backend in ("slurm", "pyslurm") else None
