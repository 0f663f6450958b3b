"""The training knobs, defined once: each trainer's command line (args.py), the spec's
`[training]` table (engine/spec.py) and the flags the engine launches a run with
(engine/launch.py) are all made from this table, so a knob, its default and its limits can
only change in one place. Standard library only: it runs in every framework's environment."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# After the linear warm-up: constant, step (/10 at 30/60/80% of training), poly (power 2)
# or cosine decay, as compared at scale by Aach et al. (common/schedule.py).
LR_SCALING = ("linear", "sqrt", "none")
LR_SCHEDULES = ("constant", "step", "poly", "cosine")
MEMORY_FORMATS = ("auto", "channels_last", "contiguous")

STEPS = "even at 1,000 steps a second, 10^9 steps take 11 days"
EPOCHS = "ImageNet training takes about 90 epochs; 10^5 is beyond any schedule"
CORES = "no node has more than 1024 cores"
SEED = "numpy takes seeds from 0 to 2^32-1"


@dataclass(frozen=True)
class Knob:
    """One training knob. `kind`: int, number (int or float), bool, str or choice. Bounds
    are inclusive (ge, le) or exclusive (gt, lt); `why` is the upper bound's reason,
    `low_why` the lower one's where it is not obvious. `flag` is the trainer's option."""

    name: str
    kind: str
    default: Any
    help: str
    flag: str = ""
    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None
    why: str = ""
    low_why: str | None = None
    choices: tuple[str, ...] = ()
    pattern: str | None = None
    form: str = ""  # what `pattern` allows, in words (an error says these, not the pattern)
    optional: bool = False  # may be left out (None)
    group: str | None = None  # knobs of one group: exactly one is given
    # A knob added after stores held runs: it joins a run's recipe (so its id) only when
    # set, so every spec without it keeps the run ids it always had.
    in_id_when_set: bool = False

    @property
    def option(self) -> str:
        return self.flag or "--" + self.name.replace("_", "-")

    @property
    def dest(self) -> str:
        """The name on the trainer's parsed arguments (and in the params record)."""
        return self.option[2:].replace("-", "_")

    def bounds(self) -> dict[str, float]:
        return {k: v for k in ("ge", "gt", "le", "lt") if (v := getattr(self, k)) is not None}


TRAINING: tuple[Knob, ...] = (
    Knob(
        "steps",
        "int",
        None,
        "timed steps after warm-up",
        ge=1,
        le=10**9,
        why=STEPS,
        optional=True,
        group="length",
    ),
    Knob(
        "epochs",
        "int",
        None,
        "passes over the training data",
        ge=1,
        le=10**5,
        why=EPOCHS,
        optional=True,
        group="length",
    ),
    Knob(
        "warmup_steps",
        "int",
        5,
        "first steps excluded from throughput (compilation, autotuning)",
        ge=0,
        le=10**9,
        why=STEPS,
    ),
    Knob(
        "lr",
        "number",
        0.1,
        "learning rate at --lr-base-batch",
        gt=0,
        le=100,
        why="SGD diverges at once with a learning rate above 100",
    ),
    Knob(
        "lr_base_batch",
        "int",
        128,
        "the global batch --lr is meant for",
        ge=1,
        le=2**20,
        why="it is a global batch, and those are at most 2^20",
    ),
    Knob(
        "lr_scaling", "choice", "linear", "how lr grows with the global batch", choices=LR_SCALING
    ),
    Knob(
        "lr_warmup_epochs",
        "number",
        0.0,
        "linear lr ramp from lr/world to the scaled lr (Goyal et al.)",
        ge=0,
        le=10**5,
        why=f"it counts epochs: {EPOCHS}",
    ),
    Knob("lr_schedule", "choice", "constant", "the lr after the warm-up", choices=LR_SCHEDULES),
    Knob(
        "momentum",
        "number",
        0.9,
        "SGD momentum",
        ge=0,
        lt=1,
        why="with a momentum of 1 or more no gradient is ever forgotten and training diverges",
    ),
    Knob(
        "weight_decay",
        "number",
        5e-4,
        "SGD weight decay (added to the gradient)",
        ge=0,
        le=1,
        why="a weight decay above 1 shrinks weights faster than they learn",
    ),
    Knob(
        "target_accuracy",
        "number",
        None,
        "top-1 at which time-to-accuracy is taken",
        gt=0,
        le=1,
        why="top-1 accuracy is a fraction",
        optional=True,
    ),
    Knob(
        "eval_every",
        "int",
        1,
        "epochs between evals",
        ge=1,
        le=10**5,
        why=f"it counts epochs: {EPOCHS}",
    ),
    Knob(
        "log_every",
        "int",
        10,
        "steps per interval record",
        ge=1,
        le=10**9,
        why=f"it counts steps: {STEPS}",
    ),
    Knob(
        "threads_per_rank",
        "int",
        1,
        "compute threads per rank on CPU (one by default: ranks own cores)",
        flag="--threads",
        ge=1,
        le=1024,
        why=CORES,
    ),
    Knob(
        "seed",
        "int",
        0,
        "random seed (data order, initial weights)",
        ge=0,
        le=2**32 - 1,
        why=SEED,
        low_why=SEED,
    ),
    Knob("compile", "bool", False, "torch.compile / XLA where offered"),
    Knob("memory_format", "choice", "auto", "auto: channels_last on GPU", choices=MEMORY_FORMATS),
    Knob(
        "loader_workers",
        "int",
        0,
        "native: worker processes (0: in the training process); "
        "dali: CPU threads of the pipeline (0 counts as 1)",
        ge=0,
        le=1024,
        why=f"{CORES} to run them",
    ),
    Knob(
        "breakdown_pairs",
        "int",
        None,
        "PyTorch family: pairs of steps after the timed ones that split a step into compute "
        "and exposed communication (default: a quarter of the timed steps, 2 to 10; 0: none, "
        "for a run that needs only its throughput, as a regression check does)",
        ge=0,
        le=1000,
        why="each pair steps the model three more times, past the timed steps",
        optional=True,
        in_id_when_set=True,
    ),
    Knob(
        "data_dir",
        "str",
        None,
        "folder of the dataset's files (cifar10; imagenet: holds train/, val/)",
        optional=True,
    ),
    Knob(
        "inject_fault",
        "str",
        None,
        "for testing failure handling: raise at step N",
        pattern=r"^crash@step\d+$",
        form="crash@stepN (N a step number)",
        optional=True,
    ),
)
KNOBS = {k.name: k for k in TRAINING}


def flags_for(values: dict[str, Any]) -> list[str]:
    """A run's training knobs as the trainer's options (a knob left out or None is not
    passed: the trainer's default, the same as the spec's, applies)."""
    out: list[str] = []
    for k in TRAINING:
        value = values.get(k.name, k.default)
        if value is None or value == "":
            continue
        if k.kind == "bool":
            out += [k.option] if value else []
        elif k.kind == "number":
            out += [k.option, repr(float(value))]
        else:
            out += [k.option, str(value)]
    return out
