"""The pyslurm backend's parts: a job script's #SBATCH lines as pyslurm's job description
(pure), and which way `--backend slurm|pyslurm` talks to Slurm on each release (real
clusters, real pyslurm)."""

import fcntl
import os
import subprocess
import time
from pathlib import Path

import pytest

from conftest import HANG_S, REPO, dlscale, write_spec
from dlscale.engine.backends.slurm.pyslurm.submit import job_description
from dlscale.engine.config.profile import load_profile
from dlscale.engine.config.spec import load_spec
from dlscale.engine.launching import jobscript
from dlscale.engine.launching.plan import plan
from dlscale.engine.tracking.store import Store

PROFILE = REPO / "examples" / "clusters" / "test-cluster.toml"


def rendered(tmp_path, scale='"2x2"', extra=""):
    """The job script dlscale renders for a spec's first run, the profile's keys + extra."""
    spec = write_spec(tmp_path / "s.toml", scales=scale)
    prof = tmp_path / "p.toml"
    prof.write_text(PROFILE.read_text() + extra)
    run = plan(load_spec(spec)).runs[0]
    return jobscript.render(run, load_profile(prof), tmp_path, str(spec))


@pytest.mark.parametrize("launcher,tasks,cpus", [("srun", 2, 1), ("torchrun", 1, 2)])
def test_the_job_scripts_options_become_the_description(tmp_path, launcher, tasks, cpus):
    text = rendered(tmp_path, extra=f'launcher = "{launcher}"\n')
    attrs = job_description(text, "job.sh")
    assert attrs["partitions"] == "debug" and attrs["nodes"] == 2
    assert attrs["ntasks_per_node"] == tasks and attrs["cpus_per_task"] == cpus
    assert attrs["ntasks"] == 2 * tasks  # as sbatch computes it from nodes x per node
    assert attrs["time_limit"] == "00:10:00" and attrs["is_requeueable"] is False
    assert attrs["standard_output"] == str(tmp_path / "run.log")
    assert attrs["log_files_open_mode"] == "append" and attrs["name"].startswith("dlscale-t-")


def test_profile_options_and_extras_are_passed_or_refused_by_name(tmp_path):
    # top-level profile keys go before its first table
    head, _, tail = PROFILE.read_text().partition("[[partitions]]")
    prof = tmp_path / "q.toml"
    prof.write_text(
        head + 'account = "proj1"\nqos = "high"\nexclusive = true\n'
        'singleton = true\nsbatch_extra = ["--gres=nvme:1", "--mem=4G"]\n[[partitions]]' + tail
    )
    run = plan(load_spec(write_spec(tmp_path / "s.toml", scales='"1x1"'))).runs[0]
    attrs = job_description(jobscript.render(run, load_profile(prof), tmp_path, "s.toml"))
    assert (attrs["account"], attrs["qos"], attrs["resource_sharing"]) == ("proj1", "high", "no")
    assert attrs["dependencies"] == "singleton" and attrs["gres_per_node"] == "nvme:1"
    assert attrs["memory_per_node"] == "4G"
    # a GPU partition's --gpus-per-node and a --gres of another resource: both kept
    both = job_description("#!/bin/bash\n#SBATCH --gpus-per-node=4\n#SBATCH --gres=nvme:1\n")
    assert both["gres_per_node"] == "gpu:4,nvme:1"


