"""Your own script on one GPU, metered as the built-in trainers are (issue 38).

examples/custom/gpt-gpu.toml (a GPT-2-shaped LM in fp32 on synthetic tokens, declared as the
framework "gpt") through `dlscale run --wait` in a throwaway DLSCALE_HOME, then
`dlscale results --format json`: the tokens/s and tokens per joule that NVML's energy meter,
wrapped around the script, gives. Prints them and appends a row with the GPU's name, driver,
torch and CUDA to benchmarks/results.jsonl.

    python benchmarks/gpu_custom.py [--repetitions 2]

Without a CUDA device it says so and measures nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from gpu import gpu_facts
from record import append_row

REPO = Path(__file__).resolve().parents[1]
KEPT = ("throughput", "images_per_joule", "device_util", "repetitions", "state", "unmeasured")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repetitions", type=int, default=2)
    a = ap.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("gpu_custom.py: no CUDA device here; nothing measured")
        return
    facts = gpu_facts()
    dlscale = str(Path(sys.executable).parent / "dlscale")
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("gpt-gpu.toml", "gpt.py"):
            shutil.copy(REPO / "examples" / "custom" / name, tmp)
        spec = Path(tmp) / "gpt-gpu.toml"
        spec.write_text(
            spec.read_text().replace("repetitions = 2", f"repetitions = {a.repetitions}")
        )
        home = Path(tmp) / "home"
        env = {**os.environ, "DLSCALE_HOME": str(home)}
        subprocess.run([dlscale, "run", str(spec), "--wait"], env=env, check=True, timeout=600)
        out = subprocess.run(
            [dlscale, "results", "-e", "gpt-gpu", "--format", "json"],
            env=env,
            check=True,
            capture_output=True,
            text=True,
            timeout=120,
        ).stdout
        # the local worker of this throwaway home, nothing else, before its folder goes
        subprocess.run(["pkill", "-f", f"local.worker {home}"], timeout=60)
    rows = [{k: r.get(k) for k in KEPT if k in r} for r in json.loads(out)]
    for r in rows:
        print(
            f"gpt2-tiny fp32 on {facts['gpu']}: {r.get('throughput')} tokens/s, "
            f"{r.get('images_per_joule')} tokens/J, device util {r.get('device_util')}",
            flush=True,
        )
    append_row("gpu_custom", {**facts, "spec": "examples/custom/gpt-gpu.toml", "rows": rows})


if __name__ == "__main__":
    main()
