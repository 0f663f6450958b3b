import pytest

from dlscale.trainers.common.launch_env import LaunchError, bind_cpus, detect, local_world_size


def test_torchrun_variables():
    le = detect(
        {
            "RANK": "1",
            "WORLD_SIZE": "4",
            "LOCAL_RANK": "1",
            "MASTER_ADDR": "n1",
            "MASTER_PORT": "29500",
        }
    )
    assert (le.rank, le.world_size, le.local_rank, le.launcher) == (1, 4, 1, "torchrun")


def test_slurm_variables_with_exported_rendezvous():
    le = detect(
        {
            "SLURM_PROCID": "3",
            "SLURM_NTASKS": "4",
            "SLURM_LOCALID": "1",
            "MASTER_ADDR": "node1",
            "MASTER_PORT": "12345",
        }
    )
    assert (le.rank, le.world_size, le.local_rank, le.master_addr, le.launcher) == (
        3,
        4,
        1,
        "node1",
        "srun",
    )


def test_single_process_without_launcher():
    assert detect({}).launcher == "single" and not detect({}).distributed


@pytest.mark.parametrize(
    "env,message",
    [
        ({"SLURM_PROCID": "0", "SLURM_NTASKS": "2"}, "MASTER_ADDR and MASTER_PORT"),
        ({"RANK": "2", "WORLD_SIZE": "2", "MASTER_ADDR": "a", "MASTER_PORT": "1"}, "outside"),
        ({"RANK": "x", "WORLD_SIZE": "2"}, "not an integer"),
    ],
)
def test_inconsistent_launchers_are_refused(env, message):
    with pytest.raises(LaunchError, match=message):
        detect(env)


@pytest.mark.parametrize(
    "env,expected",
    [
        ({"LOCAL_WORLD_SIZE": "4"}, 4),
        ({"SLURM_NTASKS_PER_NODE": "2"}, 2),
        ({"SLURM_TASKS_PER_NODE": "2(x3)"}, 2),
        ({"SLURM_TASKS_PER_NODE": "3,1"}, 3),
        ({}, 1),
    ],
)
def test_ranks_on_this_node(env, expected):
    assert local_world_size(env) == expected


def test_ranks_are_pinned_to_their_own_cores_when_they_fit():
    import os

    allowed = sorted(os.sched_getaffinity(0))
    try:
        if len(allowed) >= 2:
            assert bind_cpus(1, 2, 1) == [allowed[1]]
            assert sorted(os.sched_getaffinity(0)) == [allowed[1]]
        os.sched_setaffinity(0, allowed)
        assert bind_cpus(0, len(allowed) + 1, 1) is None  # no room: left alone
        assert bind_cpus(0, 1, 1) is None  # a lone rank is left to the OS
        assert sorted(os.sched_getaffinity(0)) == allowed
    finally:
        os.sched_setaffinity(0, allowed)
