"""Planning's GPU checks: what a framework's GPU build cannot run on the GPUs a run will get
(kernels it lacks, precisions they lack), and more ranks per node than this machine shows
GPUs. Each problem is one line with file:line: field and the fix."""

from __future__ import annotations

from pathlib import Path

from ...trainers.common.args import GPU_LOADERS
from ..config.tomlfile import line_of
from . import envs
from .gpus import GPU_BUILD_ARCHS, arch_name, local_gpus, parse_arch, plan_device, precision_problem


def _line(text: str, loc: tuple) -> str:
    line = line_of(text, loc)
    return f":{line}" if line else ""


def _gpu_loaders(loaded, runs) -> list[str]:
    """A loader that decodes on the GPU (nvjpeg), asked of runs that will have none."""
    if not any(r.loader in GPU_LOADERS for r in runs):
        return []
    return [
        f"{loaded.path}{_line(loaded.text, ('experiment', 'loaders'))}: experiment.loaders: "
        f"{', '.join(sorted({r.loader for r in runs} & set(GPU_LOADERS)))} decodes on an NVIDIA "
        "GPU, and these runs have none (this machine shows no GPU, or the partition has no "
        "gpus_per_node); use native or dali"
    ]


def check_gpus(
    loaded, runs, profile=None, partition: str | None = None, home: Path | None = None
) -> list[str]:
    """Planning's GPU checks, one line each with file:line: field and the fix: a framework
    whose GPU build has no kernels for the site's GPUs, a precision those GPUs lack, more
    ranks per node than this machine shows GPUs (Slurm's partitions are jobscript's)."""
    device, _ = plan_device(profile, partition)
    if device != "cuda":
        return _gpu_loaders(loaded, runs)

    def spec(field: str) -> str:
        return f"{loaded.path}{_line(loaded.text, ('experiment', field))}: experiment.{field}"

    problems: list[str] = []
    if profile is not None:
        part = profile.profile.partition(partition)
        index = profile.profile.partitions.index(part)
        arch = parse_arch(part.gpu_arch) if part.gpu_arch else None
        where = f"partition {part.name}'s GPUs" + (
            f" ({part.gpu_arch}, {profile.path}"
            f"{_line(profile.text, ('partitions', index, 'gpu_arch'))})"
            if arch
            else ""
        )
        shown = None
    else:
        shown = local_gpus()
        archs = [g.arch for g in shown]
        known = [a for a in archs if a is not None]
        arch = min(known) if known and len(known) == len(archs) else None
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
            problems.append(f"{spec('precisions')}: {fw}: precision {precision} on {where}: {why}")
    if shown is not None:
        for scale, ranks in dict.fromkeys((r.scale, r.ranks_per_node) for r in runs):
            if ranks > len(shown):
                problems.append(
                    f"{spec('scales')}: scale {scale} runs {ranks} ranks on this machine, "
                    f"which shows {len(shown)} NVIDIA GPU(s): each rank needs a GPU of its "
                    f"own; use at most {len(shown)} rank(s) per node, or "
                    "CUDA_VISIBLE_DEVICES= to measure its CPU"
                )
    return problems
