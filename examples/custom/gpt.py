"""A small GPT-2-shaped language model trained on synthetic tokens: the kind of script a
user brings to dlscale (docs/custom.md). It knows nothing of dlscale's engine: it takes its
sizes as flags, runs data parallel when a launcher starts it as several ranks (torchrun's
or Slurm's variables), and prints one line per step, which a spec's log patterns read
(gpt-log.toml). With --report it also writes dlscale's records itself (gpt-records.toml).

GPT-2 small is 12 layers, 12 heads, d_model 768, 1024 tokens of context and a 50,257-token
vocabulary; the defaults here keep its shape (pre-norm blocks, causal attention, a 4x MLP,
tied embeddings) at a size a CPU trains in seconds.

    python gpt.py --steps 20 --per-device-batch 8 --seq-len 64 [--device cuda]
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn


class Block(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
        self.heads = heads

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(att.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab: int, seq_len: int, layers: int, heads: int, d: int) -> None:
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(seq_len, d)
        self.blocks = nn.Sequential(*(Block(d, heads) for _ in range(layers)))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.head.weight = self.tok.weight  # tied, as GPT-2's
        for emb in (self.tok, self.pos):
            nn.init.normal_(emb.weight, std=0.02)  # GPT-2's initialisation

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(idx.shape[1], device=idx.device)
        return self.head(self.ln(self.blocks(self.tok(idx) + self.pos(pos))))


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup-steps", type=int, default=2)
    p.add_argument("--per-device-batch", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--d-model", type=int, default=64)
    p.add_argument("--vocab", type=int, default=512)
    p.add_argument("--lr", type=float, default=3e-4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--report", action="store_true", help="write dlscale's records too")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="cuda: a GPU per rank")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    world = int(os.environ.get("WORLD_SIZE") or os.environ.get("SLURM_NTASKS") or 1)
    rank = int(os.environ.get("RANK") or os.environ.get("SLURM_PROCID") or 0)
    local = int(os.environ.get("LOCAL_RANK") or os.environ.get("SLURM_LOCALID") or 0)
    device = torch.device("cuda", local) if args.device == "cuda" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if world > 1:  # MASTER_ADDR and MASTER_PORT come from the launcher or the job
        backend = "nccl" if device.type == "cuda" else "gloo"
        dist.init_process_group(backend, rank=rank, world_size=world)
    torch.manual_seed(args.seed)
    model = GPT(args.vocab, args.seq_len, args.layers, args.heads, args.d_model).to(device)
    if world > 1:
        model = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    gen = torch.Generator().manual_seed(args.seed + rank)
    tokens_per_step = args.per_device_batch * args.seq_len * world

    report = None
    if args.report:
        from dlscale.trainers.report import Reporter  # importable in every dlscale run

        report = Reporter()
        report.start(
            devices=[torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"]
            * world,
            framework_versions={"torch": torch.__version__},
            seq_len=args.seq_len,
        )
    timed, timed_s = 0, 0.0
    for step in range(1, args.steps + args.warmup_steps + 1):
        shape = (args.per_device_batch, args.seq_len + 1)
        batch = torch.randint(0, args.vocab, shape, generator=gen).to(device)
        start = time.perf_counter()
        logits = model(batch[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, args.vocab), batch[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if device.type == "cuda":
            torch.cuda.synchronize(device)  # the step's kernels ran, not only queued
        step_s = time.perf_counter() - start
        warmup = step <= args.warmup_steps
        if not warmup:
            timed, timed_s = timed + 1, timed_s + step_s
        if rank == 0:
            rate = tokens_per_step / step_s
            tag = " (warm-up)" if warmup else ""
            print(
                f"step {step} loss {loss.item():.4f} time {step_s * 1000:.2f} ms "
                f"throughput {rate:.1f} tokens/s{tag}",
                flush=True,
            )
            if report:
                report.interval(step, rate, loss.item(), warmup=warmup)
    if rank == 0 and timed:
        throughput = tokens_per_step * timed / timed_s
        print(f"done: {timed} timed steps, {throughput:.1f} tokens/s", flush=True)
        if report:
            report.summary(
                throughput,
                timed,
                args.warmup_steps,
                timed_s,
                final_loss=loss.item() if math.isfinite(loss.item()) else None,
            )
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    rc = main()
    # Even after destroy_process_group, gloo can own a thread at C++ static destruction and
    # abort the finished process ("terminate called without an active exception"), which
    # torchrun reports as a failure. Leave without running those destructors.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(rc)
