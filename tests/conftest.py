"""Shared fixtures: a private DLSCALE_HOME per test, the real `dlscale` command, and a
clean-up that stops any local worker a test left behind."""

from __future__ import annotations

import importlib.util
import os
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

# Piped output is laid out for COLUMNS when it is set (engine/cli/console.py); CI's shell
# set COLUMNS=80, which wrapped and narrowed what tests read. Tests that need a width say
# so (tests/test_tables_fit.py); the rest read the piped default.
os.environ.pop("COLUMNS", None)
os.environ.pop("LINES", None)

BIN = Path(sys.executable).parent
REPO = Path(__file__).resolve().parents[1]

# The core suite (scripts/test-pythons runs it on every declared Python) is what needs no
# framework: `-m "not framework"`. Its venvs have no torch (the local wheel is for one
# Python), so the modules that import it at the top are not collected there at all.
_IMPORTS_TORCH = re.compile(r"^(import torch|from torch|from dlscale\.trainers\.torch_ddp)", re.M)
_TORCHLESS = importlib.util.find_spec("torch") is None
collect_ignore = (
    sorted(
        str(p.relative_to(REPO / "tests"))
        for p in REPO.joinpath("tests").rglob("test_*.py")
        if _IMPORTS_TORCH.search(p.read_text())
    )
    if _TORCHLESS
    else []
)


def pytest_report_header(config):
    if collect_ignore:
        return f"torch is not installed: not collecting {', '.join(collect_ignore)}"
    return None


def _no_cuda() -> str | None:
    """Why the GPU tier cannot run here, or None where a CUDA device is visible."""
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return f"no CUDA device visible to torch {torch.__version__}"
    return None


