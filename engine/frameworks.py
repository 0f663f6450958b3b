"""The frameworks dlscale knows, which ones it can run today, and how their trainers start."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Framework:
    name: str
    trainer_module: str | None  # python -m target; None while the trainer does not exist yet
    launcher: str  # local backend: "torchrun" (one launcher process that spawns the ranks)
    note: str = ""
    # Slurm: the job-script template; "srun" starts one task per device, "torchrun" one
    # per node. A profile's environment may choose another that the trainer supports.
    slurm_launchers: tuple[str, ...] = ("srun", "torchrun")

    @property
    def available(self) -> bool:
        return self.trainer_module is not None


FRAMEWORKS: dict[str, Framework] = {f.name: f for f in (
    Framework("pytorch-ddp", "dlscale.trainers.torch_ddp", "torchrun"),
    Framework("horovod-pytorch", None, "srun", "trainer not written yet (issue 5)"),
    Framework("horovod-tensorflow", None, "srun", "trainer not written yet (issue 5)"),
    Framework("tensorflow", None, "srun", "trainer not written yet (issue 5)"),
    Framework("mxnet", None, "srun", "trainer not written yet (issue 5)"),
    Framework("deepspeed", None, "torchrun", "trainer not written yet (issue 5)"),
)}


def available() -> list[str]:
    return [f.name for f in FRAMEWORKS.values() if f.available]
