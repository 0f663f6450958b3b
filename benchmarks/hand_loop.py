"""The loop a user would write by hand, on the same device and with the same settings as
the trainer (model, batch, precision, memory format, optimizer, cuDNN autotuning), timed
between device synchronisations: the yardstick the trainer's overhead is measured against.

    python benchmarks/hand_loop.py --model resnet50 --dataset synthetic-imagenet \
        --batch 256 --device cuda --precision bf16 --channels-last     # prints images/s
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # a checkout without install

SIZES = {"synthetic-cifar": (32, 10), "synthetic-imagenet": (224, 1000)}


def hand_loop(
    model_name: str,
    dataset: str,
    batch: int,
    steps: int,
    warmup: int,
    device: str = "cpu",
    precision: str = "fp32",
    channels_last: bool = False,
    compile: bool = False,
    threads: int = 1,
    compile_mode: str = "default",
) -> float:
    import torch
    import torch.nn.functional as F

    from dlscale.trainers.torch_ddp.models import build

    dev = torch.device(device)
    cuda = dev.type == "cuda"
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    if cuda:
        torch.backends.cudnn.benchmark = precision != "fp32"  # as the trainer (device.py)
        torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
        torch.backends.cudnn.allow_tf32 = precision == "tf32"
    size, classes = SIZES[dataset]
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    model = build(model_name, classes).to(dev, memory_format=fmt)
    opt = torch.optim.SGD(
        model.parameters(),
        lr=0.1,
        momentum=0.9,
        weight_decay=5e-4,
        **({"fused": True} if cuda else {}),
    )
    mode = None if compile_mode == "default" else compile_mode
    net = torch.compile(model, mode=mode) if compile else model
    graphs = compile and compile_mode in ("reduce-overhead", "max-autotune")
    x = torch.randn(batch, 3, size, size, device=dev).contiguous(memory_format=fmt)
    y = torch.randint(0, classes, (batch,), device=dev)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    scaler = torch.amp.GradScaler("cuda") if precision == "fp16" else None

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize(dev)

    t0 = 0.0
    for i in range(warmup + steps):
        if i == warmup:
            sync()
            t0 = time.perf_counter()
        if graphs:
            torch.compiler.cudagraph_mark_step_begin()
        with torch.autocast(dev.type, dtype, enabled=dtype is not None):
            loss = F.cross_entropy(net(x), y)
        opt.zero_grad(set_to_none=True)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()
    sync()
    return steps * batch / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="resnet20")
    ap.add_argument("--dataset", default="synthetic-cifar", choices=sorted(SIZES))
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--precision", default="fp32", choices=("fp32", "tf32", "bf16", "fp16"))
    ap.add_argument("--channels-last", action="store_true")
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--compile-mode", default="default")
    a = ap.parse_args()
    print(
        hand_loop(
            a.model,
            a.dataset,
            a.batch,
            a.steps,
            a.warmup,
            a.device,
            a.precision,
            a.channels_last,
            a.compile,
            compile_mode=a.compile_mode,
        )
    )


if __name__ == "__main__":
    main()
