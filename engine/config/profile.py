"""Cluster profiles: what a site's Slurm looks like and how a framework's environment is
activated inside a job. TOML, validated by pydantic, errors as file:line: field like specs.
"""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    field_validator,
    model_validator,
)

from ..errors import PlanError
from .frameworks import FRAMEWORKS
from .gpu_arch import arch_name, parse_arch
from .quantities import BANDWIDTH, LATENCY
from .software import Environment
from .spec import NODES
from .times import check_time
from .tomlfile import StrictModel, limit, load_toml_model, worded

# Names that end up in #SBATCH lines, where no shell quoting protects them.
SAFE_NAME = worded(r"^[A-Za-z0-9_.-]+$", "letters, digits, '.', '_' or '-' (no spaces)")


# --- sbatch_extra: options for sbatch that dlscale does not set itself -------------------


def _own_directives() -> set[str]:
    """The options dlscale's templates put on #SBATCH lines themselves."""
    found = set()
    for t in resources.files("dlscale.jobscripts").iterdir():
        if t.name.endswith(".j2"):
            found |= set(re.findall(r"^#SBATCH (--[a-z][a-z-]*)", t.read_text(), re.M))
    return found


# An extra option after dlscale's own would win (sbatch takes the last), so these are
# refused: the templates' own, and those that move or split what dlscale relies on (where
# the job runs, its environment, its log, one job per run). The value says where to set it
# instead, or why it cannot be changed.
_FIXED = "it cannot be changed in sbatch_extra"
RESERVED = {
    opt: _FIXED
    for opt in sorted(
        _own_directives()
        | {"--chdir", "--export", "--export-file", "--array", "--error", "--requeue", "--ntasks"}
    )
}
RESERVED.update(
    {
        "--job-name": "each job is named after its run",
        "--chdir": "a job runs in its run folder",
        "--output": "a job writes to its run's log, where dlscale reads it",
        "--error": "a job writes to its run's log, where dlscale reads it",
        "--open-mode": "a resubmitted job appends to its run's log",
        "--no-requeue": "a requeued job would measure twice into one run",
        "--requeue": "a requeued job would measure twice into one run",
        "--array": "dlscale submits and follows one job per run",
        "--export": "set variables in the profile's [env]",
        "--export-file": "set variables in the profile's [env]",
        "--partition": "choose it with --partition or the profile's [[partitions]] default",
        "--nodes": "the spec's scales set it",
        "--ntasks": "the spec's scales set it",
        "--ntasks-per-node": "the spec's scales set it",
        "--cpus-per-task": "the spec's training.threads_per_rank sets it",
        "--time": "set the profile's time_limit",
        "--gpus-per-node": "set the partition's gpus_per_node (and gpu_type)",
        "--account": "set the profile's account",
        "--qos": "set the profile's qos",
        "--exclusive": "set the profile's exclusive = true",
        "--dependency": "the profile's singleton = true sets --dependency=singleton",
    }
)
# Options that dlscale does not set but that would stop it submitting, following or
# cancelling a run's job, or make the job other than the plan says: refused, with why.
BREAKING = {
    "--clusters": "dlscale follows and cancels jobs on the cluster it submits from (its "
    "sacct, squeue and scancel take no -M); run dlscale on that cluster's login node",
    "--cluster-constraint": "dlscale follows and cancels jobs on the cluster it submits "
    "from; a federation could start the job on another",
    "--container": "a run's software comes from the profile's [environments] (a container "
    "there: container = { image, runtime })",
    "--gpus": "the partition's gpus_per_node (and gpu_type) sets the GPUs: the plan puts "
    "one rank on each",
    "--gpus-per-task": "the partition's gpus_per_node (and gpu_type) sets the GPUs: the "
    "plan puts one rank on each",
    "--gpus-per-socket": "the partition's gpus_per_node (and gpu_type) sets the GPUs: the "
    "plan puts one rank on each",
    "--signal": "the job script ends on the time limit's SIGTERM and records it in "
    "job.exit; an earlier signal would end the run early or unrecorded",
    "--test-only": "it makes no job (`dlscale plan` shows what would be submitted)",
    "--wait": "sbatch would not return until the job ends (`dlscale run --wait` waits)",
    "--wrap": "a run's job is its own job script",
    "--parsable": "dlscale passes it to read the job id",
    "--comment": "dlscale tags each job in its comment, to find it when sbatch's answer is lost",
    "--tres-per-task": "the spec's scales and threads_per_rank, and the partition's "
    "gpus_per_node, set a task's resources",
    "--help": "sbatch makes no job with it",
    "--usage": "sbatch makes no job with it",
    "--version": "sbatch makes no job with it",
}
# --gres is kept for other resources (a local disk, licences); GPUs come from the partition
_GPU_GRES = "--gres"
_SHORT = {
    "-a": "--array",
    "-A": "--account",
    "-c": "--cpus-per-task",
    "-d": "--dependency",
    "-D": "--chdir",
    "-e": "--error",
    "-J": "--job-name",
    "-n": "--ntasks",
    "-N": "--nodes",
    "-o": "--output",
    "-p": "--partition",
    "-q": "--qos",
    "-t": "--time",
    "-M": "--clusters",
    "-G": "--gpus",
    "-W": "--wait",
    "-h": "--help",
    "-V": "--version",
}
# sbatch's long options (22.05, `sbatch --help` and the undocumented ones): sbatch takes
# any unambiguous abbreviation of them (--out is --output), and an exact name wins.
SBATCH_OPTIONS = set(RESERVED) | set(
    """
--account --acctg-freq --array --batch --bb --bbf --begin --chdir --cluster-constraint
--clusters --comment --constraint --container --contiguous --core-spec --cores-per-socket
--cpu-freq --cpus-per-gpu --cpus-per-task --deadline --delay-boot --dependency
--distribution --error --exclude --exclusive --export --export-file --extra-node-info
--get-user-env --gid --gpu-bind --gpu-freq --gpus --gpus-per-node --gpus-per-socket
--gpus-per-task --gres --gres-flags --help --hint --hold --ignore-pbs --input --job-name
--kill-on-invalid-dep --licenses --mail-type --mail-user --mcs-label --mem --mem-bind
--mem-per-cpu --mem-per-gpu --mincpus --network --nice --no-kill --no-requeue --nodefile
--nodelist --nodes --ntasks --ntasks-per-core --ntasks-per-gpu --ntasks-per-node
--ntasks-per-socket --open-mode --output --overcommit --oversubscribe --parsable
--partition --power --priority --profile --propagate --qos --quiet --reboot --requeue
--reservation --signal --sockets-per-node --spread-job --switches --test-only
--thread-spec --threads-per-core --time --time-min --tmp --uid --usage --use-min-nodes
--verbose --version --wait --wait-all-nodes --wckey --wrap""".split()
)


