"""The smoke run that proves a framework's environment trains: two ranks, a few steps, with
the framework's own launcher, and their weights compared."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path

from .. import envs
from ..launch import local_command_for
from .builder import key_lines


def smoke(
    framework: str, home: Path, status: envs.EnvStatus, ranks: int = 2, timeout: float = 300
) -> tuple[bool, str]:
    """Train two ranks for a few steps with the framework's own launcher; (ok, one line)."""
    assert status.python is not None
    with tempfile.TemporaryDirectory(prefix="dlscale-smoke-") as tmp:
        argv, extra = local_command_for(
            framework,
            ranks,
            status,
            home,
            Path(tmp),
            [
                "--model",
                "resnet20",
                "--dataset",
                "synthetic-cifar",
                "--per-device-batch",
                "8",
                "--steps",
                "3",
                "--warmup-steps",
                "1",
                "--log-every",
                "1",
                "--device",
                status.device,
                "--output",
                str(Path(tmp) / "metrics.jsonl"),
            ],
        )
        env = {**os.environ, "OMP_NUM_THREADS": "1", **extra}
        try:
            proc = subprocess.run(
                argv,
                cwd=tmp,
                env=env,
                capture_output=True,
                text=True,
                timeout=timeout,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        except subprocess.TimeoutExpired:
            return False, f"{ranks}-rank smoke run took over {timeout:.0f} s"
        summary = None
        metrics = Path(tmp) / "metrics.jsonl"
        if metrics.exists():
            for line in metrics.read_text().splitlines():
                rec = json.loads(line)
                if rec.get("kind") == "summary":
                    summary = rec
        if proc.returncode != 0 or summary is None:
            lines = key_lines(proc.stderr + proc.stdout, most=3)
            return False, f"{ranks}-rank smoke run failed (exit {proc.returncode}): " + " | ".join(
                lines
            )
        digests = summary.get("weights_digest_per_rank") or []
        same = len(set(digests)) == 1 and len(digests) == ranks
        return same, (
            f"{ranks} ranks: {summary['throughput']:.0f} images/s, weights "
            + ("identical on every rank" if same else f"DIFFER across ranks {digests}")
        )
