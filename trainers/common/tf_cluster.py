"""TF_CONFIG for TensorFlow's MultiWorkerMirroredStrategy, built from the launcher's variables
by our own code: TF's SlurmClusterResolver runs nvidia-smi and fails on CPU-only nodes.

Every rank is a worker listening on its own port. Under srun the job script exports
DLSCALE_NODE_ADDRS (each node's address, in Slurm's node order); ranks are laid out by block
(rank = node x ranks per node + local rank), so worker r listens on node r // per_node,
on port MASTER_PORT + 2 + r.
On one machine (common.spawn) every worker is on MASTER_ADDR.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .launch_env import LaunchEnv, LaunchError, local_world_size

PORT_OFFSET = 2  # MASTER_PORT itself and +1 are taken by other rendezvous (Horovod's)


def tf_config(launch: LaunchEnv, env: Mapping[str, str]) -> dict[str, Any]:
    assert launch.master_port is not None and launch.master_addr
    base = launch.master_port + PORT_OFFSET
    world = launch.world_size
    if launch.launcher == "srun":
        addrs = env.get("DLSCALE_NODE_ADDRS", "").split()
        per_node = local_world_size(env)
        if not addrs or per_node * len(addrs) != world:
            raise LaunchError(
                f"DLSCALE_NODE_ADDRS names {len(addrs)} node(s) with {per_node} "
                f"rank(s) each, but the job has {world} ranks (the job script "
                "exports it; the same number of ranks on every node)"
            )
        # A port per rank, not per local rank: nodes may share an address (several slurmd
        # on one host, as on the test cluster), and ports are plentiful.
        workers = [f"{addrs[r // per_node]}:{base + r}" for r in range(world)]
    else:
        workers = [f"{launch.master_addr}:{base + r}" for r in range(world)]
    return {"cluster": {"worker": workers}, "task": {"type": "worker", "index": launch.rank}}
