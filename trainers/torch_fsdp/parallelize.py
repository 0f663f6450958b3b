"""How the FSDP trainer distributes a model, one function per technique driven by one
configuration, in torchtitan's order (its llama3/infra/parallelize.py): tensor parallelism
inside each block, then activation checkpointing around each block, then FSDP2 over the
data-parallel ranks (each block a group of its own, the rest of the model in the root's).
The model (torch_ddp/transformer.py) knows nothing of them."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    RowwiseParallel,
    parallelize_module,
)
from torch.utils.checkpoint import checkpoint

from ..common.entry import TrainerError


@dataclass(frozen=True)
class Parallelism:
    """What the run asked for (the framework's options, docs/transformers.md)."""

    tensor_parallel: int = 1
    reshard_after_forward: bool = True
    param_dtype: torch.dtype | None = None  # FSDP's mixed precision: compute in this dtype
    activation_checkpointing: bool = False


def parallelize(model: nn.Module, mesh: DeviceMesh, how: Parallelism) -> nn.Module:
    """`mesh`: ("dp", "tp"). Returns the model to train (the same module, changed)."""
    blocks = getattr(model, "blocks", None)
    if how.tensor_parallel > 1:
        if blocks is None:
            raise TrainerError("tensor parallelism splits a transformer's blocks; give a gpt model")
        apply_tp(blocks, mesh["tp"])
    if how.activation_checkpointing:
        if blocks is None:
            raise TrainerError(
                "activation checkpointing wraps a transformer's blocks; give a gpt model"
            )
        apply_ac(blocks)
    apply_fsdp(model, blocks, mesh["dp"], how)
    return model


def apply_tp(blocks: nn.ModuleList, tp_mesh: DeviceMesh) -> None:
    """Megatron-LM's split of each block (Shoeybi et al. 2019): queries, keys, values and the
    MLP's up (and gate) by columns, attention's output and the MLP's down by rows, so a
    block needs one allreduce after attention and one after the MLP, forward and backward.
    Norms, embeddings and the output layer stay whole on every rank (no sequence
    parallelism, no loss parallelism: their activations are replicated)."""
    for block in blocks:
        plan = {
            "attn.q": ColwiseParallel(),
            "attn.k": ColwiseParallel(),
            "attn.v": ColwiseParallel(),
            "attn.out": RowwiseParallel(),
            "mlp.up": ColwiseParallel(),
            "mlp.down": RowwiseParallel(),
        }
        if getattr(block.mlp, "gate", None) is not None:
            plan["mlp.gate"] = ColwiseParallel()
        parallelize_module(block, tp_mesh, plan)


class Checkpointed(nn.Module):
    """A block whose activations are recomputed in the backward pass instead of kept."""

    def __init__(self, block: nn.Module) -> None:
        super().__init__()
        self.block = block

    def forward(self, *args):
        return checkpoint(self.block, *args, use_reentrant=False)


def apply_ac(blocks: nn.ModuleList) -> None:
    for i, block in enumerate(blocks):
        blocks[i] = Checkpointed(block)


def apply_fsdp(
    model: nn.Module, blocks: nn.ModuleList | None, dp_mesh: DeviceMesh, how: Parallelism
) -> None:
    """Each block sharded as a group of its own (gathered just before it runs, freed after
    it unless `reshard_after_forward` is off), then the root (embeddings, final norm,
    output layer; a ResNet is one group). Mixed precision: parameters gathered and
    computed in `param_dtype`, gradients reduced in fp32."""
    policy = MixedPrecisionPolicy(
        param_dtype=how.param_dtype, reduce_dtype=torch.float32 if how.param_dtype else None
    )
    for block in blocks or ():
        fully_shard(
            block, mesh=dp_mesh, mp_policy=policy, reshard_after_forward=how.reshard_after_forward
        )
    fully_shard(
        model, mesh=dp_mesh, mp_policy=policy, reshard_after_forward=how.reshard_after_forward
    )
