"""Where a framework's software comes from inside a job: a venv, modules, or a container.
A profile's `[environments.FRAMEWORK]` and a declared framework's `software` table
(engine/config/custom.py) are the same thing."""

from __future__ import annotations

from typing import Literal

from pydantic import StrictBool, StrictStr, model_validator

from .tomlfile import StrictModel


class Container(StrictModel):
    image: StrictStr
    runtime: Literal["apptainer", "singularity"] = "apptainer"
    nv: StrictBool = False  # --nv: bind the host's NVIDIA driver into the container
    binds: list[StrictStr] = []


class Software(StrictModel):
    """A venv, modules, or a container."""

    venv: StrictStr | None = None
    modules: list[StrictStr] = []
    container: Container | None = None

    @model_validator(mode="after")
    def _one_way(self) -> Software:
        if self.venv and self.container:
            raise ValueError("give a venv or a container, not both")
        return self


class Environment(Software):
    """How a framework's software is found inside a job, and which launcher starts it."""

    launcher: Literal["srun", "torchrun"] | None = None
