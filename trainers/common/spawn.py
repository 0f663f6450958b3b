"""Start N ranks of a trainer on this machine: the local backend's launcher for every framework
but Horovod's. TensorFlow and MXNet have none that works here; for PyTorch and DeepSpeed it
sets what torchrun would, without torchrun's own import of torch and rendezvous store.

`python -m dlscale.trainers.common.spawn --ranks N -- CMD...` sets torchrun's variables
(RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT) plus
DLSCALE_LAUNCHER=spawn for each copy, waits for all, and stops the others as soon as one
fails, so a dead rank never leaves the rest hanging at a collective. Its exit status is the
first failure's (128+N for a rank killed by signal N), else 0. Every rank dies with the
spawner (a parent-death signal).
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from .lifeline import parent_watch

# Ports from MASTER_PORT the ranks bind: it, Horovod's +1, and TensorFlow's one per rank
# from +2 (tf_cluster.PORT_OFFSET)
EXTRA_PORTS = 2


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _free_ports(count: int) -> int:
    """A base port with `count` free ports from it, below the kernel's ephemeral range: a
    port the kernel hands out for any outgoing connection can be taken between this look
    and a rank's bind (CI saw TensorFlow's rank 1 fail to start its gRPC server so)."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    pick = random.Random()
    for _ in range(200):
        base = pick.randrange(10000, max(10001, low - count))
        if all(_free(base + i) for i in range(count)):
            return base
    with socket.socket() as s:  # no room below the range: any free port, as before
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="dlscale-spawn")
    p.add_argument("--ranks", type=int, required=True)
    p.add_argument("command", nargs=argparse.REMAINDER)
    args = p.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if args.ranks < 1 or not command:
        p.error("give --ranks N (N >= 1) and a command after --")
    port = str(_free_ports(args.ranks + EXTRA_PORTS))
    procs = []
    for rank in range(args.ranks):
        env = {
            **os.environ,
            "RANK": str(rank),
            "WORLD_SIZE": str(args.ranks),
            "LOCAL_RANK": str(rank),
            "LOCAL_WORLD_SIZE": str(args.ranks),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": port,
            "DLSCALE_LAUNCHER": "spawn",
        }
        # Set before exec, so no rank can miss it: this spawner killed, its ranks end too.
        procs.append(subprocess.Popen(command, env=env, preexec_fn=parent_watch()))
    status = 0

    def stop_all(*_: object) -> None:
        for q in procs:
            if q.poll() is None:
                q.send_signal(signal.SIGTERM)

    signal.signal(signal.SIGTERM, stop_all)
    while [q.poll() for q in procs].count(None):  # poll every one: any() would stop early
        failed = [q.returncode for q in procs if q.returncode not in (None, 0)]
        if failed and not status:
            status = failed[0]
            stop_all()
        time.sleep(0.1)
    status = status or next((q.returncode for q in procs if q.returncode), 0)
    return status if status >= 0 else 128 - status  # killed by signal N: 128+N, as a shell says


if __name__ == "__main__":
    sys.exit(main())
