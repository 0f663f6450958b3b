"""The built-in transformer and the strategies that shard it (docs/transformers.md): PaLM's
FLOP count and MFU by hand, the GPU peaks' table, the loss-agreement check, the memory
probe's bounds, the specs that plan them, and, for real on CPU, DDP, FSDP (with tensor
parallelism, activation checkpointing, resharding and mixed precision) and DeepSpeed
ZeRO-3 at 1 and 2 ranks giving the same loss curve."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from conftest import REPO
from dlscale.engine.config.spec import load_spec
from dlscale.engine.errors import SpecError
from dlscale.engine.launching.plan import plan
from dlscale.trainers.common import loss_agreement
from dlscale.trainers.common.gpt import PRESETS
from dlscale.trainers.common.memory_probe import ladder, probe
from dlscale.trainers.common.mfu import gpu_peak, utilisation
from dlscale.trainers.common.records import parse_record
from test_frameworks import deepspeed_env, env_home  # noqa: F401  (fixtures)

# --- the arithmetic, by hand ----------------------------------------------------------


def test_gpt2_small_flops_per_token_is_palms_count_by_hand():
    """GPT-2 small (12 layers of 768, 12 heads of 64, 1,024 positions, 50,304 words, tied):
    each block holds 12·768² weights and 13·768 biases and norms; the position table is a
    lookup and is left out of N; attention adds 12·L·H·Q·T."""
    block = 12 * 768**2 + 13 * 768
    n = 12 * block + 50304 * 768 + 2 * 768  # blocks, tied embedding/output, final norm
    assert n == 123_689_472
    hand = 6 * n + 12 * 12 * 12 * 64 * 1024
    assert hand == 855_383_040
    shape = PRESETS["gpt2-small"]
    assert shape.parameters() == n + 1024 * 768
    assert shape.flops_per_token() == hand


def test_mfu_is_achieved_tflops_per_device_over_the_peak():
    fields = utilisation(10_000.0, 855_383_040, 2, 989.5, "H100 SXM")
    assert fields["achieved_tflops_per_device"] == pytest.approx(10_000 * 855_383_040 / 2 / 1e12)
    assert fields["mfu"] == pytest.approx(4.2769152 / 989.5)
    unknown = utilisation(10_000.0, 855_383_040, 2, None, "no peak known for 'X'")
    assert unknown["mfu"] is None and unknown["peak_source"] == "no peak known for 'X'"


@pytest.mark.parametrize(
    "name, precision, tflops",
    [
        ("NVIDIA H100 80GB HBM3", "bf16", 989.5),
        ("NVIDIA H100 PCIe", "bf16", 756.5),
        ("NVIDIA H100 NVL", "tf32", 417.5),
        ("NVIDIA H200", "bf16", 989.5),
        ("NVIDIA H200", "fp32", 67),
        ("NVIDIA A100-SXM4-80GB", "tf32", 156),
        ("NVIDIA A100 80GB PCIe", "bf16", 312),
        ("NVIDIA A10", "bf16", 125),  # not the A100's
        ("NVIDIA L4", "bf16", 121),  # not the L40S's
        ("NVIDIA L40S", "bf16", 362.05),
        ("Tesla V100-SXM2-32GB", "fp16", 125),
        ("Tesla V100S-PCIE-32GB", "fp32", 16.4),
        ("Tesla V100-SXM2-32GB", "bf16", None),  # no bf16 tensor cores
        ("Some Future GPU", "bf16", None),
    ],
)
def test_gpu_peaks_are_looked_up_by_name_and_precision(name, precision, tflops):
    peak, source = gpu_peak(name, precision)
    assert peak == tflops
    assert ("https://" in source) if tflops else ("no " in source)


# --- is my sharding correct? ---------------------------------------------------------


def _curve(path, losses, **setup):
    base = {"model": "gpt-tiny", "dataset": "alice", "global_batch": 8, "seed": 0}
    lines = [json.dumps({"kind": "params", "precision": "fp32", **base, **setup})]
    lines += [
        json.dumps({"kind": "interval", "step": i + 1, "loss": v}) for i, v in enumerate(losses)
    ]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_loss_agreement_passes_within_tolerance_and_names_what_differs(tmp_path, capsys):
    a = _curve(tmp_path / "a", [5.5, 5.4, 5.3], framework="pytorch-ddp", world_size=1)
    b = _curve(tmp_path / "b", [5.5, 5.4001, 5.3], framework="pytorch-fsdp", world_size=2)
    c = _curve(tmp_path / "c", [5.5, 5.45, 5.3], framework="deepspeed", world_size=2, zero_stage=3)
    d = _curve(tmp_path / "d", [5.5], framework="deepspeed", world_size=2, global_batch=16)
    assert loss_agreement.main([a, b]) == 0
    assert loss_agreement.main([a, b, c]) == 1
    said = capsys.readouterr().out
    assert "deepspeed x2 zero_stage=3: DIFFERS from pytorch-ddp x1" in said and "step 2" in said
    assert loss_agreement.main([a, d]) == 2
    assert "global_batch differs (8 and 16)" in capsys.readouterr().out


# --- the memory probe ----------------------------------------------------------------

# A stand-in trainer: holds --gpt-layers x 50 MiB, as a model of that many blocks would,
# and writes the records the probe reads.
FAKE_TRAINER = textwrap.dedent(
    """
    import json, sys
    layers = int(sys.argv[sys.argv.index("--gpt-layers") + 1])
    out = sys.argv[sys.argv.index("--output") + 1]
    held = bytearray(layers * 50 * 2**20)
    # as the trainers read it (common/memory.py): ru_maxrss would carry the parent's
    # high-water mark across fork and exec
    status = open("/proc/self/status").read().split("VmHWM:")[1]
    peak = int(status.split()[0]) * 1024
    with open(out, "w") as f:
        f.write(json.dumps({"kind": "params", "parameters": layers * 1000}) + "\\n")
        f.write(json.dumps({"kind": "summary", "status": "completed",
                            "peak_memory_bytes_per_rank": [peak]}) + "\\n")
    """
)


def test_ladder_grows_by_about_half():
    assert ladder(1, 10) == [1, 2, 3, 4, 6, 8, 12, 16, 24, 32]
    assert ladder(5, 3) == [6, 8, 12]


def test_memory_probe_stops_at_the_first_out_of_memory_within_its_limit(tmp_path):
    script = tmp_path / "fake_trainer.py"
    script.write_text(FAKE_TRAINER)
    out = tmp_path / "probe.jsonl"
    limit = 280 * 2**20
    rc = probe(
        [
            "--memory-limit",
            "280MiB",
            "--output",
            str(out),
            "--max-attempts",
            "9",
            "--",
            sys.executable,
            str(script),
        ]
    )
    assert rc == 0
    record = parse_record(out.read_text().splitlines()[-1])
    attempts = record["attempts"]
    assert record["stopped_by"] == "out of memory"
    # every size before the last fit, the last did not, and none was tried after it
    assert [a["fit"] for a in attempts] == [True] * (len(attempts) - 1) + [False]
    assert attempts[-1]["reason"] == "out of memory" and len(attempts) < 9
    assert record["largest_fit_layers"] == attempts[-2]["layers"] >= 2
    assert record["largest_fit_parameters"] == 1000 * attempts[-2]["layers"]
    for a in attempts[:-1]:
        assert max(a["peak_memory_bytes_per_rank"]) <= limit
    assert record["memory_limit_bytes"] == limit and "RLIMIT_AS" in record["memory_limit_kind"]


# --- specs --------------------------------------------------------------------------


def test_the_transformer_studies_plan_every_strategy():
    cpu = plan(load_spec(REPO / "examples" / "studies" / "transformers-cpu.toml")).runs
    assert {r.framework for r in cpu} == {"pytorch-ddp", "pytorch-fsdp", "deepspeed"}
    assert {r.devices for r in cpu} == {1, 2} and {r.model for r in cpu} == {"gpt-mini"}
    assert all(r.training["options"]["zero_stage"] == 3 for r in cpu if r.framework == "deepspeed")
    gpu = load_spec(REPO / "examples" / "studies" / "transformers-gpu.toml").spec
    assert set(gpu.experiment.models) >= {"gpt2-small", "llama-1b"}


@pytest.mark.parametrize(
    "change, said",
    [
        ('models = ["resnet20"]', "fits none of the datasets"),
        ('loaders = ["dali"]', "read by the transformer's trainer itself"),
        ("[options.pytorch-fsdp]\ntensor_parallel = 2", "scale 1x1 has 1 rank(s) per node"),
        ('precisions = ["fp32"]\n[options.pytorch-fsdp]\nmixed_precision = true', "bf16 or fp16"),
    ],
)
def test_transformer_specs_refuse_what_cannot_run(tmp_path, change, said):
    text = (REPO / "examples" / "studies" / "transformers-cpu.toml").read_text()
    text = text.replace("[options.deepspeed]\nzero_stage = 3\n", "")
    if change.startswith(("models", "loaders", "precisions")):
        key = change.split(" =")[0]
        text = "\n".join(ln for ln in text.splitlines() if not ln.startswith(key + " ="))
        head, rest = change.split("\n", 1) if "\n" in change else (change, "")
        text = text.replace("[experiment]\n", f"[experiment]\n{head}\n") + "\n" + rest + "\n"
    else:
        text += "\n" + change + "\n"
    path = tmp_path / "spec.toml"
    path.write_text(text)
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert said in str(info.value)


# --- the model, as built -----------------------------------------------------------


@pytest.mark.torch
def test_every_preset_builds_with_the_parameters_its_shape_counts():
    torch = pytest.importorskip("torch")
    from dlscale.trainers.torch_ddp.transformer import GPT

    for name, shape in PRESETS.items():
        with torch.device("meta"):
            model = GPT(shape)
        assert sum(p.numel() for p in model.parameters()) == shape.parameters(), name
    assert PRESETS["llama-1b"].parameters() == 1_235_814_400  # Llama 3.2 1B's 1.24B


# --- for real: every strategy at 1 and 2 ranks, one loss curve -----------------------

TINY = [
    "--model",
    "gpt-tiny",
    "--dataset",
    "alice",
    "--steps",
    "4",
    "--warmup-steps",
    "1",
    "--log-every",
    "1",
    "--breakdown-pairs",
    "0",
]


def train(python, module, tmp_path, name, ranks, *args, env=None):
    """A trainer at `ranks` ranks, started by the trainers' own spawner."""
    out = tmp_path / f"{name}.jsonl"
    proc = subprocess.run(
        [python, "-m", "dlscale.trainers.common.spawn", "--ranks", str(ranks), "--"]
        + [python, "-m", module, *TINY, *args, "--output", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = [json.loads(line) for line in out.read_text().splitlines()]
    return str(out), records[0], records[-1]


@pytest.fixture(scope="module")
def ddp_one(tmp_path_factory):
    """DDP on one rank with the whole global batch: the curve every strategy must follow."""
    tmp = tmp_path_factory.mktemp("ddp-one")
    return train(
        sys.executable, "dlscale.trainers.torch_ddp", tmp, "ddp1", 1, "--per-device-batch", "8"
    )


def _agrees(reference, run):
    worst, at, problem = loss_agreement.disagreement(
        loss_agreement.read_curve(reference), loss_agreement.read_curve(run)
    )
    assert problem is None and worst <= loss_agreement.TOLERANCE["fp32"], (worst, at)


@pytest.mark.slow
def test_the_loss_falls_on_the_real_corpus_with_tokens_mfu_and_memory_recorded(ddp_one):
    path, params, summary = ddp_one
    losses = [loss_agreement.read_curve(path).losses[s] for s in (1, 5)]
    assert losses[0] == pytest.approx(5.55, abs=0.05)  # ln 256: every byte alike at first
    assert losses[1] < losses[0] - 0.25
    assert params["unit"] == "tokens" and params["tokenizer"] == "bytes"
    assert params["corpus_sha256"].startswith("fe4fd37d")
    assert params["flops_per_token"] == PRESETS["gpt-tiny"].flops_per_token()
    tokens = summary["timed_steps"] * 8 * 64
    assert summary["images_timed"] == tokens
    assert summary["throughput"] == pytest.approx(tokens / summary["elapsed_s"])
    assert summary["tokens_per_s"] == pytest.approx(summary["throughput"])
    assert summary["achieved_tflops_per_device"] == pytest.approx(
        summary["tokens_per_s"] * params["flops_per_token"] / 1e12
    )
    assert 0 < summary["mfu"] and "matmuls" in summary["peak_source"]
    assert summary["peak_memory_bytes_per_rank"][0] > 100 * 2**20  # the interpreter and torch


@pytest.mark.slow
def test_ddp_and_fsdp_at_two_ranks_follow_the_one_rank_curve(ddp_one, tmp_path):
    ddp = "dlscale.trainers.torch_ddp"
    fsdp = "dlscale.trainers.torch_fsdp"
    runs = {
        "ddp2": train(sys.executable, ddp, tmp_path, "ddp2", 2, "--per-device-batch", "4"),
        "fsdp1": train(sys.executable, fsdp, tmp_path, "fsdp1", 1, "--per-device-batch", "8"),
        "fsdp2": train(
            sys.executable,
            fsdp,
            tmp_path,
            "fsdp2",
            2,
            "--per-device-batch",
            "4",
            "--activation-checkpointing",
            "--reshard-after-forward",
            "never",
        ),
        "tp2": train(
            sys.executable,
            fsdp,
            tmp_path,
            "tp2",
            2,
            "--per-device-batch",
            "4",
            "--tensor-parallel",
            "2",
        ),
    }
    for name, (path, params, summary) in runs.items():
        _agrees(ddp_one[0], path)
        world = params["world_size"]
        digests = summary["weights_digest_per_rank"]
        assert len(digests) == world and len(set(digests)) == 1, name
        assert len(summary["peak_memory_bytes_per_rank"]) == world
    assert runs["tp2"][1]["tensor_parallel"] == 2 and runs["tp2"][1]["data_parallel"] == 1
    assert runs["fsdp2"][1]["activation_checkpointing"] is True
    assert runs["fsdp2"][1]["reshard_after_forward"] == "never"


@pytest.mark.slow
def test_fsdp_mixed_precision_computes_in_bf16(tmp_path):
    path, params, summary = train(
        sys.executable,
        "dlscale.trainers.torch_fsdp",
        tmp_path,
        "mp",
        2,
        "--per-device-batch",
        "4",
        "--steps",  # CPUs without bf16 instructions emulate it: slowly
        "2",
        "--precision",
        "bf16",
        "--fsdp-mixed-precision",
    )
    assert params["fsdp_mixed_precision"] is True and summary["compute_dtype"] == "bfloat16"
    assert "bf16 matmuls" in summary["peak_source"]


@pytest.mark.slow
@pytest.mark.parametrize("ranks", [1, 2])
def test_deepspeed_zero3_follows_the_same_curve(ddp_one, deepspeed_env, env_home, tmp_path, ranks):
    from dlscale.engine.launching.envs import launch_env

    path, params, summary = train(
        deepspeed_env.python,
        "dlscale.trainers.deepspeed_zero",
        tmp_path,
        f"zero3-{ranks}",
        ranks,
        "--per-device-batch",
        str(8 // ranks),
        "--zero-stage",
        "3",
        env=launch_env(deepspeed_env, env_home),
    )
    assert params["zero_stage"] == 3 and params["parameters"] == PRESETS["gpt-tiny"].parameters()
    _agrees(ddp_one[0], path)
    digests = summary["weights_digest_per_rank"]
    assert len(digests) == ranks and len(set(digests)) == 1