def _reserved_in(opt: str, among: dict[str, str]) -> tuple[str, list[str]]:
    """(the option's name as written, the options of `among` sbatch could take it for)."""
    name = opt.split("=", 1)[0]
    if not name.startswith("--"):
        short = name[:2]
        return short, [_SHORT[short]] if _SHORT.get(short) in among else []
    if name in SBATCH_OPTIONS:
        return name, [name] if name in among else []
    return name, sorted(o for o in among if o.startswith(name))


def _read_as(name: str, options: list[str]) -> str:
    return name if options == [name] else f"{name} (sbatch may read it as {' or '.join(options)})"


def check_sbatch_option(opt: str) -> str:
    name, reserved = _reserved_in(opt, RESERVED)
    if reserved:
        where = "; ".join(dict.fromkeys(RESERVED[r] for r in reserved))
        raise ValueError(f"{_read_as(name, reserved)} is set by dlscale itself: {where}")
    name, breaking = _reserved_in(opt, BREAKING)
    if breaking:
        why = "; ".join(dict.fromkeys(BREAKING[r] for r in breaking))
        raise ValueError(f"{_read_as(name, breaking)} cannot be used in sbatch_extra: {why}")
    name, gres = _reserved_in(opt, {_GPU_GRES: ""})
    value = opt.partition("=")[2]
    kinds = {r.split(":")[0].strip().lower().removeprefix("gres/") for r in value.split(",")}
    if gres and "gpu" in kinds:
        raise ValueError(
            f"{opt}: GPUs cannot be asked for in sbatch_extra: the partition's "
            "gpus_per_node (and gpu_type) sets them, and the plan puts one rank on each "
            "(--gres for other resources is kept)"
        )
    # #SBATCH lines are read by sbatch, not by a shell: no quoting protects them.
    if not re.fullmatch(r"--[a-z][a-z-]*(=[A-Za-z0-9_./,:=@+-]+)?", opt):
        raise ValueError(
            f"sbatch option {opt!r} must look like --name or --name=value, the "
            "value made of letters, digits and ./,:=@+_-"
        )
    return opt


