"""Model-FLOPs utilisation, framework-free: the achieved TFLOPS per device from a run's tokens
a second and its model's FLOPs per token (common/gpt.py: PaLM's count), against the peak of
the device for the run's precision. GPU peaks come from the table below, each with its
source (vendors' data sheets, dense: the sparsity figures halved); a CPU's is measured by the
trainer at its start (torch_ddp/metrics.py), since no table knows what a core sustains under
its rank's thread count. Computed in one place, as torchtitan's metrics.py does."""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Peak:
    """A GPU's dense peak TFLOPS per precision, and where the numbers come from. `pattern`
    matches the name torch reports (torch.cuda.get_device_name)."""

    name: str
    pattern: str
    tflops: dict[str, float]
    source: str


_H100 = "https://www.nvidia.com/en-us/data-center/h100/"
_H200 = "https://www.nvidia.com/en-us/data-center/h200/"
_A100 = "https://www.nvidia.com/en-us/data-center/a100/"
_V100 = "https://www.nvidia.com/en-us/data-center/v100/"


def _tc(fp32: float, tf32: float | None, half: float, bf16: bool = True) -> dict[str, float]:
    """fp32 (CUDA cores), tf32, and fp16 and bf16 tensor cores, dense."""
    out = {"fp32": fp32, "fp16": half}
    if tf32 is not None:
        out["tf32"] = tf32
    if bf16:
        out["bf16"] = half
    return out


# Most specific first: "H100 NVL" before "H100". Names as torch reports them, e.g. "NVIDIA
# H100 80GB HBM3" (SXM5), "NVIDIA A100-SXM4-80GB", "Tesla V100-SXM2-32GB", "NVIDIA H200".
PEAKS: tuple[Peak, ...] = (
    Peak("H100 NVL", r"\bH100 NVL\b", _tc(60, 417.5, 835.5), _H100),
    Peak("H100 PCIe", r"\bH100\b.*\bPCIe\b", _tc(51, 378, 756.5), _H100),
    Peak("H100 SXM", r"\bH100\b", _tc(67, 494.5, 989.5), _H100),
    Peak("H200 NVL", r"\bH200 NVL\b", _tc(60, 417.5, 835.5), _H200),
    Peak("H200 SXM", r"\bH200\b", _tc(67, 494.5, 989.5), _H200),
    Peak("A100", r"\bA100\b", _tc(19.5, 156, 312), _A100),
    Peak("V100S PCIe", r"\bV100S\b", _tc(16.4, None, 130, bf16=False), _V100),
    Peak("V100 PCIe", r"\bV100\b.*\bPCIE\b", _tc(14, None, 112, bf16=False), _V100),
    Peak("V100 SXM2", r"\bV100\b", _tc(15.7, None, 125, bf16=False), _V100),
    Peak(
        "L40S",
        r"\bL40S\b",
        _tc(91.6, 183, 362.05),
        "https://www.nvidia.com/en-us/data-center/l40s/",
    ),
    Peak("L4", r"\bL4\b", _tc(30.3, 60, 121), "https://www.nvidia.com/en-us/data-center/l4/"),
    Peak(
        "A40", r"\bA40\b", _tc(37.4, 74.8, 149.7), "https://www.nvidia.com/en-us/data-center/a40/"
    ),
    Peak(
        "A10",
        r"\bA10\b",
        _tc(31.2, 62.5, 125),
        "https://www.nvidia.com/en-us/data-center/products/a10-gpu/",
    ),
    Peak(
        "T4",
        r"\bT4\b",
        _tc(8.1, None, 65, bf16=False),
        "https://www.nvidia.com/en-us/data-center/tesla-t4/",
    ),
    Peak(
        "MI300X",
        r"\bMI300X\b",
        _tc(163.4, 653.7, 1307.4),
        "https://www.amd.com/en/products/accelerators/instinct/mi300/mi300x.html",
    ),
)


def gpu_peak(device_name: str, precision: str) -> tuple[float | None, str]:
    """(dense peak TFLOPS of `device_name` in `precision`, its source), or (None, why not)."""
    for peak in PEAKS:
        if re.search(peak.pattern, device_name, re.IGNORECASE):
            if precision not in peak.tflops:
                return None, f"{peak.name} has no {precision} peak"
            return peak.tflops[
                precision
            ], f"{peak.name} data sheet, dense {precision}: {peak.source}"
    return None, f"no peak known for {device_name!r} (common/mfu.py's table)"


def utilisation(
    tokens_per_s: float,
    flops_per_token: int,
    devices: int,
    peak_tflops: float | None,
    peak_source: str,
) -> dict[str, float | str | None]:
    """The summary's fields: achieved TFLOPS per device (the job's model FLOPs a second
    over its devices) and MFU, that over the device's peak (None, with why, where no peak
    is known)."""
    achieved = tokens_per_s * flops_per_token / devices / 1e12
    known = peak_tflops is not None and peak_tflops > 0
    return {
        "flops_per_token": flops_per_token,
        "achieved_tflops_per_device": achieved,
        "peak_tflops_per_device": peak_tflops if known else None,
        "peak_source": peak_source,
        "mfu": achieved / peak_tflops if known and peak_tflops else None,
    }
