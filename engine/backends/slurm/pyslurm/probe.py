"""Whether Slurm can be driven through pyslurm here, and why or why not, in one line.

pyslurm X.Y.Z (PyPI's) is built for Slurm release X.Y alone, and it loads libslurm and reads
slurm.conf the moment it is imported; a libslurm that cannot read the configuration ends the
process. So it is first imported in a child process, and used only when that child's
libslurm is of the release that `scontrol version` reports for the cluster.
"""

from __future__ import annotations

import importlib.metadata
import re
import sys
from dataclasses import dataclass

from ..common import Runner, run_command

# The child prints the release of the Slurm headers its libslurm was built from.
PROBE = "import pyslurm; print('.'.join(map(str, pyslurm.slurm_api_version())))"


@dataclass(frozen=True)
class PyslurmCheck:
    usable: bool
    why: str  # one line, for `dlscale run` and `dlscale doctor`
    version: str | None = None  # pyslurm's
    slurm: str | None = None  # the cluster's, from `scontrol version`


def _release(version: str) -> str:
    return ".".join(version.split(".")[:2])


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def check(runner: Runner = run_command, python: str = sys.executable) -> PyslurmCheck:
    try:
        version = importlib.metadata.version("pyslurm")
    except importlib.metadata.PackageNotFoundError:
        return PyslurmCheck(False, "pyslurm is not installed")
    res = runner(["scontrol", "version"], timeout=30)
    m = re.search(r"(\d+)\.(\d+)\.(\d+)", res.stdout) if res.returncode == 0 else None
    if not m:
        said = _last_line(res.stderr) or _last_line(res.stdout) or f"exit {res.returncode}"
        return PyslurmCheck(
            False, f"`scontrol version` did not name a Slurm release ({said})", version
        )
    slurm = m[0]
    if _release(version) != _release(slurm):
        return PyslurmCheck(
            False,
            f"pyslurm {version} is for Slurm {_release(version)}, this cluster runs Slurm {slurm}",
            version,
            slurm,
        )
    res = runner([python, "-c", PROBE], timeout=60)
    if res.returncode != 0:
        said = _last_line(res.stderr) or f"exit {res.returncode}"
        return PyslurmCheck(
            False, f"pyslurm {version} does not import here: {said}", version, slurm
        )
    built = _last_line(res.stdout)
    if _release(built) != _release(slurm):
        return PyslurmCheck(
            False,
            f"pyslurm {version} was built against Slurm {built}, this cluster runs Slurm {slurm}",
            version,
            slurm,
        )
    return PyslurmCheck(
        True,
        f"pyslurm {version} (built against Slurm {built}) matches this cluster's Slurm {slurm}",
        version,
        slurm,
    )
