"""What the Horovod trainers share, whichever framework's Horovod module they use
(horovod.torch, horovod.tensorflow): the --fp16-allreduce flag, the srun rendezvous, init
with the launcher's world size asserted, the records, and shutdown. A mixin, listed before
the framework trainer's own distribution class. Standard library only: the Horovod module
is passed in."""

from __future__ import annotations

from typing import Any

from .entry import TrainerError
from .horovod_rendezvous import join_under_srun
from .launch_env import LaunchEnv


class HorovodShared:
    server = hvd = None
    framework = "horovod"

    def add_args(self, parser) -> None:
        parser.add_argument(
            "--fp16-allreduce",
            action="store_true",
            help="compress gradients to fp16 for the allreduce",
        )

    def join(self, launch: LaunchEnv) -> None:
        """Under srun, the gloo rendezvous variables (and rank 0's server); before hvd.init."""
        self.server = join_under_srun(launch) if launch.launcher == "srun" else None

    def init_horovod(self, hvd, launch: LaunchEnv) -> None:
        self.hvd = hvd
        hvd.init()
        if hvd.size() != launch.world_size or hvd.rank() != launch.rank:
            raise TrainerError(
                f"Horovod sees rank {hvd.rank()} of {hvd.size()}; the launcher "
                f"started rank {launch.rank} of {launch.world_size}"
            )

    def require_nccl(self) -> None:
        """On GPUs Horovod must have NCCL operations: without them the first broadcast of a
        CUDA tensor fails. Said once, with the fix, before any collective."""
        if not self.hvd.nccl_built():
            raise TrainerError(
                f"{self.framework}: this environment's Horovod was built without NCCL, so it "
                "cannot reduce GPU tensors; build one with NCCL with `dlscale env create "
                f"{self.framework} --gpu` (after loading the site's CUDA and NCCL modules)"
            )

    def compression(self, args):
        return self.hvd.Compression.fp16 if args.fp16_allreduce else self.hvd.Compression.none

    def versions(self) -> dict[str, Any]:
        import horovod  # noqa: PLC0415

        return {"horovod": horovod.__version__}

    def record(self, args, *_) -> dict[str, Any]:
        return {"fp16_allreduce": args.fp16_allreduce}

    def finish(self, *_) -> None:
        if self.hvd is not None:
            self.hvd.shutdown()
        if self.server is not None:
            self.server.stop()
