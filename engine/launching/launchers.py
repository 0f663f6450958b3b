"""Launchers on this machine (the local backend), each only a command prefix, as ReFrame's
are: what goes before one rank's command so that `ranks` of them start, with the variables
torch.distributed, Horovod or MPI read. Registered by the name a framework or a declared
framework gives (config/frameworks.py, config/custom.py); the scheduler is another matter
(the backends), and Slurm's launch lines are the job script templates' (jobscripts/)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

# (the launcher's python, ranks) -> the words before a rank's command
Prefix = Callable[[str, int], list[str]]
_LOCAL: dict[str, Prefix] = {}


def register(*names: str) -> Callable[[Prefix], Prefix]:
    def add(prefix: Prefix) -> Prefix:
        for name in names:
            _LOCAL[name] = prefix
        return prefix

    return add


@register("ranks", "srun")
def _spawner(python: str, ranks: int) -> list[str]:
    """The trainers' own spawner: one process a rank with torchrun's variables (srun's one
    task per device, on one machine)."""
    return [python, "-m", "dlscale.trainers.common.spawn", "--ranks", str(ranks), "--"]


@register("horovodrun")
def _horovodrun(python: str, ranks: int) -> list[str]:
    horovodrun = str(Path(python).parent / "horovodrun")
    return [python, horovodrun, "--gloo", "-np", str(ranks), "-H", f"localhost:{ranks}"]


@register("torchrun")
def _torchrun(python: str, ranks: int) -> list[str]:
    return [
        python,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nnodes=1",
        f"--nproc-per-node={ranks}",
        "--no-python",
    ]


@register("mpirun")
def _mpirun(python: str, ranks: int) -> list[str]:
    return ["mpirun", "-np", str(ranks)]


def local_prefix(launcher: str, python: str, ranks: int) -> list[str]:
    """The words that start `ranks` ranks of the command after them on this machine."""
    prefix = _LOCAL.get(launcher)
    if prefix is None:
        raise NotImplementedError(f"no local launcher {launcher!r} (have: {', '.join(_LOCAL)})")
    return prefix(python, ranks)
