"""Cluster profiles: what a site's Slurm looks like and how a framework's environment is
activated inside a job. TOML, validated by pydantic, errors as file:line: field like specs.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import (BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr,
                      field_validator, model_validator)

from .errors import PlanError
from .frameworks import FRAMEWORKS
from .spec import StrictModel, load_toml_model

# Slurm's time formats: MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS, or UNLIMITED.
_TIME = re.compile(r"^(?:(\d+)-(\d{1,2})(?::(\d{1,2})(?::(\d{1,2}))?)?|"
                   r"(\d+)(?::(\d{1,2}))?(?::(\d{1,2}))?)$")


def time_to_seconds(text: str) -> int | None:
    """Slurm time limit -> seconds (None for UNLIMITED); ValueError when malformed."""
    if text.upper() in ("UNLIMITED", "INFINITE"):
        return None
    m = _TIME.match(text.strip())
    if not m:
        raise ValueError(f"time {text!r} is not a Slurm time (MM, MM:SS, HH:MM:SS, "
                         "D-HH, D-HH:MM, D-HH:MM:SS or UNLIMITED)")
    if m[1] is not None:  # with days: D-HH[:MM[:SS]]
        d, h, mi, s = (int(x) if x else 0 for x in m.group(1, 2, 3, 4))
        return ((d * 24 + h) * 60 + mi) * 60 + s
    parts = [int(x) for x in m.group(5, 6, 7) if x is not None]
    if len(parts) == 1:
        return parts[0] * 60  # minutes
    if len(parts) == 2:
        return parts[0] * 60 + parts[1]  # MM:SS
    return (parts[0] * 60 + parts[1]) * 60 + parts[2]


def _check_time(value: str | None) -> str | None:
    if value is not None:
        time_to_seconds(value)
    return value


# Names that end up in #SBATCH lines, where no shell quoting protects them.
SAFE_NAME = r"^[A-Za-z0-9_.-]+$"


class Partition(StrictModel):
    name: StrictStr = Field(pattern=SAFE_NAME)
    nodes: StrictInt = Field(ge=1)
    cpus_per_node: StrictInt = Field(ge=1)
    gpus_per_node: StrictInt = Field(default=0, ge=0)
    gpu_type: StrictStr | None = Field(default=None, pattern=SAFE_NAME)
    max_time: StrictStr | None = None
    default: StrictBool = False

    _time = field_validator("max_time")(classmethod(lambda cls, v: _check_time(v)))


class Container(StrictModel):
    image: StrictStr
    runtime: Literal["apptainer", "singularity"] = "apptainer"
    nv: StrictBool = False  # --nv: bind the host's NVIDIA driver into the container
    binds: list[StrictStr] = []


class Environment(StrictModel):
    """How a framework's software is found inside a job: a venv, modules, or a container."""

    venv: StrictStr | None = None
    modules: list[StrictStr] = []
    container: Container | None = None
    launcher: Literal["srun", "torchrun"] | None = None

    @model_validator(mode="after")
    def _one_way(self) -> "Environment":
        if self.venv and self.container:
            raise ValueError("give a venv or a container, not both")
        return self


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
    sbatch_extra: list[StrictStr] = []  # each one option, passed as one argument
    python: StrictStr = "python3"
    environments: dict[str, Environment] = {}
    # "auto": `--backend slurm` talks to Slurm through pyslurm where one built for the
    # cluster's release imports (else through its commands, saying why)
    pyslurm: Literal["auto", "off"] = "off"

    _time = field_validator("time_limit")(classmethod(lambda cls, v: _check_time(v)))

    @field_validator("sbatch_extra")
    @classmethod
    def _safe_options(cls, v: list[str]) -> list[str]:
        # They become #SBATCH lines, which no shell quoting protects.
        for opt in v:
            if not re.fullmatch(r"--[a-z][a-z-]*(=[A-Za-z0-9_./,:=@+-]+)?", opt):
                raise ValueError(f"sbatch option {opt!r} must look like --name or "
                                 "--name=value, the value made of letters, digits and ./,:=@+_-")
        return v

    @field_validator("env")
    @classmethod
    def _env_names(cls, v: dict[str, str]) -> dict[str, str]:
        for k in v:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k):
                raise ValueError(f"{k!r} is not an environment variable name")
        return v

    @field_validator("environments")
    @classmethod
    def _known_frameworks(cls, v: dict[str, Environment]) -> dict[str, Environment]:
        for k in v:
            if k not in FRAMEWORKS:
                raise ValueError(f"environments.{k}: unknown framework; allowed: "
                                 f"{', '.join(FRAMEWORKS)}")
        return v

    @model_validator(mode="after")
    def _partitions(self) -> "Profile":
        names = [p.name for p in self.partitions]
        if len(set(names)) != len(names):
            raise ValueError(f"partition names repeat: {', '.join(names)}")
        if sum(p.default for p in self.partitions) > 1:
            raise ValueError("more than one partition has default = true")
        return self

    def partition(self, name: str | None) -> Partition:
        if name is None:
            return next((p for p in self.partitions if p.default), self.partitions[0])
        for p in self.partitions:
            if p.name == name:
                return p
        raise PlanError(f"profile {self.name}: unknown partition {name!r}; it has "
                        f"{', '.join(p.name for p in self.partitions)}")


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
            env = env.model_copy(update={"venv": str(venv if venv.is_absolute()
                                                     else (base / venv).resolve())})
        envs[fw] = env
    profile = profile.model_copy(update={"environments": envs})
    return LoadedProfile(path=str(path), text=text, profile=profile)
