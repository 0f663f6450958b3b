"""Job scripts of GPU partitions: each srun task gets its GPU and its share of the node's
cores, torchrun's node task all the node's GPUs, every trainer an explicit --device, and the
profile's [nccl] settings are exported quoted."""

import dataclasses
import subprocess

import pytest
from test_gpu_plan import gpu_profile, spec_for

from dlscale.engine.config.profile import load_profile
from dlscale.engine.errors import PlanError
from dlscale.engine.launching import jobscript
from dlscale.engine.launching.launch import trainer_args
from dlscale.engine.launching.plan import plan


def _render(tmp_path, profile_path, launcher=None, scales='"2x4"', partition=None, threads=1):
    text = profile_path.read_text()
    if launcher:
        text += f'\n[environments.pytorch-ddp]\nlauncher = "{launcher}"\n'
    profile_path.write_text(text)
    loaded = spec_for(tmp_path, scales=scales)
    run = plan(loaded).runs[0]
    run = dataclasses.replace(run, training={**run.training, "threads_per_rank": threads})
    return run, jobscript.render(
        run, load_profile(profile_path), tmp_path / "r" / run.run_id, "s.toml", partition
    )


def test_srun_gives_each_rank_its_gpu_and_its_share_of_the_cores(tmp_path):
    run, script = _render(tmp_path, gpu_profile(tmp_path))
    assert "#SBATCH --gpus-per-node=4\n" in script
    assert "#SBATCH --ntasks-per-node=4\n#SBATCH --cpus-per-task=8\n" in script  # 32 / 4
    assert "srun --kill-on-bad-exit=1 --ntasks=8 --ntasks-per-node=4 --gpus-per-task=1 \\" in script
    args = trainer_args(run, tmp_path / "r" / run.run_id, "cuda")
    assert " ".join(args[args.index("--device") :][:2]) == "--device cuda"
    assert "--device cuda --output" in script
    assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0


def test_torchrun_gives_its_node_task_all_the_nodes_gpus(tmp_path):
    _, script = _render(tmp_path, gpu_profile(tmp_path), launcher="torchrun", scales='"2x2"')
    assert "#SBATCH --ntasks-per-node=1\n#SBATCH --cpus-per-task=16\n" in script  # 2 x 8
    assert "--ntasks=2 --ntasks-per-node=1 --gpus-per-task=2 \\" in script
    assert "--nproc-per-node=2" in script and "--device cuda" in script


def test_cpu_partitions_keep_their_lines_and_get_device_cpu(tmp_path):
    _, script = _render(tmp_path, gpu_profile(tmp_path), partition="cpu", scales='"2x2"', threads=4)
    assert "gpus-per" not in script and "#SBATCH --cpus-per-task=4\n" in script
    assert "--device cpu --output" in script


def test_more_threads_than_a_gpu_nodes_cores_is_refused(tmp_path):
    with pytest.raises(PlanError, match=r"has 32 CPU\(s\) per node; scale 1x4 x 9 thread"):
        _render(tmp_path, gpu_profile(tmp_path), scales='"1x4"', threads=9)


def test_the_profiles_nccl_settings_are_exported_quoted(tmp_path):
    _, script = _render(
        tmp_path,
        gpu_profile(
            tmp_path,
            extra='[nccl]\nNCCL_SOCKET_IFNAME = "ib0,ib1"\nNCCL_DEBUG = "WARN"\n'
            'NCCL_IB_HCA = "=mlx5_0:1 $(touch pwned)"\n',
        ),
    )
    assert "export NCCL_SOCKET_IFNAME=ib0,ib1\nexport NCCL_DEBUG=WARN\n" in script
    assert "export NCCL_IB_HCA='=mlx5_0:1 $(touch pwned)'\n" in script
