"""Parsers of Slurm's command output (sbatch, sacct and squeue, text and JSON), Slurm 22.05+
(recorded from 22.05 and 25.11: tests/fixtures/).

Pure functions of text, tested against recorded output, so the watcher's logic does not
depend on a live controller.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass

from ...runs import State

# Slurm's job states, mapped onto the ones dlscale shows. Unknown states read as UNKNOWN
# rather than being guessed.
STATE_MAP = {
    "PENDING": State.PENDING,
    "CONFIGURING": State.PENDING,
    "REQUEUED": State.PENDING,
    "REQUEUE_HOLD": State.PENDING,
    "REQUEUE_FED": State.PENDING,
    "RESV_DEL_HOLD": State.PENDING,
    "RUNNING": State.RUNNING,
    "COMPLETING": State.RUNNING,
    "RESIZING": State.RUNNING,
    "SUSPENDED": State.RUNNING,
    "STAGE_OUT": State.RUNNING,
    "SIGNALING": State.RUNNING,
    "STOPPED": State.RUNNING,
    "COMPLETED": State.COMPLETED,
    "FAILED": State.FAILED,
    "OUT_OF_MEMORY": State.FAILED,
    "BOOT_FAIL": State.FAILED,
    "SPECIAL_EXIT": State.FAILED,
    "PREEMPTED": State.FAILED,
    "REVOKED": State.FAILED,
    "CANCELLED": State.CANCELLED,
    "DEADLINE": State.TIMEOUT,
    "TIMEOUT": State.TIMEOUT,
    "NODE_FAIL": State.NODE_FAIL,
}
SQUEUE_FORMAT = "%i|%T|%r|%N|%M"
# the user's jobs with their comments (tags): an array's own id, state, comment last
# (it may hold any character, `|` too)
TAGGED_FORMAT = "%F|%T|%k"
SACCT_FIELDS = "JobIDRaw,JobID,State,ExitCode,ElapsedRaw,NodeList,Reason"


class ParseError(ValueError):
    """Output that does not have the shape expected of the command."""


@dataclass(frozen=True)
class SlurmJob:
    job_id: str  # as dlscale tracks it: "123", or "123_4" for an array task
    state: str  # dlscale's state (STATE_MAP)
    slurm_state: str  # Slurm's own word, e.g. "CANCELLED by 0"
    exit_code: int | None = None
    signal: int | None = None
    elapsed_s: int | None = None
    nodes: str | None = None
    reason: str | None = None


@functools.lru_cache(maxsize=256)
def map_state(raw: str) -> str:
    word = raw.strip().split(" ")[0].rstrip("+").upper()
    return STATE_MAP.get(word, State.UNKNOWN)


def parse_sbatch(stdout: str) -> str:
    """`sbatch --parsable` prints `jobid` or `jobid;cluster`."""
    for line in stdout.strip().splitlines()[::-1]:
        m = re.fullmatch(r"(\d+)(?:;\S+)?", line.strip())
        if m:
            return m[1]
    raise ParseError(f"sbatch printed no job id: {stdout.strip()[:200]!r}")


def expand_array(job_id: str) -> list[str]:
    """`123_[1-3,7]` -> 123_1, 123_2, 123_3, 123_7 (a pending array's compressed form).
    A `%4` throttle suffix is dropped."""
    m = re.fullmatch(r"(\d+)_\[([^\]]+)\]", job_id)
    if not m:
        return [job_id]
    out = []
    for part in m[2].split("%")[0].split(","):
        if "-" in part:
            lo, hi = part.split("-", 1)
            step = 1
            if ":" in hi:
                hi, s = hi.split(":", 1)
                step = int(s)
            out += [f"{m[1]}_{i}" for i in range(int(lo), int(hi) + 1, step)]
        elif part:
            out.append(f"{m[1]}_{part}")
    return out


def _nodes(text) -> str | None:
    text = (text or "").strip()
    return None if not text or text in ("None assigned", "(null)") else text


@functools.lru_cache(maxsize=256)
def _exit(code: str) -> tuple[int | None, int | None]:
    m = re.fullmatch(r"(\d+):(\d+)", code.strip())
    return (int(m[1]), int(m[2])) if m else (None, None)


def parse_sacct(stdout: str, fields: str = SACCT_FIELDS) -> dict[str, SlurmJob]:
    """`sacct --parsable2 --noheader --format=FIELDS`: one row per job, array task and step.
    Step rows (`123.batch`, `123.0`, `123.extern`) are skipped: the job row carries the
    state. Rows of a requeued job repeat; the last one wins. (Columns are taken by position
    and states, exit codes and array forms read once each: a watcher of 10,000 jobs parses
    30,000 rows a tick.)"""
    names = fields.split(",")
    width, at = len(names), {n: i for i, n in enumerate(names)}
    job_at = at.get("JobID", at.get("JobIDRaw"))
    state_at, code_at, elapsed_at = at["State"], at.get("ExitCode"), at.get("ElapsedRaw")
    nodes_at, reason_at = at.get("NodeList"), at.get("Reason")
    out: dict[str, SlurmJob] = {}
    for line in stdout.splitlines():
        if not line or line.isspace():
            continue
        cols = line.split("|")
        if len(cols) < width:
            raise ParseError(f"sacct row has {len(cols)} fields, expected {width}: {line[:200]!r}")
        job = cols[job_at] if job_at is not None else ""
        if "." in job:
            continue
        exit_code, sig = _exit(cols[code_at] if code_at is not None else "")
        elapsed = cols[elapsed_at] if elapsed_at is not None else ""
        reason = cols[reason_at].strip() if reason_at is not None else ""
        raw = cols[state_at]
        for jid in expand_array(job) if "[" in job else (job,):
            out[jid] = SlurmJob(
                jid,
                map_state(raw),
                raw.strip(),
                exit_code,
                sig,
                int(elapsed) if elapsed.isdigit() else None,
                _nodes(cols[nodes_at] if nodes_at is not None else None),
                reason if reason and reason != "None" else None,
            )
    return out


def _current_state(state) -> str:
    # 22.05: {"current": "COMPLETED"}; 23.02+: {"current": ["COMPLETED"], "reason": ...};
    # some builds print a bare string.
    if isinstance(state, dict):
        state = state.get("current", State.UNKNOWN)
    if isinstance(state, list):
        state = state[0] if state else State.UNKNOWN
    return str(state)


def _number(v) -> int | None:
    # 23.02+ wraps numbers: {"set": true, "infinite": false, "number": 0}
    if isinstance(v, dict):
        return v.get("number") if v.get("set", True) else None
    return v if isinstance(v, int) else None


def site_limit(value) -> int | None:
    """A site's limit (MaxArraySize, MaxSubmitJobs) as a count, None where there is none:
    sacctmgr prints a blank or a number, pyslurm hands over an int, None, or "UNLIMITED"
    for Slurm's INFINITE; a limit of 0 reads as none, as Slurm's own defaults do."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value or None
    text = str(value or "").strip()
    return (int(text) or None) if text.isdigit() else None


def parse_sacct_json(stdout: str) -> dict[str, SlurmJob]:
    """`sacct --json` (Slurm 21.08+; shapes of 22.05 and of 23.02+ alike)."""
    try:
        doc = json.loads(stdout)
    except json.JSONDecodeError as exc:
        raise ParseError(f"sacct --json printed invalid JSON: {exc.msg}") from None
    out: dict[str, SlurmJob] = {}
    for job in doc.get("jobs", []):
        array = job.get("array") or {}
        task = _number(array.get("task_id"))
        array_job = _number(array.get("job_id"))
        if array_job and task is not None:
            jids = [f"{array_job}_{task}"]
        elif array_job and isinstance(array.get("task"), str) and array["task"].startswith("0x"):
            # a pending array's tasks as a hex bitmap: 0x3E = tasks 1-5
            bits = int(array["task"], 16)
            jids = [f"{array_job}_{i}" for i in range(bits.bit_length()) if bits >> i & 1]
        else:
            jids = [str(job["job_id"])]
        raw = _current_state(job.get("state"))
        ec = job.get("exit_code") or {}
        rc = _number(ec.get("return_code"))
        sig = _number(
            (ec.get("signal") or {}).get("id")
            if isinstance(ec.get("signal"), dict)
            else ec.get("signal")
        )
        if sig is None and rc is not None:
            sig = 0  # 23.02+ leave an absent signal unset; the text answer says `rc:0`
        reason = (
            (job.get("state") or {}).get("reason") if isinstance(job.get("state"), dict) else None
        )
        for jid in jids:
            out[jid] = SlurmJob(
                jid,
                map_state(raw),
                raw,
                rc,
                sig,
                _number((job.get("time") or {}).get("elapsed")),
                _nodes(job.get("nodes")),
                reason if reason and reason != "None" else None,
            )
    return out


def parse_squeue(stdout: str) -> dict[str, SlurmJob]:
    """`squeue --noheader --format='%i|%T|%r|%N|%M'`: job id, state, reason, nodes, time."""
    out: dict[str, SlurmJob] = {}
    for line in stdout.splitlines():
        if not line.strip():
            continue
        cols = line.split("|")
        if len(cols) < 5:
            raise ParseError(f"squeue row has {len(cols)} fields, expected 5: {line[:200]!r}")
        jid, state, reason, nodes, elapsed = (c.strip() for c in cols[:5])
        for j in expand_array(jid):
            out[j] = SlurmJob(
                j,
                map_state(state),
                state,
                None,
                None,
                _clock(elapsed),
                _nodes(nodes),
                reason if reason and reason != "None" else None,
            )
    return out


def parse_tagged(stdout: str) -> list[tuple[str, str, str]]:
    """`squeue --noheader --format='%F|%T|%k'`: (job id, dlscale state, comment) of the jobs
    whose comment is a dlscale token; other rows are not dlscale's and are passed over."""
    out = []
    for line in stdout.splitlines():
        cols = line.split("|", 2)
        if len(cols) == 3 and cols[0].strip().isdigit() and cols[2].startswith("dlscale:"):
            out.append((cols[0].strip(), map_state(cols[1]), cols[2].strip()))
    return out


def parse_squeue_json(stdout: str) -> dict[str, SlurmJob]:
    """`squeue --json` (23.02+ shapes: `job_state` a list, numbers as {set, number}). It has
    no elapsed time; array tasks are `ARRAY_TASK`, a pending array's `array_task_string`."""
    try:
        doc = json.loads(stdout)
    except json.JSONDecodeError as exc:
        raise ParseError(f"squeue --json printed invalid JSON: {exc.msg}") from None
    out: dict[str, SlurmJob] = {}
    for job in doc.get("jobs", []):
        array_job, task = _number(job.get("array_job_id")), _number(job.get("array_task_id"))
        if array_job and task is not None:
            jids = [f"{array_job}_{task}"]
        elif array_job and job.get("array_task_string"):
            jids = expand_array(f"{array_job}_[{job['array_task_string']}]")
        else:
            jids = [str(job["job_id"])]
        raw = _current_state(job.get("job_state"))
        ec = job.get("exit_code") or {}
        rc = _number(ec.get("return_code"))
        sig = _number((ec.get("signal") or {}).get("id"))
        reason = job.get("state_reason")
        for jid in jids:
            out[jid] = SlurmJob(
                jid,
                map_state(raw),
                raw,
                rc,
                sig,
                None,
                _nodes(job.get("nodes")),
                reason if reason and reason != "None" else None,
            )
    return out


def _clock(text: str) -> int | None:
    """squeue's %M: [D-]HH:MM:SS or MM:SS."""
    m = re.fullmatch(r"(?:(\d+)-)?(?:(\d+):)?(\d+):(\d+)", text)
    if not m:
        return None
    d, h, mi, s = (int(x) if x else 0 for x in m.groups())
    return ((d * 24 + h) * 60 + mi) * 60 + s


def parse_scontrol_jobs(stdout: str) -> dict[str, SlurmJob]:
    """`scontrol --oneliner show job`: every job the controller still remembers (ended ones
    until MinJobAge), one line each; `KEY=VALUE` words. An array's pending remainder is one
    line whose ArrayTaskId is a range (`2-59%5`). What a site without accounting has."""
    out: dict[str, SlurmJob] = {}
    for line in stdout.splitlines():
        if "JobId=" not in line:
            continue  # "No jobs in the system"
        f = dict(w.partition("=")[::2] for w in line.split() if "=" in w)
        array_job, task = f.get("ArrayJobId"), f.get("ArrayTaskId")
        jids = expand_array(f"{array_job}_[{task}]") if array_job and task else [f.get("JobId", "")]
        raw = f.get("JobState", State.UNKNOWN)
        exit_code, sig = _exit(f.get("ExitCode", ""))
        reason = f.get("Reason")
        for jid in jids:
            out[jid] = SlurmJob(
                jid,
                map_state(raw),
                raw,
                exit_code,
                sig,
                _clock(f.get("RunTime", "")),
                _nodes(f.get("NodeList")),
                reason if reason and reason != "None" else None,
            )
    return out


def parse_exit_marker(text: str) -> tuple[str, int | None] | None:
    """The job script's `job.exit` (`exit N` or `signal TERM`): (state, exit code), or None
    while it is being written."""
    words = text.split()
    if words[:1] == ["exit"] and len(words) == 2 and words[1].isdigit():
        code = int(words[1])
        return (State.COMPLETED if code == 0 else State.FAILED), code
    if words[:1] == ["signal"] and len(words) == 2:
        return State.CANCELLED, None
    return None
