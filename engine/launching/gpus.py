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

from ..errors import PlanError

PROC_GPUS = Path("/proc/driver/nvidia/gpus")


@dataclass(frozen=True)
class Gpu:
    index: int | None
    uuid: str | None
    name: str
    arch: tuple[int, int] | None  # compute capability, where nvidia-smi says


def parse_arch(value: object) -> tuple[int, int]:
    """A compute capability from how people write it: "sm_90", "compute_86", "9.0", 8.6,
    "80". ValueError otherwise."""
    text = str(value).strip().lower()
    m = re.fullmatch(r"(?:sm_?|compute_?)?(\d{1,2})(\d)[af]?", text) or \
        re.fullmatch(r"(\d{1,2})\.(\d)", text)
    if not m:
        raise ValueError(f"{value!r} is not a GPU architecture: write it as \"sm_90\" or "
                         "\"9.0\" (the compute capability)")
    return int(m[1]), int(m[2])


def arch_name(arch: tuple[int, int]) -> str:
    return f"sm_{arch[0]}{arch[1]}"


def _smi(smi: str) -> list[Gpu] | None:
    """nvidia-smi's GPUs, with their compute capability where the driver reports it."""
    for fields in ("index,uuid,name,compute_cap", "index,uuid,name"):
        try:
            proc = subprocess.run([smi, f"--query-gpu={fields}", "--format=csv,noheader"],
                                  capture_output=True, text=True, timeout=30,
                                  stdin=subprocess.DEVNULL)
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
    environ = os.environ if environ is None else environ
    return visible(_machine_gpus(environ.get("PATH", os.defpath)),
                   environ.get("CUDA_VISIBLE_DEVICES"))


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
            return "cuda", (f"partition {part.name} of {profile.path} has "
                            f"{part.gpus_per_node} GPU(s) per node")
        return "cpu", ""
    shown = local_gpus()
    if shown:
        return "cuda", (f"this machine shows {len(shown)} NVIDIA GPU(s) (set "
                        "CUDA_VISIBLE_DEVICES= to measure its CPU instead)")
    return "cpu", ""


@dataclass(frozen=True)
class ArchRange:
    """The compute capabilities a framework's GPU build has kernels for."""

    lowest: tuple[int, int]
    highest_major: int | None
    why: str

    def runs_on(self, arch: tuple[int, int]) -> bool:
        return arch >= self.lowest and (self.highest_major is None
                                        or arch[0] <= self.highest_major)


_TORCH_CU13 = ArchRange((7, 5), None, (
    "its GPU environment's torch 2.13.0 is PyPI's CUDA 13.0 build, and CUDA 13 has no "
    "kernels below compute capability 7.5 (Maxwell, Pascal, Volta)"))
# The GPU builds dlscale's recipes (engine/recipes.py) install, where they are narrower than
# "any GPU the driver runs". SASS for sm_XY runs on X.Y to X.9; PTX would JIT further.
GPU_BUILD_ARCHS: dict[str, ArchRange] = {
    "mxnet": ArchRange((5, 0), 8, (
        "MXNet 1.9.1's CUDA wheels (mxnet-cu117, as cu112) carry kernels for sm_50, sm_60, "
        "sm_70, sm_80 and sm_86 only, and no PTX to compile for newer GPUs")),
    "pytorch-ddp": _TORCH_CU13, "deepspeed": _TORCH_CU13, "horovod-pytorch": _TORCH_CU13,
}


def precision_problem(framework: str, precision: str, arch: tuple[int, int] | None) -> str | None:
    """Why `precision` cannot run on a GPU of `arch` in `framework` (None: it can, or the
    architecture is unknown and the trainer will say)."""
    if framework == "mxnet" and precision == "bf16":
        return "MXNet 1.9 has no bf16 kernels on GPUs; use fp16 (multi-precision SGD) or fp32"
    if precision in ("bf16", "tf32") and arch is not None and arch < (8, 0):
        return (f"{precision} needs compute capability 8.0 or newer ({arch_name(arch)} has no "
                f"{precision} tensor cores); use fp16 or fp32")
    return None


def _line(text: str, loc: tuple) -> str:
    from ..config.tomlfile import line_of  # noqa: PLC0415  (the TOML reader's own lines)
    line = line_of(text, loc)
    return f":{line}" if line else ""


def check_gpus(loaded, runs, profile=None, partition: str | None = None,
               home: Path | None = None) -> list[str]:
    """Planning's GPU checks, one line each with file:line: field and the fix: a framework
    whose GPU build has no kernels for the site's GPUs, a precision those GPUs lack, more
    ranks per node than this machine shows GPUs (Slurm's partitions are jobscript's)."""
    from . import envs  # noqa: PLC0415  (envs imports this module)
    device, _ = plan_device(profile, partition)
    if device != "cuda":
        return []
    spec = lambda field: f"{loaded.path}{_line(loaded.text, ('experiment', field))}: experiment.{field}"  # noqa: E731
    problems: list[str] = []
    if profile is not None:
        part = profile.profile.partition(partition)
        index = profile.profile.partitions.index(part)
        arch = parse_arch(part.gpu_arch) if part.gpu_arch else None
        where = f"partition {part.name}'s GPUs" + (
            f" ({part.gpu_arch}, {profile.path}"
            f"{_line(profile.text, ('partitions', index, 'gpu_arch'))})" if arch else "")
        shown = None
    else:
        shown = local_gpus()
        archs = {g.arch for g in shown}
        arch = min(archs) if archs and None not in archs else None
        where = f"this machine's {shown[0].name}" + (f" ({arch_name(arch)})" if arch else "")
    for fw in dict.fromkeys(r.framework for r in runs):
        given = profile is not None and fw in profile.profile.environments
        limit = GPU_BUILD_ARCHS.get(fw)
        if arch is None or limit is None or given or limit.runs_on(arch):
            continue
        if home is not None:
            status = envs.resolve(fw, home, check=False, device="cuda")
            if status.source == "dlscale's own" and status.cuda:
                continue  # not dlscale's recipe: its build is its own
        problems.append(f"{spec('frameworks')}: {fw} cannot run on {where}: {limit.why}")
    for fw, precision in dict.fromkeys((r.framework, r.precision) for r in runs):
        why = precision_problem(fw, precision, arch)
        if why:
            problems.append(f"{spec('precisions')}: {fw}: precision {precision} on {where}: "
                            f"{why}")
    if shown is not None:
        for scale, ranks in dict.fromkeys((r.scale, r.ranks_per_node) for r in runs):
            if ranks > len(shown):
                problems.append(
                    f"{spec('scales')}: scale {scale} runs {ranks} ranks on this machine, "
                    f"which shows {len(shown)} NVIDIA GPU(s): each rank needs a GPU of its "
                    f"own; use at most {len(shown)} rank(s) per node, or "
                    "CUDA_VISIBLE_DEVICES= to measure its CPU")
    return problems
