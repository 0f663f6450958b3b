"""The built-in GPT-style decoder's shapes and their arithmetic, framework-free: the presets a
spec names, each shape's parameter count, and its training FLOPs per token by PaLM's count
(Chowdhery et al. 2022, appendix B; nanoGPT's `estimate_mfu`, torchtitan's
`get_num_flop_per_token`). The model itself is torch's (trainers/torch_ddp/transformer.py);
the engine and the memory probe size things from here without importing torch."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass


@dataclass(frozen=True)
class GPTShape:
    """A decoder-only transformer: `layers` blocks of attention (`heads` query heads of
    width // heads each, `kv_heads` key/value heads: fewer is grouped-query attention) and
    an MLP (`ffn` hidden units; "gelu": up and down, "swiglu": gate, up and down), over
    `seq_len` tokens of a `vocab`-word vocabulary. `tied`: the output layer is the token
    embedding's transpose (GPT-2, Llama 3.2 1B)."""

    layers: int
    width: int
    heads: int
    seq_len: int
    vocab: int
    kv_heads: int = 0  # 0: as many as heads
    ffn: int = 0  # 0: 4 x width
    norm: str = "layernorm"  # or "rmsnorm"
    mlp: str = "gelu"  # or "swiglu"
    positions: str = "learned"  # or "rope" (rotary: no parameters)
    bias: bool = True  # biases in every linear layer and norm (GPT-2), or none (Llama)
    tied: bool = True

    def __post_init__(self) -> None:
        if self.width % self.heads:
            raise ValueError(f"width {self.width} is not a multiple of its {self.heads} heads")
        if self.heads % self.kv:
            raise ValueError(f"{self.heads} heads do not split into {self.kv} key/value groups")

    @property
    def kv(self) -> int:
        return self.kv_heads or self.heads

    @property
    def hidden(self) -> int:
        return self.ffn or 4 * self.width

    @property
    def head_dim(self) -> int:
        return self.width // self.heads

    def with_layers(self, layers: int) -> GPTShape:
        return dataclasses.replace(self, layers=layers)

    def parameters(self) -> int:
        """Every parameter, by hand (the model's own count must agree: a test)."""
        d, q, f = self.width, self.head_dim, self.hidden
        b = 1 if self.bias else 0
        norm = 2 * d if self.norm == "layernorm" and self.bias else d
        attention = d * d + b * d  # queries
        attention += 2 * (d * self.kv * q + b * self.kv * q)  # keys and values
        attention += d * d + b * d  # output projection
        mlp = 3 * d * f if self.mlp == "swiglu" else 2 * d * f + b * (f + d)
        block = attention + mlp + 2 * norm
        embeddings = self.vocab * d + (self.seq_len * d if self.positions == "learned" else 0)
        head = 0 if self.tied else self.vocab * d
        return self.layers * block + embeddings + norm + head

    def lookup_parameters(self) -> int:
        """Parameters used by lookup alone, no multiply: the position table, and the token
        table where the output layer is not tied to it (tied, it is the output layer)."""
        positions = self.seq_len * self.width if self.positions == "learned" else 0
        return positions + (0 if self.tied else self.vocab * self.width)

    def flops_per_token(self, parameters: int | None = None) -> int:
        """Training FLOPs per token by PaLM's count: 6N for the forward (2N) and backward
        (4N) matrix multiplies of N parameters (lookups excluded), plus 12·L·H·Q·T for
        attention's scores and weighted values over T positions (H heads of Q dimensions;
        causal masking not discounted, recomputation not counted: model FLOPs, not
        hardware FLOPs). `parameters`: the model's own count (default: this shape's)."""
        n = (self.parameters() if parameters is None else parameters) - self.lookup_parameters()
        return 6 * n + 12 * self.layers * self.heads * self.head_dim * self.seq_len


# Presets, smallest first. gpt-tiny trains in a second on a CPU core (the tests); gpt-mini is
# the CPU study's, large enough that parameters, gradients and optimizer state outweigh
# activations, so sharding them shows in the memory per rank. GPT-2 small and medium are
# Radford et al. 2019's shapes with nanoGPT's vocabulary padded to 50,304 (a multiple of
# 64); llama-1b is Llama 3.2 1B's (16 layers of 2,048, 32 heads over 8 key/value heads,
# SwiGLU of 8,192, RMSNorm, rotary positions, 128,256 words, tied: 1.24B parameters) at a
# 2,048-token context.
PRESETS: dict[str, GPTShape] = {
    "gpt-tiny": GPTShape(layers=2, width=64, heads=4, seq_len=64, vocab=256),
    "gpt-mini": GPTShape(layers=8, width=512, heads=8, seq_len=128, vocab=256),
    "gpt2-small": GPTShape(layers=12, width=768, heads=12, seq_len=1024, vocab=50304),
    "gpt2-medium": GPTShape(layers=24, width=1024, heads=16, seq_len=1024, vocab=50304),
    "llama-1b": GPTShape(
        layers=16,
        width=2048,
        heads=32,
        kv_heads=8,
        ffn=8192,
        seq_len=2048,
        vocab=128256,
        norm="rmsnorm",
        mlp="swiglu",
        positions="rope",
        bias=False,
    ),
}
GPT_MODELS = tuple(PRESETS)


def shape_of(model: str, layers: int | None = None) -> GPTShape:
    """A preset's shape, with `layers` blocks instead of its own where given (the memory
    probe grows a model this way)."""
    shape = PRESETS[model]
    return shape.with_layers(layers) if layers else shape