class Partition(StrictModel):
    name: StrictStr = Field(pattern=SAFE_NAME)
    nodes: NODES
    cpus_per_node: limit(StrictInt, "Slurm counts a node's CPUs in 16 bits", ge=1, le=65_535)
    gpus_per_node: limit(StrictInt, "more GPUs than any node holds", ge=0, le=1024) = 0
    gpu_type: StrictStr | None = Field(default=None, pattern=SAFE_NAME)
    # The GPUs' compute capability ("sm_90", "9.0"): planning refuses a framework whose GPU
    # build has no kernels for it, and precisions it lacks (engine/launching/gpus.py).
    gpu_arch: StrictStr | StrictFloat | None = None
    max_time: StrictStr | None = None
    default: StrictBool = False

    _time = field_validator("max_time")(classmethod(lambda cls, v: check_time(v)))

    @field_validator("gpu_arch", mode="before")
    @classmethod
    def _no_integer_arch(cls, v: object) -> object:
        # 9 could be 9.0 or sm_90's 90: TOML's types say which, so ask for one of them
        if isinstance(v, int):
            raise ValueError(
                f'{v!r} is not a GPU architecture: write it as "sm_90" or 9.0 '
                "(the compute capability)"
            )
        return v

    @field_validator("gpu_arch")
    @classmethod
    def _arch(cls, v: str | float | None) -> str | None:
        return None if v is None else arch_name(parse_arch(v))


class Interconnect(StrictModel):
    """The links as the site states them (its documentation, the NIC's and NVLink's data
    sheets), for `dlscale project` where the communication benchmark did not measure a
    tier; what it projects from them it calls stated, not measured. GB/s are 10^9 bytes a
    second, as nccl-tests print bus bandwidth, which is what these figures bound: a ring
    allreduce across nodes moves at most the node's injection bandwidth, within a node at
    most the links between its devices."""

    # per node, all its NICs together: 8 x 200 Gb/s InfiniBand is 200 GB/s
    injection_gbps: BANDWIDTH.field(optional=True) = None  # type: ignore[valid-type]
    # between the devices of a node: NVLink, PCIe, shared memory
    intra_node_gbps: BANDWIDTH.field(optional=True) = None  # type: ignore[valid-type]
    latency_us: LATENCY.field(optional=True) = None  # type: ignore[valid-type]  # one message's


# How long a front end waits for one Slurm command by default (Profile.command_timeout).
COMMAND_TIMEOUT_S = 10