@pytest.mark.parametrize(
    "line,message",
    [
        ("#SBATCH --hint=nomultithread", "job.sh:2: #SBATCH --hint: not an option the pyslurm"),
        ("#SBATCH -N 2", "job.sh:2: #SBATCH -N: the pyslurm backend passes long options"),
        ("#SBATCH --time", "job.sh:2: #SBATCH --time needs a value"),
        ("#SBATCH --exclusive=user", "job.sh:2: #SBATCH --exclusive: not an option"),
        ("#SBATCH --comment='open", "job.sh:2: #SBATCH line does not parse"),
    ],
)
def test_what_cannot_be_passed_is_refused_naming_the_line(line, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        job_description(f"#!/bin/bash\n{line}\necho hi\n", "job.sh")


def test_sbatch_reads_options_only_until_the_first_command():
    attrs = job_description(
        "#!/bin/bash\n#SBATCH --time=1\n\n# note\n#SBATCH --nodes=2\n"
        "echo go\n#SBATCH --hint=ignored-by-sbatch-too\n"
    )
    assert attrs == {"time_limit": 1, "nodes": 2}  # a bare number of minutes as a number
    with pytest.raises(ValueError, match="starts with #!"):
        job_description("echo no shebang\n", "x.sh")
    assert job_description("#!/bin/bash\n#SBATCH --nodes 2 --job-name 'two words'\n") == {
        "nodes": 2,
        "name": "two words",
    }


def test_the_profiles_pyslurm_field_takes_auto_or_off(tmp_path, home):
    spec = REPO / "examples" / "quickstart-slurm.toml"
    head, _, tail = PROFILE.read_text().partition("[[partitions]]")
    prof = tmp_path / "p.toml"
    prof.write_text(head + 'pyslurm = "yes"\n[[partitions]]' + tail)
    line = head.count("\n") + 1
    proc = dlscale("plan", str(spec), "--profile", str(prof), "--backend", "slurm", check=2)
    assert proc.stderr.strip() == (
        f"dlscale: error: {prof}:{line}: pyslurm: Input should be 'auto' or 'off' (got 'yes')"
    )
    prof.write_text(head + 'pyslurm = "auto"\n[[partitions]]' + tail)
    # planning for pyslurm is planning for Slurm: the same runs, nothing asked of Slurm
    plans = [
        dlscale("plan", str(spec), "--profile", str(prof), "--backend", b, check=0).stdout
        for b in ("slurm", "pyslurm")
    ]
    assert plans[0] == plans[1] and "2 runs" in plans[0]


def test_array_tasks_are_found_under_the_ids_dlscale_tracks():
    from types import SimpleNamespace as Job

    from dlscale.engine.backends.slurm.pyslurm.records import keys as _keys
    from dlscale.engine.backends.slurm.pyslurm.records import waiting_tasks as _waiting_tasks

    live = {"36_1", "36_3", "39_2", "39_5", "40", "41_2"}
    assert _keys(Job(id=37, array_id=36, array_task_id=1), live) == ["37", "36_1"]
    assert _keys(Job(id=40, array_id=None, array_task_id=None), live) == ["40"]
    # a pending array's one record: the controller names its tasks, the database a bitmap
    assert _keys(Job(id=41, array_id=41, array_task_id=None, array_tasks_waiting="1-3"), live) == [
        "41",
        "41_2",
    ]
    assert _keys(Job(id=39, array_id=39, array_task_id=None, array_tasks_waiting="0x3E"), live) == [
        "39",
        "39_2",
        "39_5",
    ]  # recorded from slurmdbd 25.11: tasks 1-5
    # pyslurm 25.11 gives task 0's id as None; with no tasks waiting the record is task 0
    # (recorded from the 25.11 controller and slurmdbd: task 0 of array 2779 as job 2782)
    task0 = Job(id=2782, array_id=2779, array_task_id=None, array_tasks_waiting=None)
    assert _keys(task0, {"2779_0"}) == ["2782", "2779_0"]
    assert _waiting_tasks(task0) is None


@pytest.mark.parametrize(
    "storage,asked",
    [
        ("accounting_storage/slurmdbd", True),
        ("accounting_storage/none", False),  # 22.05 without slurmdbd
        (None, False),  # 25.11 without slurmdbd (pyslurm's Config, recorded)
        ("", False),
        ("(null)", False),  # as `scontrol show config` prints it on 25.11
        ("ACCOUNTING_STORAGE/NONE", False),
    ],
)
def test_the_database_is_asked_only_where_the_controller_names_one(storage, asked):
    from dlscale.engine.backends.slurm.common import has_accounting

    assert has_accounting(storage) is asked


# --- on the real clusters ----------------------------------------------------------------


def auto_profile(tmp_path):
    path = tmp_path / "auto.toml"
    head, _, tail = PROFILE.read_text().partition("[[partitions]]")
    path.write_text(head + 'pyslurm = "auto"\n[[partitions]]' + tail)
    return path


@pytest.mark.slurm
@pytest.mark.parametrize("release", ["22.05", "25.11"])
def test_doctor_and_run_say_which_way_slurm_is_reached(
    request, release, tmp_path, home, monkeypatch
):
    started = request.getfixturevalue("slurm_22_05" if release == "22.05" else "slurm_25_11")
    for name, value in started.env.items():
        monkeypatch.setenv(name, value)
    version = subprocess.run(
        ["scontrol", "version"], capture_output=True, text=True, check=True
    ).stdout.split()[-1]
    installed = subprocess.run(
        [
            str(REPO / ".venv" / "bin" / "python"),
            "-c",
            "import importlib.metadata as m; print(m.version('pyslurm'))",
        ],
        capture_output=True,
        text=True,
    )
    if installed.returncode != 0:
        pytest.skip("pyslurm is not installed in this venv")
    pyslurm = installed.stdout.strip()
    said = dlscale("doctor", "--profile", str(auto_profile(tmp_path)), "pytorch-ddp").stdout
    first = said.splitlines()[0]
    if release == "25.11":
        assert first.startswith('slurm backend: using pyslurm (the profile\'s pyslurm = "auto")')
        assert (
            f"pyslurm usable here: pyslurm {pyslurm} (built against Slurm {version}) "
            f"matches this cluster's Slurm {version}" in first
        )
    else:
        assert first.startswith(
            "slurm backend: using Slurm's commands, not pyslurm: "
            f"pyslurm {pyslurm} is for Slurm 25.11, this cluster runs "
            f"Slurm {version}"
        )
        # asked for by name where it cannot work: refused, nothing submitted or recorded
        before = subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True).stdout
        proc = dlscale(
            "run",
            str(write_spec(tmp_path / "s.toml", scales='"1x1"')),
            "--profile",
            str(PROFILE),
            "--backend",
            "pyslurm",
            check=2,
        )
        assert proc.stderr.strip() == (
            f"dlscale: error: --backend pyslurm: pyslurm {pyslurm} is for Slurm 25.11, this "
            f"cluster runs Slurm {version}; --backend slurm uses Slurm's commands"
        )
        assert Store(home).runs() == []
        assert (
            subprocess.run(["squeue", "-h", "-o", "%i"], capture_output=True, text=True).stdout
            == before
        )
    plain = dlscale("doctor", "--profile", str(PROFILE), "pytorch-ddp").stdout.splitlines()[0]
    assert plain.startswith(
        "slurm backend: using Slurm's commands (pyslurm only with "
        '--backend pyslurm, or with pyslurm = "auto" in the profile)'
    )


