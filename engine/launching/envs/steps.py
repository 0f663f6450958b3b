"""What a framework's environment recipe is made of: pip steps, wheels built from source,
and the recipe whose digest keys the cache."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field, replace


@dataclass(frozen=True)
class Step:
    """One `pip install` into the environment."""

    packages: tuple[str, ...]
    pip_args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()


# The compiler of a WheelBuild with cxx_std. Last flag wins: our standard comes after the one
# the build system appends. -g0 drops the debug info of Horovod's RelWithDebInfo build: the
# cached wheel is never debugged, and on 2 cores debug info costs build time (see README).
CXX_WRAPPER = '#!/bin/sh\nexec g++ "$@" -std={std} -g0\n'


@dataclass(frozen=True)
class WheelBuild:
    """A package with no wheel for this framework, compiled once into a wheel kept in the
    cache under `key` (its version and the framework it was built against) and the digest of
    how it is built, and installed from there."""

    requirement: str
    key: str
    env: tuple[tuple[str, str], ...] = ()
    # CMake projects that append their own -std= last (Horovod 0.28 appends c++14, which
    # torch 2.13's headers refuse) get a compiler that puts this standard after it.
    cxx_std: str | None = None
    # GPU builds: the site's variables the build reads (where CUDA and NCCL are), taken from
    # the environment at build time, and the modules loaded first (the profile's). Both key
    # the cached wheel: a wheel built against one CUDA is not reused for another.
    site_env: tuple[str, ...] = field(default=(), repr=False)
    site: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    modules: tuple[str, ...] = field(default=(), repr=False)

    @property
    def packages(self) -> tuple[str, ...]:
        return (self.requirement,)

    @property
    def digest(self) -> str:
        """Changes with anything that changes the compiled wheel: its variables, the compiler
        wrapper, the site's CUDA and NCCL. A changed build then compiles anew instead of
        reusing a stale wheel. (CPU builds hash as they always did: their wheels stay found.)"""
        text = repr(self) + (CXX_WRAPPER if self.cxx_std else "")
        if self.site or self.modules:
            text += json.dumps([self.site, self.modules], allow_nan=False)
        return hashlib.sha256(text.encode()).hexdigest()[:8]

    @property
    def folder(self) -> str:
        return f"{self.key}-{self.digest}"

    def for_site(self, modules: tuple[str, ...] = (), environ=None) -> WheelBuild:
        """This build as the site's environment and modules make it."""
        environ = os.environ if environ is None else environ
        site = tuple((k, environ[k]) for k in self.site_env if environ.get(k))
        return replace(self, site=site, modules=tuple(modules))


@dataclass(frozen=True)
class Recipe:
    """A known-good, pinned set for one framework, and how to tell that it works."""

    framework: str
    steps: tuple[Step | WheelBuild, ...]
    imports: tuple[str, ...]  # modules that must import for the trainer to run
    versions: tuple[str, ...]  # distributions whose versions `doctor` shows
    # Python run in the new environment once installed, to build what would otherwise be
    # built by the first run (and counted in its time): DeepSpeed's CPU shared-memory op.
    warm: str = ""
    extras: tuple[str, ...] = ()  # opt-in additions (EXTRAS) this recipe was made with
    device: str = "cpu"  # cuda: built for NVIDIA GPUs (GPU_RECIPES)
    cuda: str = ""  # the CUDA its framework wheels bring, in words
    modules: tuple[str, ...] = ()  # loaded before every build step (a profile's)

    @property
    def digest(self) -> str:
        """Changes whenever a pin or a step changes, so a cached environment is rebuilt."""
        text = json.dumps(
            [
                [s.packages, s.pip_args, s.env] if isinstance(s, Step) else s.digest
                for s in self.steps
            ]
            + [self.warm],
            allow_nan=False,
        )
        return hashlib.sha256(text.encode()).hexdigest()[:10]

    @property
    def name(self) -> str:
        """The cache folder's stem: FRAMEWORK[+EXTRA...][-cuda]."""
        return (
            self.framework
            + "".join(f"+{e}" for e in self.extras)
            + ("-cuda" if self.device == "cuda" else "")
        )
