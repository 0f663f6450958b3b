"""The frameworks dlscale knows, which ones it can run today, and how their trainers start."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Framework:
    name: str
    trainer_module: str | None  # python -m target; None while the trainer does not exist yet
    # Local backend: "torchrun" (one launcher process spawns the ranks), "horovodrun"
    # (Horovod's own, over gloo), "ranks" (dlscale.trainers.common.spawn: Slurm-style
    # variables per rank, for frameworks whose roles are set up by the trainer itself).
    launcher: str
    note: str = ""
    # Slurm: the job-script template; "srun" starts one task per device, "torchrun" one
    # per node. A profile's environment may choose another that the trainer supports.
    slurm_launchers: tuple[str, ...] = ("srun", "torchrun")

    @property
    def available(self) -> bool:
        return self.trainer_module is not None


FRAMEWORKS: dict[str, Framework] = {f.name: f for f in (
    Framework("pytorch-ddp", "dlscale.trainers.torch_ddp", "torchrun"),
    # Under Slurm srun starts one task per rank; the trainer runs Horovod's gloo rendezvous.
    Framework("horovod-pytorch", "dlscale.trainers.horovod_torch", "horovodrun", "",
              ("srun",)),
    Framework("horovod-tensorflow", "dlscale.trainers.horovod_tf", "horovodrun", "",
              ("srun",)),
    # TF_CONFIG from the job's node addresses (DLSCALE_NODE_ADDRS, exported by the job
    # script), never TF's SlurmClusterResolver, which runs nvidia-smi.
    Framework("tensorflow", "dlscale.trainers.tf_keras", "ranks", "", ("srun",)),
    # The trainer starts MXNet's scheduler and servers itself (MXNet's launch.py crashes on
    # Python 3.11).
    Framework("mxnet", "dlscale.trainers.mxnet_gluon", "ranks", "", ("srun",)),
    # srun first: one task per rank, rendezvous through the job script's MASTER_ADDR, no
    # pdsh/ssh launcher of DeepSpeed's own.
    Framework("deepspeed", "dlscale.trainers.deepspeed_zero", "torchrun"),
)}


def available() -> list[str]:
    return [f.name for f in FRAMEWORKS.values() if f.available]