# --- where the Slurm 25.11 source is found ----------------------------------------------


def fake_checkout(root, archive=True):
    """root/main: a checkout holding the build script; root/shared/vendor: its archive."""
    script = root / "main" / "tests" / "slurm" / "build-slurm"
    script.parent.mkdir(parents=True)
    script.write_bytes((REPO / "tests" / "slurm" / "build-slurm").read_bytes())
    script.chmod(0o755)
    if archive:
        vendor = root / "shared" / "vendor"
        vendor.mkdir(parents=True)
        (vendor / "slurm-25.11.7.tar.xz").write_bytes(b"not really slurm")
        digest = subprocess.run(
            ["sha256sum", "slurm-25.11.7.tar.xz"],
            cwd=vendor,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        (vendor / "SHA256SUMS").write_text(digest)
        return script, digest.split()[0]
    return script, None


def script_env(env=None):
    """This environment without DLSCALE_SLURM_SRC (the fake checkout's own archive counts),
    plus env."""
    full = {k: v for k, v in os.environ.items() if k != "DLSCALE_SLURM_SRC"}
    return {**full, **(env or {})}


def build_slurm(script, *args, env=None):
    return subprocess.run(
        [str(script), *args], capture_output=True, text=True, env=script_env(env), timeout=HANG_S
    )


def test_the_source_is_found_beside_the_checkout_symlinks_resolved(tmp_path):
    script, digest = fake_checkout(tmp_path / "work")
    cache = tmp_path / "cache"
    # as /work/main finds /work/shared/vendor
    proc = build_slurm(script, "--prefix", env={"DLSCALE_ENV_CACHE": str(cache)})
    assert proc.stdout.strip() == f"{cache}/slurm-25.11.7-{digest[:12]}", proc.stderr
    # reached through a symlink elsewhere, the checkout's real parent still counts
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "main").symlink_to(tmp_path / "work" / "main")
    linked = tmp_path / "elsewhere" / "main" / "tests" / "slurm" / "build-slurm"
    proc = build_slurm(linked, "--prefix", env={"DLSCALE_ENV_CACHE": str(cache)})
    assert proc.stdout.strip() == f"{cache}/slurm-25.11.7-{digest[:12]}", proc.stderr
    # DLSCALE_SLURM_SRC wins
    other, _ = fake_checkout(tmp_path / "other", archive=False)
    proc = build_slurm(
        other,
        "--check",
        env={
            "DLSCALE_SLURM_SRC": str(tmp_path / "work" / "shared" / "vendor"),
            "DLSCALE_ENV_CACHE": str(cache),
        },
    )
    assert proc.returncode == 1  # found, not built yet


