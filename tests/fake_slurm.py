"""A stand-in for sbatch, squeue, sacct and scancel, for tests of what dlscale does when
Slurm's answer is lost: the jobs it "accepts" are kept in FAKE_SLURM_DIR/jobs.json, so a
later squeue shows them as the real controller would (pending, with their comment).

FAKE_SBATCH says how sbatch behaves after it has taken the job: `ok` (prints its id),
`timeout-once` (the first submission's answer is lost: "Socket timed out"), `hang` (writes
FAKE_SLURM_DIR/accepted, then sleeps, as a controller that took the job but whose answer
has not come back yet); or `refuse`: it takes nothing and says why, as for a bad account.

FAKE_SLURM_MAX_SUBMIT is the user's job limit sacctmgr reports (none by default).
FAKE_SLURM_DELAY makes commands slow, as on a busy cluster: `scontrol=2,squeue=1.5` (each
answers after that many seconds; `*=1` for every command).

Every call is logged, a line each, in FAKE_SLURM_DIR/calls.log. FAKE_SLURM_HANG names
commands (`sacct,squeue`) that never answer, as on a cluster whose
slurmdbd or controller is swamped: each sleeps until it is killed.

`install(bin_dir)` writes the commands into a folder to put first on PATH.
"""

from __future__ import annotations

import fcntl
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

COMMANDS = ("sbatch", "squeue", "sacct", "scancel", "scontrol", "sacctmgr", "sinfo")
REFUSED = (
    "sbatch: error: Batch job submission failed: Invalid account or account/partition "
    "combination specified"
)


def install(bin_dir: Path) -> None:
    bin_dir.mkdir(parents=True, exist_ok=True)
    for name in COMMANDS:
        p = bin_dir / name
        p.write_text(f'#!/bin/sh\nexec {sys.executable} {Path(__file__).resolve()} {name} "$@"\n')
        p.chmod(0o755)


def jobs(state_dir: Path) -> list[dict]:
    f = Path(state_dir) / "jobs.json"
    return json.loads(f.read_text()) if f.exists() else []


def _change(state_dir: Path, change: Callable[[list[dict]], None]) -> list[dict]:
    """The jobs changed as one controller would: one change at a time (two scancels at once
    lost a file to each other's rename), written whole."""
    with open(state_dir / "jobs.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        found = jobs(state_dir)
        change(found)
        tmp = state_dir / f"jobs.json.{os.getpid()}"
        tmp.write_text(json.dumps(found))
        os.replace(tmp, state_dir / "jobs.json")
    return found


def _value(args: list[str], name: str) -> str | None:
    for i, a in enumerate(args):
        if a.startswith(name + "="):
            return a.split("=", 1)[1]
        if a == name and i + 1 < len(args):
            return args[i + 1]
    return None


def main(name: str, args: list[str]) -> int:
    state_dir = Path(os.environ["FAKE_SLURM_DIR"])
    with open(state_dir / "calls.log", "a") as fh:  # every call, as `name arg...`
        fh.write(" ".join([name, *args]) + "\n")
    if name in os.environ.get("FAKE_SLURM_HANG", "").split(","):
        time.sleep(3600)
        return 1
    delays = dict(
        d.split("=", 1) for d in os.environ.get("FAKE_SLURM_DELAY", "").split(",") if "=" in d
    )
    time.sleep(float(delays.get(name, delays.get("*", 0))))
    found = jobs(state_dir)
    if name == "sbatch" and os.environ.get("FAKE_SBATCH") == "refuse":
        print(REFUSED, file=sys.stderr)
        return 1
    if name == "sbatch":

        def submit(found: list[dict]) -> None:
            found.append(
                {
                    "id": str(1000 + len(found)),
                    "comment": _value(args, "--comment") or "",
                    "array": _value(args, "--array"),
                    "state": "PENDING",
                }
            )

        job = _change(state_dir, submit)[-1]
        mode = os.environ.get("FAKE_SBATCH", "ok")
        if mode == "timeout-once" and not (state_dir / "timed-out").exists():
            (state_dir / "timed-out").write_text("")
            print(
                "sbatch: error: Batch job submission failed: Socket timed out on send/recv "
                "operation",
                file=sys.stderr,
            )
            return 1
        if mode == "hang":
            (state_dir / "accepted").write_text(job["id"])
            time.sleep(120)
        print(job["id"])
        return 0
    if name == "squeue":
        fmt = _value(args, "--format") or ""
        for job in found:
            if "%k" in fmt:
                print(f"{job['id']}|{job['state']}|{job['comment']}")
            else:
                jid = job["id"]
                if job["array"]:
                    jid += "_[" + job["array"].split("%")[0] + "]"
                print(f"{jid}|{job['state']}|Resources||0:00")
        return 0
    if name == "sacct":
        return 0  # not in accounting yet: squeue's word stands
    if name == "scontrol" and args[:1] == ["ping"]:
        print("Slurmctld(primary) at fake is UP")
        return 0
    if name == "scontrol" and args[:2] == ["show", "config"]:
        print("ClusterName = fake\nMaxArraySize = 1001")
        print("AccountingStorageType = accounting_storage/slurmdbd")
        return 0
    if name == "sacctmgr":  # the user's MaxSubmit, where FAKE_SLURM_MAX_SUBMIT sets one
        print(os.environ.get("FAKE_SLURM_MAX_SUBMIT", ""))
        return 0
    if name == "sinfo":
        return 0
    if name == "scancel":

        def cancel(found: list[dict]) -> None:
            for job in found:
                if job["id"] in {a.split("_")[0] for a in args}:
                    job["state"] = "CANCELLED"

        _change(state_dir, cancel)
        return 0
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2:]))
