"""What does the TensorFlow trainer's tf.data pipeline (generator + prefetch, its GPU path)
cost or buy against feeding the arrays directly (its CPU path), where it runs?

ResNet-20 on digits at 1 rank, batch 32, one intra-op thread: the trainer's own model, data
and input pipeline (trainers/tf_keras), one tf.function SGD step, timed over the steps after
a warm-up. The two feeds alternate within each round so machine drift hits both alike.
Prints images/s and the tf.data / direct ratio, and appends them to benchmarks/results.jsonl.

    .venv/bin/python benchmarks/tf_input.py [--rounds 3] [--steps 40] [--device cpu|cuda]

Runs in the TensorFlow environment `dlscale env create tensorflow [--gpu]` recorded
(DLSCALE_HOME, or --home); the measuring is done by that environment's python.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import time

from framework_env import framework_env
from record import append_row


def measure(feed: str, steps: int, cuda: bool) -> float:
    """images/s of `steps` SGD steps after 5 warm-up steps, fed by `feed`."""
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)

    from dlscale.trainers.common.args import build_parser
    from dlscale.trainers.common.arrays import ArrayData
    from dlscale.trainers.tf_keras.device import pipeline
    from dlscale.trainers.tf_keras.models import build, keras

    args = build_parser("bench").parse_args(
        [
            "--model",
            "resnet20",
            "--dataset",
            "digits",
            "--per-device-batch",
            "32",
            "--epochs",
            "100",
        ]
    )
    data = ArrayData(args, 1, 0, channels_last=True)
    model = build("resnet20", data.classes)
    opt = keras.optimizers.SGD(0.05, momentum=0.9)

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(
                keras.losses.sparse_categorical_crossentropy(
                    y, model(x, training=True), from_logits=True
                )
            )
        opt.apply_gradients(
            zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables)
        )
        return loss

    # The trainer's CPU feed (direct) or its GPU feed (tf.data), whatever the device.
    stream = (b for b in pipeline(tf, data, 32, cuda=feed == "tf.data") if b is not None)
    for _ in range(5):
        float(step(*next(stream)))
    start = time.perf_counter()
    for _ in range(steps):
        loss = step(*next(stream))
    float(loss)
    if cuda:
        tf.test.experimental.sync_devices()
    return steps * 32 / (time.perf_counter() - start)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--home", default=None)
    p.add_argument("--measure", nargs=2, help=argparse.SUPPRESS)  # run inside the env
    a = p.parse_args()
    if a.measure:
        print(json.dumps(measure(a.measure[0], int(a.measure[1]), a.device == "cuda")))
        return

    status, env = framework_env("tensorflow", a.home, "tf_input.py", device=a.device)
    env.update({"OMP_NUM_THREADS": "1", "TF_CPP_MIN_LOG_LEVEL": "2"})
    if a.device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""
    results: dict[str, list[float]] = {"direct": [], "tf.data": []}
    for r in range(a.rounds):
        for feed in ("direct", "tf.data") if r % 2 == 0 else ("tf.data", "direct"):
            out = subprocess.run(
                [status.python, __file__, "--device", a.device, "--measure", feed, str(a.steps)],
                capture_output=True,
                text=True,
                check=True,
                env=env,
            )
            rate = json.loads(out.stdout.strip().splitlines()[-1])
            results[feed].append(rate)
            print(f"round {r}: {feed:7s} {rate:7.1f} images/s", flush=True)
    direct, tfdata = (statistics.median(results[k]) for k in ("direct", "tf.data"))
    print(
        f"\nResNet-20 on digits, 1 rank, 1 thread, {a.device}, median of {a.rounds} rounds: "
        f"direct {direct:.1f}, tf.data {tfdata:.1f} images/s, tf.data/direct "
        f"{tfdata / direct:.2f}"
    )
    fields = {
        "device": a.device,
        "rounds": a.rounds,
        "steps": a.steps,
        "versions": status.versions,
        "images_per_s": results,
        "ratio": tfdata / direct,
    }
    append_row("tf_input", fields)


if __name__ == "__main__":
    main()