def test_main_finds_the_shared_vendor_folder():
    """The layout this repository is developed in: /work/main beside /work/shared."""
    script = Path("/work/main/tests/slurm/build-slurm")
    if not script.exists() or not Path("/work/shared/vendor/slurm-25.11.7.tar.xz").exists():
        pytest.skip("no /work/main checkout with build-slurm beside /work/shared/vendor here")
    proc = build_slurm(script, "--prefix", env={"DLSCALE_ENV_CACHE": "/var/cache/dlscale"})
    assert proc.returncode == 0 and proc.stdout.startswith("/var/cache/dlscale/slurm-25.11.7-"), (
        proc.stderr
    )


def test_without_the_archive_it_says_where_it_looked_and_exits_3(tmp_path):
    script, _ = fake_checkout(tmp_path / "work", archive=False)
    proc = build_slurm(script, "--check")
    assert proc.returncode == 3
    assert proc.stderr.strip() == (
        f"[build-slurm] {tmp_path}/work/shared/vendor/"
        "slurm-25.11.7.tar.xz not found (set DLSCALE_SLURM_SRC to "
        "the folder holding it)"
    )
    cluster = subprocess.run(
        [str(REPO / "tests" / "slurm" / "cluster"), "--slurm", "24.11", "status"],
        capture_output=True,
        text=True,
    )
    assert cluster.returncode == 2 and "allowed: 22.05, 25.11" in cluster.stderr


def test_a_tampered_archive_is_refused_before_building(tmp_path):
    script, _ = fake_checkout(tmp_path / "work")
    (tmp_path / "work" / "shared" / "vendor" / "slurm-25.11.7.tar.xz").write_bytes(b"changed")
    proc = build_slurm(
        script,
        env={
            "DLSCALE_ENV_CACHE": str(tmp_path / "cache"),
            "PATH": f"{REPO / '.venv' / 'bin'}:/usr/bin:/bin",
        },
    )
    assert proc.returncode == 1 and "does not match its SHA256SUMS" in proc.stderr
    assert [p.suffix for p in (tmp_path / "cache").iterdir()] == [".lock"]  # nothing built


