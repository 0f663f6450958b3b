"""Shared fixtures: a private DLSCALE_HOME per test, the real `dlscale` command, and a
clean-up that stops any local worker a test left behind."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent
REPO = Path(__file__).resolve().parents[1]


def _no_cuda() -> str | None:
    """Why the GPU tier cannot run here, or None where a CUDA device is visible."""
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return f"no CUDA device visible to torch {torch.__version__}"
    return None


def pytest_collection_modifyitems(config, items):
    """Tests that need a framework's own environment (the `env_home` fixture) run last:
    scripts/test builds those environments in the background meanwhile, and `env create`
    waits for a build in progress rather than starting a second one. The GPU tier
    (tests/gpu/) is marked `gpu` and skipped with the reason where there is no CUDA device,
    so the test command stays green on CPU machines and in CI."""
    items.sort(key=lambda item: "env_home" in getattr(item, "fixturenames", ()))
    gpu = [item for item in items if "/tests/gpu/" in str(item.fspath).replace("\\", "/")]
    why = _no_cuda() if gpu else None
    for item in gpu:
        item.add_marker(pytest.mark.gpu)
        if why:
            item.add_marker(pytest.mark.skip(reason=f"GPU tier: {why}"))


@pytest.fixture
def home(tmp_path, monkeypatch):
    h = tmp_path / "home"
    monkeypatch.setenv("DLSCALE_HOME", str(h))
    yield h
    _stop_workers(h)


def _stop_workers(h: Path) -> None:
    """Kill local workers and their jobs that belong to this test's store."""
    out = subprocess.run(["pgrep", "-f", f"local_worker {h}"], capture_output=True, text=True)
    for pid in out.stdout.split():
        try:
            os.killpg(int(pid), signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            pass


def dlscale(*args: str, home: Path | None = None, timeout: float = 600,
            check: int | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ}
    if home is not None:
        env["DLSCALE_HOME"] = str(home)
    env.pop("DLSCALE_DEBUG", None)
    proc = subprocess.run([str(BIN / "dlscale"), *args], capture_output=True, text=True,
                          timeout=timeout, env=env, stdin=subprocess.DEVNULL)
    if check is not None:
        assert proc.returncode == check, (proc.returncode, proc.stdout, proc.stderr)
    return proc


def write_spec(path: Path, experiment: str = "", training: str = "", name: str = "t",
               scales: str = '"1x1", "1x2"', steps: int = 4) -> Path:
    """A small valid spec; `experiment`/`training` lines are appended to their tables,
    `scales` is the TOML text inside `scales = [...]`."""
    path.write_text(textwrap.dedent(f"""\
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
        """))
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
