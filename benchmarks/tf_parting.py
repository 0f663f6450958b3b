"""Do TensorFlow ranks that leave at once after their last collective fail a peer, and does
the trainer's parting barrier (trainers/tf_keras/train.py, `Distribution.part`) stop it?

Two workers on this machine under MultiWorkerMirroredStrategy (ring collectives, as the
trainer's CPU runs), three all-reduces of a large tensor, then each leaves by os._exit as
the trainer does: at once, or after `part`. A ring collective's receiver pulls its chunks
from the sender, so a rank that leaves at once may still owe its peer one. The two ways
alternate, pair by pair. Prints how many pairs had a rank fail each way, and appends them
to benchmarks/results.jsonl.

    .venv/bin/python benchmarks/tf_parting.py [--pairs 20] [--mb 80] [--no-save]

Runs in the TensorFlow environment `dlscale env create tensorflow` recorded (DLSCALE_HOME,
or --home).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
from types import SimpleNamespace

from framework_env import framework_env
from record import append_row


def worker(rank: int, port: int, floats: int, part: bool) -> None:
    """One rank: the collectives, then leave (after the trainer's parting barrier, or not)."""
    workers = [f"127.0.0.1:{port}", f"127.0.0.1:{port + 1}"]
    os.environ["TF_CONFIG"] = json.dumps(
        {"cluster": {"worker": workers}, "task": {"type": "worker", "index": rank}}
    )
    import tensorflow as tf

    from dlscale.trainers.tf_keras.train import Distribution

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    impl = tf.distribute.experimental.CommunicationImplementation
    strategy = tf.distribute.MultiWorkerMirroredStrategy(
        communication_options=tf.distribute.experimental.CommunicationOptions(
            implementation=impl.RING
        )
    )
    t = tf.ones([floats], tf.float32)
    try:
        for _ in range(3):
            total = strategy.reduce(
                tf.distribute.ReduceOp.SUM, strategy.run(lambda: tf.identity(t)), axis=None
            )
        float(total[0])
    except Exception as exc:  # a peer that left owing a chunk
        print(f"rank {rank}: {type(exc).__name__}", flush=True)
        os._exit(1)
    if part:
        dist = Distribution()
        dist.tf, dist.strategy = tf, strategy
        dist.launch = SimpleNamespace(distributed=True)
        dist.part()
    sys.stdout.flush()
    os._exit(0)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--pairs", type=int, default=20, help="pairs of workers each way")
    p.add_argument("--mb", type=int, default=80, help="the reduced tensor's size")
    p.add_argument("--home", default=None)
    p.add_argument("--no-save", action="store_true", help="print only")
    p.add_argument("--worker", nargs=4, type=int, help=argparse.SUPPRESS)  # inside the env
    a = p.parse_args()
    if a.worker:
        rank, port, floats, part = a.worker
        worker(rank, port, floats, bool(part))
        return

    status, env = framework_env("tensorflow", a.home, "tf_parting.py")
    env.update({"TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": ""})
    floats = a.mb * 2**20 // 4
    failed = {"at once": 0, "parting barrier": 0}
    for i in range(a.pairs):
        for way in ("at once", "parting barrier") if i % 2 == 0 else ("parting barrier", "at once"):
            port = random.randrange(20000, 30000, 2)  # below the kernel's ephemeral range
            ranks = [
                subprocess.Popen(
                    [
                        status.python,
                        __file__,
                        "--worker",
                        str(r),
                        str(port),
                        str(floats),
                        str(int(way == "parting barrier")),
                    ],
                    stdout=subprocess.PIPE,
                    text=True,
                    env=env,
                )  # fmt: skip
                for r in (0, 1)
            ]
            said = [(r.communicate()[0].strip(), r.returncode) for r in ranks]
            if any(code for _, code in said):
                failed[way] += 1
            print(f"pair {i} {way}: {said}", flush=True)
    print(
        f"\n{a.mb} MB reduced, then each rank left: a rank failed in "
        f"{failed['at once']} of {a.pairs} pairs leaving at once, "
        f"{failed['parting barrier']} of {a.pairs} leaving after the parting barrier"
    )
    if a.no_save:
        return
    append_row(
        "tf_parting",
        {"pairs": a.pairs, "mb": a.mb, "versions": status.versions, "failed": failed},
    )


if __name__ == "__main__":
    main()
