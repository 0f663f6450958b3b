"""Horovod's gloo rendezvous under plain srun, for the Horovod trainers.

horovodrun normally runs an HTTP rendezvous server and hands each rank its HOROVOD_*
variables, reaching other nodes over ssh. Under Slurm srun has already started every rank,
so rank 0 serves the rendezvous itself, at the job's MASTER_ADDR on MASTER_PORT + 1, and
every rank derives its Horovod variables from Slurm's. No ssh and no MPI are needed.
Horovod is imported only here and only on rank 0: the module itself is standard library.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from typing import Any

from .launch_env import LaunchEnv, LaunchError, local_world_size


def horovod_variables(launch: LaunchEnv, env: dict[str, str] | None = None) -> dict[str, str]:
    """HOROVOD_* for this rank from Slurm's block layout (rank = node x ranks/node + local)."""
    env = dict(os.environ) if env is None else env
    local_size = local_world_size(env)
    nodes = int(env.get("SLURM_NNODES") or env.get("SLURM_JOB_NUM_NODES") or 1)
    node = int(env.get("SLURM_NODEID") or 0)
    if local_size * nodes != launch.world_size:
        raise LaunchError(
            f"Horovod under srun needs the same number of ranks on every node; "
            f"{launch.world_size} ranks over {nodes} node(s) with {local_size} here"
        )
    if launch.rank != node * local_size + launch.local_rank:
        raise LaunchError(
            f"rank {launch.rank} is not node {node} x {local_size} + local rank "
            f"{launch.local_rank}: use srun's default block distribution"
        )
    assert launch.master_addr and launch.master_port
    return {
        "HOROVOD_HOSTNAME": f"slurm-node-{node}",
        "HOROVOD_RANK": str(launch.rank),
        "HOROVOD_SIZE": str(launch.world_size),
        "HOROVOD_LOCAL_RANK": str(launch.local_rank),
        "HOROVOD_LOCAL_SIZE": str(local_size),
        "HOROVOD_CROSS_RANK": str(node),
        "HOROVOD_CROSS_SIZE": str(nodes),
        "HOROVOD_GLOO_RENDEZVOUS_ADDR": launch.master_addr,
        "HOROVOD_GLOO_RENDEZVOUS_PORT": str(launch.master_port + 1),
        "HOROVOD_CONTROLLER": "gloo",
        "HOROVOD_CPU_OPERATIONS": "gloo",
    }


class _Server:
    def __init__(self, httpd: Any) -> None:
        self.httpd = httpd
        self.thread = threading.Thread(target=httpd.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.thread.join(timeout=10)


def join_under_srun(launch: LaunchEnv, wait_s: float = 120.0) -> _Server | None:
    """Set this rank's HOROVOD_* variables; on rank 0 start the rendezvous server, on the
    others wait until it answers. Returns rank 0's server (stop it after hvd.shutdown())."""
    variables = horovod_variables(launch)
    os.environ.update(variables)
    port = int(variables["HOROVOD_GLOO_RENDEZVOUS_PORT"])
    if launch.rank == 0:
        from horovod.runner.common.util.hosts import get_host_assignments, parse_hosts
        from horovod.runner.http.http_server import RendezvousHandler, RendezvousHTTPServer

        nodes, per_node = int(variables["HOROVOD_CROSS_SIZE"]), int(variables["HOROVOD_LOCAL_SIZE"])
        hosts = ",".join(f"slurm-node-{i}:{per_node}" for i in range(nodes))
        httpd = RendezvousHTTPServer(("", port), RendezvousHandler, 0)
        httpd.init(get_host_assignments(parse_hosts(hosts), launch.world_size))
        return _Server(httpd)
    deadline = time.monotonic() + wait_s
    while True:
        try:
            with socket.create_connection((launch.master_addr, port), timeout=2):
                return None
        except OSError:
            if time.monotonic() > deadline:
                raise LaunchError(
                    f"Horovod's rendezvous at {launch.master_addr}:{port} did not "
                    f"answer within {wait_s:.0f} s (did rank 0 start?)"
                ) from None
            time.sleep(0.2)
