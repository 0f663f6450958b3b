"""NVIDIA GPUs as planning sees them, without importing a framework: which ones this machine
shows (nvidia-smi, else /proc/driver/nvidia), as CUDA_VISIBLE_DEVICES narrows them; whether
a run is a GPU run (a partition with gpus_per_node; on the local backend, a machine with
GPUs); and what a framework's GPU build cannot run: GPUs it has no kernels for, precisions
they lack, more ranks than GPUs."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from ..config.gpu_arch import arch_name, parse_arch
from ..errors import PlanError

PROC_GPUS = Path("/proc/driver/nvidia/gpus")


@dataclass(frozen=True)
class Gpu:
    index: int | None
    uuid: str | None
    name: str
    arch: tuple[int, int] | None  # compute capability, where nvidia-smi says


def _smi(smi: str) -> list[Gpu] | None:
    """nvidia-smi's GPUs, with their compute capability where the driver reports it."""
    for fields in ("index,uuid,name,compute_cap", "index,uuid,name"):
        try:
            proc = subprocess.run(
                [smi, f"--query-gpu={fields}", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=30,
                stdin=subprocess.DEVNULL,
            )
        except (OSError, subprocess.TimeoutExpired):
            return None
        if proc.returncode != 0:
            continue  # an older driver without compute_cap, or no driver at all
        gpus = []
        for line in proc.stdout.splitlines():
            parts = [p.strip() for p in line.split(",")]
            if len(parts) < 3 or not parts[0].isdigit():
                continue
            arch = None
            if fields.endswith("compute_cap"):
                try:
                    arch = parse_arch(parts[-1])
                except ValueError:
                    pass
                parts = parts[:-1]
            gpus.append(Gpu(int(parts[0]), parts[1], ", ".join(parts[2:]), arch))
        return gpus
    return None


@lru_cache(maxsize=8)
def _machine_gpus(search_path: str) -> tuple[Gpu, ...]:
    smi = shutil.which("nvidia-smi", path=search_path)
    found = _smi(smi) if smi else None
    if found is not None:
        return tuple(found)
    try:  # the driver's own list: one folder per GPU (no compute capability there)
        folders = sorted(p for p in PROC_GPUS.iterdir() if p.is_dir())
    except OSError:
        return ()
    out = []
    for i, folder in enumerate(folders):
        try:
            info = (folder / "information").read_text()
        except OSError:
            info = ""
        m = re.search(r"^Model:\s*(.+)$", info, re.M)
        out.append(Gpu(i, None, m[1].strip() if m else "NVIDIA GPU", None))
    return tuple(out)


def visible(gpus: tuple[Gpu, ...] | list[Gpu], cuda_visible: str | None) -> list[Gpu]:
    """The GPUs CUDA shows a process, in its order: CUDA_VISIBLE_DEVICES lists indices or
    UUIDs (a unique prefix is enough) and ends at its first entry that names none."""
    if cuda_visible is None:
        return list(gpus)
    out: list[Gpu] = []
    for item in (x.strip() for x in cuda_visible.split(",")):
        if item.isdigit() and int(item) < len(gpus):
            match = [gpus[int(item)]]
        elif item.startswith(("GPU-", "MIG-")):
            match = [g for g in gpus if g.uuid and g.uuid.startswith(item)]
            if item.startswith("MIG-") and not match:
                match = [Gpu(None, item, "MIG instance", None)]
        else:
            match = []
        if len(match) != 1 or match[0] in out:
            break
        out.append(match[0])
    return out


def local_gpus(environ: dict[str, str] | None = None) -> list[Gpu]:
    """The NVIDIA GPUs a process started here would see."""
    env = os.environ if environ is None else environ
    return visible(_machine_gpus(env.get("PATH", os.defpath)), env.get("CUDA_VISIBLE_DEVICES"))


def local_device(environ: dict[str, str] | None = None) -> str:
    """What the local backend runs on here: cuda where NVIDIA GPUs are visible."""
    return "cuda" if local_gpus(environ) else "cpu"


def plan_device(profile=None, partition: str | None = None) -> tuple[str, str]:
    """(device, why) of the runs planned for a Slurm profile's partition, or without a
    profile for this machine (the local backend)."""
    if profile is not None:
        try:
            part = profile.profile.partition(partition)
        except PlanError:  # an unknown partition is refused with the scales' checks
            return "cpu", ""
        if part.gpus_per_node:
            return "cuda", (
                f"partition {part.name} of {profile.path} has {part.gpus_per_node} GPU(s) per node"
            )
        return "cpu", ""
    shown = local_gpus()
    if shown:
        return "cuda", (
            f"this machine shows {len(shown)} NVIDIA GPU(s) (set "
            "CUDA_VISIBLE_DEVICES= to measure its CPU instead)"
        )
    return "cpu", ""


@dataclass(frozen=True)
class ArchRange:
    """The compute capabilities a framework's GPU build has kernels for."""

    lowest: tuple[int, int]
    highest_major: int | None
    why: str

    def runs_on(self, arch: tuple[int, int]) -> bool:
        return arch >= self.lowest and (self.highest_major is None or arch[0] <= self.highest_major)


_TORCH_CU13 = ArchRange(
    (7, 5),
    None,
    (
        "its GPU environment's torch 2.13.0 is PyPI's CUDA 13.0 build, and CUDA 13 has no "
        "kernels below compute capability 7.5 (Maxwell, Pascal, Volta)"
    ),
)
# The GPU builds dlscale's recipes (launching/envs/recipes.py) install, where narrower than
# "any GPU the driver runs". SASS for sm_XY runs on X.Y to X.9; PTX would JIT further.
GPU_BUILD_ARCHS: dict[str, ArchRange] = {
    "mxnet": ArchRange(
        (5, 0),
        8,
        (
            "MXNet 1.9.1's CUDA wheels (mxnet-cu117, as cu112) carry kernels for sm_50, sm_60, "
            "sm_70, sm_80 and sm_86 only, and no PTX to compile for newer GPUs"
        ),
    ),
    "pytorch-ddp": _TORCH_CU13,
    "pytorch-fsdp": _TORCH_CU13,
    "deepspeed": _TORCH_CU13,
    "horovod-pytorch": _TORCH_CU13,
}


def precision_problem(framework: str, precision: str, arch: tuple[int, int] | None) -> str | None:
    """Why `precision` cannot run on a GPU of `arch` in `framework` (None: it can, or the
    architecture is unknown and the trainer will say)."""
    if framework == "mxnet" and precision == "bf16":
        return "MXNet 1.9 has no bf16 kernels on GPUs; use fp16 (multi-precision SGD) or fp32"
    if precision in ("bf16", "tf32") and arch is not None and arch < (8, 0):
        return (
            f"{precision} needs compute capability 8.0 or newer ({arch_name(arch)} has no "
            f"{precision} tensor cores); use fp16 or fp32"
        )
    return None
