"""Who am I in the job: rank, world size, local rank, rendezvous, read from the launcher.

Two launch styles are supported alike, so the same trainer runs under torchrun (one task per
node that spawns ranks) and under plain `srun` (one task per device):
- torchrun / torch.distributed.run: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT;
- srun: SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, with MASTER_ADDR/MASTER_PORT exported by
  the job script (from the first host of the allocation, never the login node);
- horovodrun: HOROVOD_RANK, HOROVOD_SIZE, HOROVOD_LOCAL_RANK (its own rendezvous).
With neither, the trainer is a single process.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass


class LaunchError(RuntimeError):
    """The launcher's variables are inconsistent or incomplete."""


@dataclass(frozen=True)
class LaunchEnv:
    rank: int
    world_size: int
    local_rank: int
    master_addr: str | None
    master_port: int | None
    launcher: str  # "torchrun", "srun", "horovodrun" or "single"

    @property
    def distributed(self) -> bool:
        return self.launcher != "single"


def _int(env: Mapping[str, str], name: str) -> int:
    try:
        return int(env[name])
    except ValueError:
        raise LaunchError(f"{name}={env[name]!r} is not an integer") from None


def detect(env: Mapping[str, str] | None = None) -> LaunchEnv:
    env = os.environ if env is None else env
    if "RANK" in env and "WORLD_SIZE" in env:
        launcher = env.get("DLSCALE_LAUNCHER", "torchrun")  # or common.spawn
        rank, world = _int(env, "RANK"), _int(env, "WORLD_SIZE")
        local = _int(env, "LOCAL_RANK") if "LOCAL_RANK" in env else 0
    elif "HOROVOD_RANK" in env and "HOROVOD_SIZE" in env:
        # horovodrun: its rendezvous server is already up and told every rank where
        rank, world = _int(env, "HOROVOD_RANK"), _int(env, "HOROVOD_SIZE")
        local = _int(env, "HOROVOD_LOCAL_RANK") if "HOROVOD_LOCAL_RANK" in env else 0
        if not 0 <= rank < world:
            raise LaunchError(f"rank {rank} is outside world size {world}")
        return LaunchEnv(rank, world, local, None, None, "horovodrun")
    elif "SLURM_PROCID" in env and "SLURM_NTASKS" in env:
        launcher = "srun"
        rank, world = _int(env, "SLURM_PROCID"), _int(env, "SLURM_NTASKS")
        local = _int(env, "SLURM_LOCALID") if "SLURM_LOCALID" in env else 0
    else:
        return LaunchEnv(0, 1, 0, None, None, "single")
    if not 0 <= rank < world:
        raise LaunchError(f"rank {rank} is outside world size {world}")
    addr = env.get("MASTER_ADDR")
    port = env.get("MASTER_PORT")
    if not addr or not port:
        raise LaunchError(
            "MASTER_ADDR and MASTER_PORT must be set for a distributed run "
            "(the job script exports them from the allocation's first host)"
        )
    return LaunchEnv(rank, world, local, addr, _int(env, "MASTER_PORT"), launcher)


def node_name() -> str:
    """Slurm's name for this node where there is one (several slurmd can share a host, and
    sites' node names are what users look up), else the host name."""
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname()


def cpu_model() -> str:
    """The CPU's model name, for the env record of CPU runs."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine()


def local_world_size(env: Mapping[str, str] | None = None) -> int:
    """Ranks on this node: torchrun's LOCAL_WORLD_SIZE, or Slurm's tasks on this node."""
    env = os.environ if env is None else env
    if "LOCAL_WORLD_SIZE" in env:
        return int(env["LOCAL_WORLD_SIZE"])
    if "HOROVOD_LOCAL_SIZE" in env:
        return int(env["HOROVOD_LOCAL_SIZE"])
    if "SLURM_NTASKS_PER_NODE" in env:
        return int(env["SLURM_NTASKS_PER_NODE"])
    if "SLURM_TASKS_PER_NODE" in env:  # "2(x3)" or "2,1"
        return int(env["SLURM_TASKS_PER_NODE"].split("(")[0].split(",")[0])
    return 1


def bind_cpus(local_rank: int, local_world: int, threads: int) -> list[int] | None:
    """Pin this rank to its own `threads` cores of the ones the process may use, when several
    ranks share the node and they fit; an unpinned rank can be moved onto its neighbour's
    core and measure that instead.
    Returns the cores, or None when the set was left alone (too few cores, or not Linux)."""
    if not hasattr(os, "sched_getaffinity") or local_world < 2:
        return None  # a lone rank collides with no one; the OS may move it off busy cores
    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) < local_world * threads or len(allowed) == threads:
        return None  # already bound by the launcher (Slurm's task plugin), or no room
    mine = allowed[local_rank * threads : (local_rank + 1) * threads]
    os.sched_setaffinity(0, mine)
    return mine