# tryfirst: xdist's own hook turns each item's xdist_group marker into its group, and runs
# before a conftest's hook otherwise; the markers added after it grouped nothing.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """The order the two workers take the tests in (scripts/test keeps it: xdist's
    --no-loadscope-reorder): the Slurm clusters' group first, the longest chain, on one
    worker; then the tests that share nothing; the framework environments' group last.
    Within each, a test that needs a framework's own environment (`env_home`) or Slurm 25.11
    comes last: scripts/test builds both in the background meanwhile, and `env create` (or
    `cluster up --slurm 25.11`) waits for a build in progress rather than starting a second
    one. The GPU tier (tests/gpu/) is marked `gpu` and skipped with the reason where there is
    no CUDA device, so the test command stays green on CPU machines and in CI."""
    rank = {"slurm": 0, None: 1, "frameworks": 2}
    items.sort(
        key=lambda item: (
            rank[_xdist_group(item)],
            "env_home" in _fixtures(item),
            _needs_25_11(item),
        )
    )
    for item in items:
        group = _xdist_group(item)
        if group:
            item.add_marker(pytest.mark.xdist_group(group))
        if (
            group
            or item.get_closest_marker("slow")
            or item.get_closest_marker("torch")
            or "/tests/gpu/" in str(item.fspath)
        ):
            item.add_marker(pytest.mark.framework)
        if "env_home" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.envs)
    gpu = [item for item in items if "/tests/gpu/" in str(item.fspath).replace("\\", "/")]
    why = _no_cuda() if gpu else None
    for item in gpu:
        item.add_marker(pytest.mark.gpu)
        if why:
            item.add_marker(pytest.mark.skip(reason=f"GPU tier: {why}"))


def _fixtures(item) -> tuple[str, ...]:
    return tuple(getattr(item, "fixturenames", ()))


def _needs_25_11(item) -> bool:
    """A test of Slurm 25.11, whose build (cold: about 15 minutes) it waits for."""
    return "[25.11" in item.name or "slurm_25_11" in _fixtures(item)


# Under pytest-xdist (scripts/test runs two workers, --dist loadgroup), the tests that share
# one thing run one at a time, on one worker: the Slurm test clusters (their nodes and
# queues; a test that stops a daemon would see another test's `cluster up` start it again,
# and some tests use both releases), or the framework environments' trainers, whose helper
# processes other tests look for by name. Everything else spreads over both workers.
_CLUSTERS = {"slurm_cluster", "slurm_22_05", "slurm_25_11", "slurm_target", "noacct_clusters"}


def _xdist_group(item) -> str | None:
    names = set(getattr(item, "fixturenames", ()))
    if names & _CLUSTERS or item.get_closest_marker("slurm") or "[25.11" in item.name:
        return "slurm"
    if "env_home" in names:
        return "frameworks"
    return None


@pytest.fixture
def home(tmp_path, monkeypatch):
    h = tmp_path / "home"
    monkeypatch.setenv("DLSCALE_HOME", str(h))
    yield h
    _stop_workers(h)


def _stop_workers(h: Path) -> None:
    """Kill local workers and their jobs that belong to this test's store."""
    out = subprocess.run(["pgrep", "-f", f"local.worker {h}"], capture_output=True, text=True)
    for pid in out.stdout.split():
        try:
            os.killpg(int(pid), signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            pass


# How long a command that should answer at once may take before a test calls it hung. Not
# tighter: the other Pythons' suite runs niced beside the main run, where a starved
# `dlscale report` took over 60 s to refuse a bad file; a hang (a FIFO opened) never ends.
HANG_S = 240


def dlscale(
    *args: str, home: Path | None = None, timeout: float = 600, check: int | None = None
) -> subprocess.CompletedProcess:
    env = {**os.environ}
    if home is not None:
        env["DLSCALE_HOME"] = str(home)
    env.pop("DLSCALE_DEBUG", None)
    proc = subprocess.run(
        [str(BIN / "dlscale"), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        stdin=subprocess.DEVNULL,
    )
    if check is not None:
        assert proc.returncode == check, (proc.returncode, proc.stdout, proc.stderr)
    return proc


def write_spec(
    path: Path,
    experiment: str = "",
    training: str = "",
    name: str = "t",
    scales: str = '"1x1", "1x2"',
    steps: int = 4,
) -> Path:
    """A small valid spec; `experiment`/`training` lines are appended to their tables,
    `scales` is the TOML text inside `scales = [...]`."""
    path.write_text(
        textwrap.dedent(f"""\
        [experiment]
        name = "{name}"
        frameworks = ["pytorch-ddp"]
        models = ["resnet20"]
        datasets = ["synthetic-cifar"]
        scales = [{scales}]
        per_device_batch = [8]
        precisions = ["fp32"]
        repetitions = 1
        {experiment}
        [training]
        steps = {steps}
        warmup_steps = 1
        log_every = 2
        {training}
        """)
    )
    return path


CLUSTER = REPO / "tests" / "slurm" / "cluster"


@pytest.fixture(scope="session")
def slurm_cluster():
    """The real two-node test cluster (tests/slurm/cluster), started if it is not up."""
    if os.geteuid() != 0:
        pytest.skip("the Slurm test cluster starts daemons and needs root")
    proc = subprocess.run([str(CLUSTER), "up"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    conf = proc.stdout.strip().split("=", 1)[1]
    os.environ["SLURM_CONF"] = conf
    return conf


def cluster(*args: str) -> None:
    subprocess.run([str(CLUSTER), *args], check=True, capture_output=True, timeout=300)


# --- Slurm releases: 22.05 (Debian's) and 25.11 (built from ../shared/vendor) ---------------

BUILD_SLURM = REPO / "tests" / "slurm" / "build-slurm"
# (release, backend) pairs the Slurm integration tests run on
SLURM_TARGETS = [("22.05", "slurm"), ("25.11", "slurm"), ("25.11", "pyslurm")]


class SlurmRelease:
    """A running test cluster of one Slurm release: the environment its clients need
    (SLURM_CONF, and PATH for a built release) and its cluster script's commands."""

    def __init__(self, release: str, env: dict[str, str], flags: tuple[str, ...] = ()) -> None:
        self.release, self.env, self.flags = release, env, flags

    def cluster(self, *args: str) -> None:
        subprocess.run(
            [str(CLUSTER), "--slurm", self.release, *self.flags, *args],
            check=True,
            capture_output=True,
            timeout=300,
        )


def start_release(release: str, *flags: str) -> SlurmRelease:
    """Starts (or finds up) the test cluster of a release; `flags` for the cluster script,
    e.g. --no-accounting for the cluster of that release without slurmdbd."""
    if os.geteuid() != 0:
        pytest.skip("the Slurm test cluster starts daemons and needs root")
    timeout = 600
    env = {**os.environ, "PYTHON": sys.executable}  # pyslurm's wheel is for this python
    if release != "22.05":
        check = subprocess.run(
            [str(BUILD_SLURM), "--check"], capture_output=True, text=True, timeout=HANG_S, env=env
        )
        if check.returncode == 3:  # no archive: say where it was looked for
            pytest.skip(f"Slurm {release}: {check.stderr.strip().removeprefix('[build-slurm] ')}")
        if check.returncode == 1:
            pytest.skip(
                f"Slurm {release} is not built: tests/slurm/build-slurm builds it "
                "(about 15 minutes on 2 cores; scripts/test does it in the background)"
            )
        if check.returncode == 4:
            timeout = 1800  # a build is in progress: `up` waits for it
    proc = subprocess.run(
        [str(CLUSTER), "--slurm", release, *flags, "up"],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )
    if proc.returncode == 3:
        pytest.skip(f"Slurm {release}: {proc.stderr.strip().splitlines()[-1]}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    # the export lines, evaluated by the shell they were written for
    shown = subprocess.run(
        ["bash", "-c", 'eval "$1" && printf "%s\\0%s" "$SLURM_CONF" "$PATH"', "-", proc.stdout],
        capture_output=True,
        text=True,
        check=True,
    )
    conf, path = shown.stdout.split("\0")
    return SlurmRelease(release, {"SLURM_CONF": conf, "PATH": path}, flags)


@pytest.fixture(scope="session")
def slurm_22_05():
    return start_release("22.05")


@pytest.fixture(scope="session")
def slurm_25_11():
    return start_release("25.11")


class SlurmTarget:
    """One (release, backend) pair, its environment set for this test."""

    def __init__(self, release: SlurmRelease, backend: str) -> None:
        self.release, self.backend = release, backend
        self.cluster = release.cluster

    def scheduler(self, **kw):
        """The backend's scheduler in this process (pyslurm binds to the first cluster it is
        imported with: only 25.11 uses it)."""
        if self.backend == "pyslurm":
            from dlscale.engine.backends.slurm.pyslurm.backend import PyslurmBackend

            kw.pop("squeue_every", None)
            return PyslurmBackend(**kw)
        from dlscale.engine.backends.slurm.commands import SlurmCLI

        return SlurmCLI(**kw)


def skip_without_pyslurm() -> None:
    if importlib.util.find_spec("pyslurm") is None:
        pytest.skip(
            "pyslurm is not installed in this venv (PYTHON=.venv/bin/python "
            "tests/slurm/build-slurm --install builds and installs it)"
        )


@pytest.fixture(params=SLURM_TARGETS, ids=[f"{r}-{b}" for r, b in SLURM_TARGETS])
def slurm_target(request, monkeypatch):
    release, backend = request.param
    started = request.getfixturevalue("slurm_22_05" if release == "22.05" else "slurm_25_11")
    if backend == "pyslurm":
        skip_without_pyslurm()
    for name, value in started.env.items():
        monkeypatch.setenv(name, value)
    return SlurmTarget(started, backend)


# --- MLCommons' own tools on exported MLLOG files (mlperf-logging, a dev dependency) -------

MLPERF_RULES = ("training", "4.0.0")


def mlperf_check(path: Path, tmp: Path) -> tuple[bool, str]:
    """MLPerf's compliance checker on one file (training 4.0.0, as docs/reports.md says):
    whether it passed, and what it printed."""
    usage, ruleset = MLPERF_RULES
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "mlperf_logging.compliance_checker",
            "--usage",
            usage,
            "--ruleset",
            ruleset,
            "--log_output",
            str(tmp / "compliance_checker.log"),
            str(path),
        ],
        capture_output=True,
        text=True,
        timeout=HANG_S,
    )
    return proc.returncode == 0, proc.stdout + proc.stderr


def mlperf_score_s(path: Path, check: bool = True) -> float:
    """MLPerf's result summarizer's score of one run (run_stop - run_start), in seconds;
    `check`: read it as the summarizer does, refusing a file the checker fails."""
    from mlperf_logging.compliance_checker.mlp_parser import parse_file
    from mlperf_logging.result_summarizer import result_summarizer as summarizer

    usage, ruleset = MLPERF_RULES
    if check:
        lines = summarizer._read_result_file(str(path), usage, ruleset)
    else:
        lines, _ = parse_file(str(path), ruleset=ruleset)
    return summarizer._query_mlperf_strong_scaling_score(lines) * 60


BUSY_SCRIPT = REPO / "tests" / "fixtures" / "custom" / "busy_steps.py"


def busy_spec(
    path: Path, name: str, seconds: float, steps: int, experiment: str = "", scales='"1x1"'
) -> Path:
    """A study of the standard-library script that keeps one CPU busy for `seconds` over
    `steps` reported steps (tests/fixtures/custom/busy_steps.py); `experiment`: more lines
    of its [experiment] table."""
    path.write_text(f"""\
[experiment]
name = "{name}"
frameworks = ["busy"]
models = ["spin"]
datasets = ["synthetic"]
scales = [{scales}]
per_device_batch = [1]
{experiment}

[training]
steps = {steps}

[frameworks.busy]
script = "{BUSY_SCRIPT}"
command = ["{{python}}", "{{script}}", "{seconds}", "{{steps}}"]
unit = "samples"
complete_when = "records"
""")
    return path
