"""The built-in GPT-style decoder in PyTorch, built from a shape (trainers/common/gpt.py):
GPT-2's block (pre-norm attention and MLP, learned positions, tied output), or Llama's
(RMSNorm, SwiGLU, rotary positions, grouped-query attention) where the shape says so.

It knows nothing of how it is distributed: FSDP, tensor parallelism and activation
checkpointing are applied to it from outside (trainers/torch_fsdp/parallelize.py), as
torchtitan applies them to its Llama. For that, every block's linear layers are named
modules (q, k, v, out; up, gate, down), and attention reads its head count from the width
it is given, so a block whose layers are split by tensor parallelism runs its share of the
heads unchanged. The forward pass returns logits for every position, flattened to
(batch x positions, vocabulary), so the trainer's cross-entropy takes them as it takes a
classifier's."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ..common.gpt import GPTShape


def _norm(shape: GPTShape) -> nn.Module:
    if shape.norm == "rmsnorm":
        return nn.RMSNorm(shape.width, eps=1e-5)
    return nn.LayerNorm(shape.width, bias=shape.bias)


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary positions (Su et al. 2021) on (batch, heads, positions, head_dim): each pair
    of the two halves turned by its position's angle."""
    a, b = x.chunk(2, dim=-1)
    return torch.cat((a * cos - b * sin, a * sin + b * cos), dim=-1)


class Attention(nn.Module):
    def __init__(self, shape: GPTShape) -> None:
        super().__init__()
        d, kv = shape.width, shape.kv * shape.head_dim
        self.head_dim = shape.head_dim
        self.q = nn.Linear(d, d, bias=shape.bias)
        self.k = nn.Linear(d, kv, bias=shape.bias)
        self.v = nn.Linear(d, kv, bias=shape.bias)
        self.out = nn.Linear(d, d, bias=shape.bias)

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor] | None):
        b, t, _ = x.shape
        # -1: the heads this rank holds (all of them, or its share under tensor parallelism)
        q = self.q(x).view(b, t, -1, self.head_dim).transpose(1, 2)
        k = self.k(x).view(b, t, -1, self.head_dim).transpose(1, 2)
        v = self.v(x).view(b, t, -1, self.head_dim).transpose(1, 2)
        if rope is not None:
            q, k = _rotate(q, *rope), _rotate(k, *rope)
        y = F.scaled_dot_product_attention(
            q, k, v, is_causal=True, enable_gqa=q.shape[1] != k.shape[1]
        )
        return self.out(y.transpose(1, 2).reshape(b, t, -1))


class MLP(nn.Module):
    def __init__(self, shape: GPTShape) -> None:
        super().__init__()
        d, f = shape.width, shape.hidden
        self.swiglu = shape.mlp == "swiglu"
        self.up = nn.Linear(d, f, bias=shape.bias)
        self.gate = nn.Linear(d, f, bias=shape.bias) if self.swiglu else None
        self.down = nn.Linear(f, d, bias=shape.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.gate is not None:
            return self.down(F.silu(self.gate(x)) * self.up(x))
        return self.down(F.gelu(self.up(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, shape: GPTShape) -> None:
        super().__init__()
        self.norm1, self.attn = _norm(shape), Attention(shape)
        self.norm2, self.mlp = _norm(shape), MLP(shape)

    def forward(self, x: torch.Tensor, rope=None) -> torch.Tensor:
        x = x + self.attn(self.norm1(x), rope)
        return x + self.mlp(self.norm2(x))


class GPT(nn.Module):
    def __init__(self, shape: GPTShape) -> None:
        super().__init__()
        self.shape = shape
        self.tokens = nn.Embedding(shape.vocab, shape.width)
        self.positions = (
            nn.Embedding(shape.seq_len, shape.width) if shape.positions == "learned" else None
        )
        self.blocks = nn.ModuleList(Block(shape) for _ in range(shape.layers))
        self.norm = _norm(shape)
        self.head = nn.Linear(shape.width, shape.vocab, bias=False)
        if shape.tied:
            self.head.weight = self.tokens.weight
        self._init_weights()

    def _init_weights(self) -> None:
        """GPT-2's: N(0, 0.02) weights, zero biases, and the layers that add to the residual
        stream (attention's output, the MLP's down) scaled by 1/sqrt(2 x layers)."""
        residual = 0.02 / math.sqrt(2 * self.shape.layers)
        for name, p in self.named_parameters():
            if p.dim() < 2:
                if name.endswith("bias"):
                    nn.init.zeros_(p)
                continue
            std = residual if name.endswith(("out.weight", "down.weight")) else 0.02
            nn.init.normal_(p, 0.0, std)

    def rope(self, t: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor] | None:
        if self.shape.positions != "rope":
            return None
        half = self.shape.head_dim // 2
        freq = 1.0 / (500000.0 ** (torch.arange(half, device=device, dtype=torch.float32) / half))
        angle = torch.outer(torch.arange(t, device=device, dtype=torch.float32), freq)
        return angle.cos(), angle.sin()

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        t = idx.shape[1]
        x = self.tokens(idx)
        if self.positions is not None:
            x = x + self.positions(torch.arange(t, device=idx.device))
        rope = self.rope(t, idx.device)
        for block in self.blocks:
            x = block(x, rope)
        # positions flattened before the output layer, so its output is a tensor of its
        # own, not a view (FSDP's hook on the model's output must not sit on a view)
        return self.head(self.norm(x).flatten(0, 1))
