"""One rank's training in the PyTorch family, shaped like pytorch/examples' Trainer: the
data, model and optimizer made once, then a step, an evaluation and the run's end as named
methods, which the shared timed loop (common.loop) calls. What differs between DDP,
DeepSpeed and Horovod is the run's `Distribution` (train.py), not this class."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.nn.functional as F

from ..common import breakdown
from ..common import data as common_data
from ..common import loop as training_loop
from ..common.args import TOKEN_DATASETS, recipe_fields
from ..common.context import weights_digest
from ..common.entry import TrainerError
from ..common.gpt import PRESETS, shape_of
from . import loaders
from .batches import Data
from .device import ComputeDtype, CudaTimer, set_math_modes
from .metrics import DevicePeak, transformer_fields
from .models import build, parameter_count
from .probes import step_breakdown, synthetic_batches
from .tokens import token_batches
from .transformer import GPT

if TYPE_CHECKING:
    from .train import TorchRun


# torch.compile's modes that capture CUDA graphs (reduce-overhead; max-autotune also tunes).
CUDA_GRAPH_MODES = ("reduce-overhead", "max-autotune")


def compiled(module: torch.nn.Module, args) -> torch.nn.Module:
    """The module under torch.compile in the run's mode (--compile-mode): the forward pass,
    and through AOTAutograd its backward; the fused optimizer step stays outside."""
    mode = None if args.compile_mode == "default" else args.compile_mode
    return torch.compile(module, mode=mode)


def trainable_weights(model: torch.nn.Module) -> Iterator[tuple[str, np.ndarray]]:
    """The trainable weights by name, for the digest. BatchNorm running statistics are left
    out on purpose: each rank updates them from its own data, and DDP re-broadcasts them
    only at the next forward pass, so they legitimately differ after the last step."""
    for name, p in sorted(model.named_parameters()):
        yield name, p.detach().float().cpu().contiguous().numpy()


class Trainer:
    """The run's data, model and optimizer, and what the loop calls: `step`, `evaluate`."""

    def __init__(self, run: TorchRun) -> None:
        self.run, self.ctx, self.strategy, self.device = run, run.ctx, run.strategy, run.device
        self.args = run.ctx.args
        self.cuda = run.device.type == "cuda"
        # Data: synthetic tensors live on the device; real data goes through --loader; a
        # transformer's tokens are the trainer's own (tokens.py).
        self.data: Data | None = None
        self.shape, self.peak = None, None
        self.unit, self.sample_units, self.data_info = "images", 1, {}
        if self.args.dataset in TOKEN_DATASETS:
            self._tokens()
        elif self.args.dataset in common_data.SYNTHETIC:
            shape = common_data.SHAPES[self.args.dataset]
            self.stream: Iterator[Any] = synthetic_batches(run, shape)()
            self.steps_per_epoch, self.classes = None, shape.classes
        else:
            self.data = self._load()
            self.stream = self._epochs(self.data)
            self.steps_per_epoch, self.classes = self.data.steps_per_epoch, self.data.classes
        self.recipe = self.ctx.recipe(
            self.ctx.total_steps(self.steps_per_epoch),
            self.steps_per_epoch,
            self.unit,
            self.sample_units,
        )
        self._build_model()
        self.last: list[Any] = []  # the latest batch, for the step-time breakdown

    def _tokens(self) -> None:
        """A transformer's run: its shape, its batches, and its device's peak (measured
        before the model takes memory, on every rank at once)."""
        args, ctx = self.args, self.ctx
        if args.model not in PRESETS:
            raise TrainerError(
                f"{args.dataset} is read by the transformer models: {', '.join(PRESETS)}"
            )
        self.shape = shape_of(args.model, args.gpt_layers)
        self.stream, self.data_info = token_batches(
            args.dataset,
            self.shape,
            ctx.global_batch,
            self.strategy.data_share(ctx.launch),
            args.seed,
            self.device,
        )
        self.steps_per_epoch, self.classes = None, self.shape.vocab
        self.unit, self.sample_units = "tokens", self.shape.seq_len
        self.peak = DevicePeak(self.run)

    def _load(self) -> Data:
        ctx, run = self.ctx, self.run
        return loaders.build(
            self.args,
            ctx.world,
            ctx.launch.rank,
            ctx.launch.local_rank,
            run.device,
            run.channels_last,
            self.strategy.framework,
        )

    @staticmethod
    def _epochs(data: Data) -> Iterator[Any]:
        """Every epoch's batches, each epoch followed by None (the loop's epoch end)."""
        epoch = 0
        while True:
            yield from data.epoch(epoch)
            epoch += 1
            yield None

    def _build_model(self) -> None:
        args, run = self.args, self.run
        if self.shape is None and args.gpt_layers:
            raise TrainerError("--gpt-layers sizes a transformer model (a token dataset)")
        torch.manual_seed(args.seed)
        self.model = (GPT(self.shape) if self.shape else build(args.model, self.classes)).to(
            run.device
        )
        # Counted before a strategy shards them (ZeRO-3 leaves each rank an empty tensor).
        self.parameters = parameter_count(self.model)
        if run.channels_last and self.strategy.channels_last_weights:
            self.model = self.model.to(memory_format=torch.channels_last)
        self.math_modes = set_math_modes(run.precision) if self.cuda else {}
        # Fused SGD: one kernel for every parameter's update on the GPU (DeepLearningExamples).
        opt = torch.optim.SGD(
            self.model.parameters(),
            lr=self.recipe.plan.lr(0),
            momentum=args.momentum,
            weight_decay=args.weight_decay,
            **({"fused": True} if self.cuda else {}),
        )
        self.seen_dtype = ComputeDtype(self.model, compiled=args.compile)
        wrapped, self.opt = self.strategy.wrap(
            self.model, opt, args, self.ctx.launch, run.device, run.precision
        )
        self.net = compiled(wrapped, args) if args.compile else wrapped
        # CUDA graphs replay into the same output buffers: each step is marked as a new
        # iteration, so the graphs of the previous one may be overwritten (torch docs,
        # "CUDAGraph Trees").
        self.graphs = args.compile and args.compile_mode in CUDA_GRAPH_MODES
        self.scaler = torch.amp.GradScaler("cuda") if run.precision == "fp16" else None

    def write_params(self) -> None:
        ctx, run, data = self.ctx, self.run, self.data
        assert ctx.writer is not None
        ctx.writer.write(
            "params",
            framework=self.strategy.framework,
            world_size=ctx.world,
            global_batch=ctx.global_batch,
            parameters=self.parameters,
            precision=run.precision,
            channels_last=run.channels_last,
            channels_last_weights=run.channels_last and self.strategy.channels_last_weights,
            total_steps=self.recipe.total_steps,
            steps_per_epoch=self.steps_per_epoch,
            lr_scaled=self.recipe.plan.scaled_lr,
            device=self.device.type,
            classes=self.classes,
            train_images=data.train_images if data else None,
            eval_images=data.eval_images if data else None,
            distributed=ctx.launch.distributed,
            fused_sgd=self.cuda,
            compile_mode=self.args.compile_mode if self.args.compile else None,
            **self.math_modes,
            **recipe_fields(self.args),
            **self.strategy.record(self.args, ctx.launch),
            **self._transformer_params(),
        )

    def _transformer_params(self) -> dict[str, Any]:
        if self.shape is None:
            return {}
        s = self.shape
        return {
            "unit": self.unit,
            "layers": s.layers,
            "width": s.width,
            "heads": s.heads,
            "kv_heads": s.kv,
            "ffn": s.hidden,
            "seq_len": s.seq_len,
            "vocab": s.vocab,
            "tokens_per_step": self.recipe.units_per_step,
            "flops_per_token": s.flops_per_token(self.parameters),
            "malloc_mmap_threshold_bytes": self.peak.mmap_threshold if self.peak else None,
            **self.data_info,
        }

    def write_env(self) -> None:
        cuda, device = self.cuda, self.device
        versions = {
            "torch": torch.__version__,
            "numpy": np.__version__,
            "cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version() if cuda else None,
            "nccl": ".".join(map(str, torch.cuda.nccl.version())) if cuda else None,
            **self.strategy.versions(),
            **(self.data.versions if self.data else {}),
        }
        self.ctx.open_meter(torch.cuda.get_device_properties(device) if cuda else None)
        self.ctx.write_env(
            versions,
            self.run.gather,
            device=torch.cuda.get_device_name(device) if cuda else None,
            backend=self.strategy.comm_backend(device),
        )

    def step(self, xb, yb) -> torch.Tensor:
        """One training step; the loss, unread (reading it synchronises)."""
        self.last[:] = [xb, yb]
        if self.seen_dtype.seen is None:
            self.seen_dtype.see_first(xb, self.run.autocast)
        if self.graphs:
            torch.compiler.cudagraph_mark_step_begin()
        with self.run.autocast():
            loss = F.cross_entropy(self.net(xb), yb)
        self.strategy.step(self.net, self.opt, loss, self.scaler)
        return loss

    def evaluate(self) -> float:
        """Top-1 accuracy over the whole evaluation set, every rank's share summed."""
        assert self.data is not None
        self.model.eval()
        correct = torch.zeros(2, device=self.device)
        with torch.no_grad(), self.run.autocast():
            for xb, yb in self.data.val():
                correct[0] += (self.model(xb).argmax(1) == yb).sum()
                correct[1] += len(yb)
        self.strategy.all_reduce(correct, self.ctx.launch)
        self.model.train()
        return float(correct[0] / correct[1])

    def hooks(self) -> training_loop.Hooks:
        return training_loop.Hooks(
            step=self.step,
            set_lr=lambda lr: self.strategy.set_lr(self.opt, lr),
            loss_of=self.loss_of,
            sync=self.run.sync,
            evaluate=self.evaluate if self.data is not None else None,
            timer=CudaTimer() if self.cuda else training_loop.WallTimer(),
            progress=self.ctx.progress,
            meter=self.ctx.meter,
        )

    def loss_of(self, loss: torch.Tensor) -> float:
        """The logged loss (read at interval boundaries only: reading synchronises). A
        transformer's is the global batch's, the mean over the ranks, so runs at any scale
        and in any strategy log the same curve for the same data."""
        if self.shape is None:
            return float(loss.detach())
        total = loss.detach().float().reshape(1).clone()
        self.strategy.all_reduce(total, self.ctx.launch)
        return float(total) / self.ctx.world

    def breakdown(self, loop: training_loop.Loop) -> dict[str, Any]:
        """The step-time breakdown, measured by steps past the timed ones (so after the
        weights' digest and the energy reading)."""
        timed = loop.timed_steps(self.args.warmup_steps)
        if not (timed and self.last):
            return {}
        pairs = self.args.breakdown_pairs
        if pairs == 0:
            return {"breakdown_unavailable": "not measured: training.breakdown_pairs = 0"}
        pairs = breakdown.pairs_for(timed) if pairs is None else pairs
        return step_breakdown(self.run, self.net, self.opt, self.scaler, self.last, pairs)

    def finish(self, loop: training_loop.Loop) -> float:
        return self.ctx.finish(
            self.recipe,
            loop,
            weights_digest(self.strategy.full_weights(self.model)),
            self.run.gather,
            self.run.barrier,
            after_readings=lambda: self.breakdown(loop),
            compute_dtype=self.seen_dtype.seen,
            **self.transformer_metrics(loop),
        )

    def transformer_metrics(self, loop: training_loop.Loop) -> dict[str, Any]:
        """Tokens a second, TFLOPS and MFU over the timed steps, and memory per rank."""
        if self.shape is None or self.peak is None:
            return {}
        timed = loop.timed_steps(self.args.warmup_steps)
        tokens_per_s = (
            timed * self.recipe.units_per_step / loop.train_time if loop.train_time else 0.0
        )
        flops = self.shape.flops_per_token(self.parameters)
        return transformer_fields(self.run, self.peak, tokens_per_s, flops)

    def train(self) -> int:
        self.write_params()
        self.write_env()
        self.model.train()
        assert self.ctx.writer is not None
        loop = training_loop.run(self.recipe, self.hooks(), self.ctx.writer, self.stream)
        self.finish(loop)
        return 0
