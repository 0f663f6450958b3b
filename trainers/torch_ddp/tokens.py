"""The built-in transformer's batches: sequences of `seq_len` tokens and their next tokens.

A step's global batch (per_device_batch x ranks sequences) is the same whatever the ranks and
the strategy: each sequence is drawn from the run's seed and its place in the global batch,
and a data-parallel rank takes its contiguous share (under tensor parallelism the ranks of
one group take the same share, `per_device_batch x degree` sequences). So DDP, FSDP and
ZeRO-3 at any scale see the same data, and their loss curves can be compared step by step.

- synthetic-tokens: one batch of uniformly random tokens made on the device once, as the
  synthetic images are (throughput measures compute and communication, not data);
- alice: windows of the shipped book (common/data.py) at random offsets each step, one token
  per byte; no epochs (windows are sampled, not passes made)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

from ..common import data as common_data
from ..common.entry import TrainerError
from ..common.gpt import GPTShape

# The stream of offsets is seeded apart from the model's initial weights.
_DATA_SEED = 0x5EED


def token_batches(
    dataset: str,
    shape: GPTShape,
    global_batch: int,
    share: tuple[int, int],
    seed: int,
    device: torch.device,
) -> tuple[Iterator[Any], dict[str, Any]]:
    """Batches (x: rows x seq_len tokens, y: the next tokens, flattened) of this rank's
    `share` (data-parallel rank, data-parallel ranks), and what the params record says of
    the data."""
    dp_rank, dp_world = share
    rows = global_batch // dp_world
    first = dp_rank * rows
    t = shape.seq_len
    if dataset == "synthetic-tokens":
        x, y = _synthetic(shape, first, rows, seed)
        x, y = x.to(device), y.to(device)

        def same() -> Iterator[Any]:
            while True:
                yield x, y

        return same(), {"tokenizer": None}
    if dataset != "alice":
        raise TrainerError(f"{dataset} is not a token dataset (synthetic-tokens, alice)")
    tokens, digest = common_data.corpus_tokens()
    if shape.vocab < 256:
        raise TrainerError(
            f"alice is read as bytes (256 tokens); the model's vocabulary is {shape.vocab}"
        )
    if len(tokens) <= t + 1:
        raise TrainerError(f"alice has {len(tokens)} tokens, fewer than a sequence of {t} needs")
    text = torch.from_numpy(tokens.astype("int64"))
    window = torch.arange(t + 1)

    def windows() -> Iterator[Any]:
        gen = torch.Generator().manual_seed(seed ^ _DATA_SEED)
        while True:
            # every rank draws the global batch's offsets, then takes its own rows
            starts = torch.randint(0, len(text) - t - 1, (global_batch,), generator=gen)
            chunk = text[starts[first : first + rows, None] + window]
            yield chunk[:, :-1].to(device), chunk[:, 1:].reshape(-1).to(device)

    return windows(), {"tokenizer": "bytes", "corpus": "alice", "corpus_sha256": digest}


def _synthetic(shape: GPTShape, first: int, rows: int, seed: int):
    out = torch.empty(rows, shape.seq_len + 1, dtype=torch.int64)
    for i in range(rows):  # each sequence from its own place in the global batch
        gen = torch.Generator().manual_seed((seed ^ _DATA_SEED) * 1_000_003 + first + i)
        out[i] = torch.randint(0, shape.vocab, (shape.seq_len + 1,), generator=gen)
    return out[:, :-1], out[:, 1:].reshape(-1)