@pytest.mark.slurm
@pytest.mark.slow
def test_pyslurm_sees_what_the_commands_see(slurm_25_11, monkeypatch):
    """The same states, pending reasons, exit codes and nodes, first from the controller,
    then (once it has forgotten the finished jobs) from the database."""
    started = slurm_25_11
    for name, value in started.env.items():
        monkeypatch.setenv(name, value)
    if (
        subprocess.run(
            [str(REPO / ".venv" / "bin" / "python"), "-c", "import pyslurm"], capture_output=True
        ).returncode
        != 0
    ):
        pytest.skip("pyslurm does not import in this venv")
    from dlscale.engine.backends.slurm.commands import SlurmCLI
    from dlscale.engine.backends.slurm.pyslurm.backend import PyslurmBackend
    from dlscale.engine.runs import TERMINAL

    def sbatch(*args):
        return subprocess.run(
            ["sbatch", "--parsable", "-o", "/dev/null", *args],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()

    def sacct(job):
        """The job's states as accounting holds them, one per array task."""
        out = subprocess.run(
            ["sacct", "-n", "-X", "-P", "-j", job, "-o", "State"], capture_output=True, text=True
        ).stdout
        return sorted(line.split()[0] for line in out.splitlines() if line.strip())

    # Only states that cannot change between the two polls are compared: every job below
    # ends, is held, or sleeps past any deadline (cancelled in `finally`). The wait is for
    # each of them to have settled, the array's tasks included (a task still running at the
    # first poll and done by the second failed CI once), and for none to be COMPLETING.
    jobs = {
        "completed": sbatch("-N2", "-n2", "--wrap", "srun true"),
        "failed": sbatch("--wrap", "exit 3"),
        "held": sbatch("-H", "--wrap", "true"),
        "cancelled": sbatch("-H", "--wrap", "true"),
        "running": sbatch("--wrap", "sleep 100000"),
    }
    array = sbatch("-a", "1-2", "--wrap", "true")
    held_array = sbatch("-H", "-a", "1-3%2", "--wrap", "true")
    subprocess.run(["scancel", jobs["cancelled"]], check=True)
    settled = {
        jobs["completed"]: ["COMPLETED"],
        jobs["failed"]: ["FAILED"],
        jobs["held"]: ["PENDING"],
        jobs["cancelled"]: ["CANCELLED"],
        jobs["running"]: ["RUNNING"],
        array: ["COMPLETED", "COMPLETED"],
        held_array: ["PENDING"],
    }

    def completing() -> str:
        return subprocess.run(
            ["squeue", "-h", "-t", "CG", "-o", "%i", "-j", ",".join(settled)],
            capture_output=True,
            text=True,
        ).stdout.strip()

    try:
        deadline = time.time() + HANG_S
        while time.time() < deadline and not (
            all(sacct(job) == want for job, want in settled.items()) and not completing()
        ):
            time.sleep(1)
        assert {job: sacct(job) for job in settled} == settled, "the jobs never settled"
        # dlscale tracks array tasks as ARRAY_TASK
        for name, base, tasks in (("array", array, (1, 2)), ("held array", held_array, (1, 2))):
            jobs.update({f"{name} {t}": f"{base}_{t}" for t in tasks})
        ids = list(jobs.values())

        def seen(scheduler):
            """What a poll says of each job; an exit code once the job has one (a pending
            array task's, from squeue alone, is None through the commands)."""
            polled = scheduler.watcher.poll(ids)
            return {
                name: (
                    polled[j].state,
                    polled[j].reason,
                    polled[j].nodes,
                    polled[j].exit_code if polled[j].state in TERMINAL else "-",
                )
                for name, j in jobs.items()
            }

        cli = SlurmCLI(squeue_every=1)
        expected = seen(cli)
        assert expected["held"] == ("PENDING", "JobHeldUser", None, "-")
        assert expected["failed"] == ("FAILED", None, "node1", 3)
        assert expected["completed"] == ("COMPLETED", None, "node[1-2]", 0)
        assert expected["held array 2"] == ("PENDING", "JobHeldUser", None, "-")
        assert seen(PyslurmBackend()) == expected
        # the controller forgets finished jobs MinJobAge (10 s) after they end
        while (
            time.time() < deadline + 60
            and subprocess.run(
                ["scontrol", "show", "job", jobs["failed"]], capture_output=True
            ).returncode
            == 0
        ):
            time.sleep(2)
        assert seen(PyslurmBackend()) == seen(SlurmCLI(squeue_every=1))
    finally:
        subprocess.run(["scancel", jobs["running"], jobs["held"], held_array])


def test_a_concurrent_build_waits_for_the_first(tmp_path):
    script, digest = fake_checkout(tmp_path / "work")
    cache = tmp_path / "cache"
    cache.mkdir()
    lock = cache / f"slurm-25.11.7-{digest[:12]}.lock"
    holder = open(lock, "w")
    fcntl.flock(holder, fcntl.LOCK_EX)  # as a first build holds it
    try:
        env = {"DLSCALE_ENV_CACHE": str(cache)}
        assert build_slurm(script, "--check", env=env).returncode == 4  # in progress
        second = subprocess.Popen(
            [str(script)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=script_env(env),
        )
        time.sleep(3)
        assert second.poll() is None  # still waiting
    finally:
        holder.close()
    try:
        _, err = second.communicate(timeout=HANG_S)
    finally:
        second.kill()
    assert "another build of Slurm 25.11.7 is in progress; waiting for it" in err
    # then it went on, to the (fake) archive, which is no xz file
    assert second.returncode != 0 and "xz" in err.lower()


@pytest.mark.slurm
def test_a_second_build_is_instant_and_both_releases_answer_on_their_own(slurm_22_05, slurm_25_11):
    env = {**os.environ, "PYTHON": str(REPO / ".venv" / "bin" / "python")}
    t0 = time.monotonic()
    again = subprocess.run(
        [str(REPO / "tests" / "slurm" / "build-slurm")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert again.returncode == 0 and time.monotonic() - t0 < 5, again.stderr
    assert again.stdout.startswith("PREFIX=") and "PYSLURM_WHEEL=" in again.stdout
    answers = {}
    for started in (slurm_22_05, slurm_25_11):
        run_env = {**os.environ, **started.env}

        def ask(*argv):
            return subprocess.run(
                argv, env=run_env, capture_output=True, text=True, check=True
            ).stdout.strip()

        job = ask("sbatch", "--parsable", "-o", "/dev/null", "--wrap", "true").split(";")[0]
        deadline = time.time() + HANG_S
        while time.time() < deadline and not ask(
            "sacct", "-n", "-X", "-P", "-j", job, "-o", "Cluster,State"
        ).endswith("COMPLETED"):
            time.sleep(1)
        answers[started.release] = (
            ask("scontrol", "version"),
            ask("sacct", "-n", "-X", "-P", "-j", job, "-o", "Cluster,State"),
            # partitions and node totals (A/I/O/T): another test's job may still hold one
            [
                f"{part} {counts.split('/')[-1]}"
                for part, counts in (
                    line.split() for line in ask("sinfo", "-h", "-s", "-o", "%P %F").splitlines()
                )
            ],
        )
    assert answers["22.05"][:2] == ("slurm-wlm 22.05.8", "dlscale|COMPLETED")
    assert answers["25.11"][:2] == ("slurm 25.11.7", "dlscale2511|COMPLETED")
    assert answers["22.05"][2] == answers["25.11"][2] == ["debug* 2", "short 2"]