class Profile(StrictModel):
    name: StrictStr = Field(pattern=SAFE_NAME)
    description: StrictStr = ""
    partitions: list[Partition] = Field(min_length=1)
    account: StrictStr | None = Field(default=None, pattern=SAFE_NAME)
    qos: StrictStr | None = Field(default=None, pattern=SAFE_NAME)
    time_limit: StrictStr = "00:30:00"
    exclusive: StrictBool = False
    singleton: StrictBool = False  # --dependency=singleton: one benchmark job at a time
    modules: list[StrictStr] = []
    env: dict[str, StrictStr] = {}
    # NCCL's settings (NCCL_SOCKET_IFNAME, NCCL_IB_HCA, NCCL_DEBUG...), exported in every job
    nccl: dict[str, StrictStr | StrictInt] = {}
    sbatch_extra: list[Annotated[StrictStr, AfterValidator(check_sbatch_option)]] = []
    python: StrictStr = "python3"
    environments: dict[str, Environment] = {}
    # "auto": `--backend slurm` talks to Slurm through pyslurm where one built for the
    # cluster's release imports (else through its commands, saying why)
    pyslurm: Literal["auto", "off"] = "off"
    # Job arrays (README: "Job arrays, throttles and waves"). Runs of one job shape go as
    # one `sbatch --array`; these cap it where the site's own answers (scontrol show config,
    # sacctmgr) are missing, unreadable or larger than what the user may use.
    arrays: StrictBool = True
    max_array_size: (
        limit(
            StrictInt,
            "Slurm's MaxArraySize goes no higher",
            ge=1,  # tasks
            le=4_000_001,
        )
        | None
    ) = None  # per array
    max_jobs: (
        limit(
            StrictInt,
            "Slurm's MaxJobCount goes no higher",
            ge=1,  # queued jobs
            le=2**26,
        )
        | None
    ) = None  # per user
    max_concurrent: (
        limit(
            StrictInt,
            "more jobs at once than Slurm can hold",
            ge=1,  # %N
            le=2**26,
        )
        | None
    ) = None
    # false: the site has no slurmdbd; jobs are followed with squeue, scontrol and the
    # exit marker each job script writes (unset: learnt from sacct's answer)
    accounting: StrictBool | None = None
    # Seconds dlscale-tui waits for one Slurm command (sacct, squeue, sacctmgr, scontrol,
    # sbatch) before it says the command did not answer and goes on: a screen never waits
    # on a slow slurmdbd for long (the command line waits up to 60 s).
    command_timeout: limit(
        StrictInt | StrictFloat,
        "longer than a screen should wait for one command",
        "a command needs some time to answer",
        ge=1,
        le=600,
    ) = COMMAND_TIMEOUT_S
    interconnect: Interconnect | None = None

    _time = field_validator("time_limit")(classmethod(lambda cls, v: check_time(v)))

    @field_validator("env")
    @classmethod
    def _env_names(cls, v: dict[str, str]) -> dict[str, str]:
        for k in v:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k):
                raise ValueError(f"{k!r} is not an environment variable name")
        return v

    @field_validator("nccl")
    @classmethod
    def _nccl_names(cls, v: dict[str, str | int]) -> dict[str, str]:
        for k in v:
            if not re.fullmatch(r"NCCL_[A-Z0-9_]+", k):
                raise ValueError(
                    f"{k!r} is not an NCCL variable: names are NCCL_ and capitals, "
                    "digits or _ (NCCL_SOCKET_IFNAME, NCCL_IB_HCA, NCCL_DEBUG...)"
                )
        return {k: str(x) for k, x in v.items()}

    @field_validator("environments")
    @classmethod
    def _known_frameworks(cls, v: dict[str, Environment]) -> dict[str, Environment]:
        for k in v:
            if k not in FRAMEWORKS:
                raise ValueError(
                    f"environments.{k}: unknown framework; allowed: {', '.join(FRAMEWORKS)}"
                )
        return v

    @model_validator(mode="after")
    def _partitions(self) -> Profile:
        names = [p.name for p in self.partitions]
        if len(set(names)) != len(names):
            raise ValueError(f"partition names repeat: {', '.join(names)}")
        if sum(p.default for p in self.partitions) > 1:
            raise ValueError("more than one partition has default = true")
        both = sorted(set(self.env) & set(self.nccl))
        if both:
            raise ValueError(f"{', '.join(both)} set in both [env] and [nccl]; keep one")
        return self

    def partition(self, name: str | None) -> Partition:
        if name is None:
            return next((p for p in self.partitions if p.default), self.partitions[0])
        for p in self.partitions:
            if p.name == name:
                return p
        raise PlanError(
            f"profile {self.name}: unknown partition {name!r}; it has "
            f"{', '.join(p.name for p in self.partitions)}"
        )


class LoadedProfile(BaseModel):
    model_config = ConfigDict(frozen=True)
    path: str
    text: str
    profile: Profile


def load_profile(path: str | Path) -> LoadedProfile:
    text, profile = load_toml_model(path, Profile)
    # venv paths: `~` expanded, relative ones taken from the profile's own folder
    base = Path(path).resolve().parent
    envs = {}
    for fw, env in profile.environments.items():
        if env.venv:
            venv = Path(env.venv).expanduser()
            env = env.model_copy(
                update={"venv": str(venv if venv.is_absolute() else (base / venv).resolve())}
            )
        envs[fw] = env
    profile = profile.model_copy(update={"environments": envs})
    return LoadedProfile(path=str(path), text=text, profile=profile)
