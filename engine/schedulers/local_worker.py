"""The local backend's worker: runs queued local jobs one at a time, then exits.

Started detached by LocalScheduler; `python -m dlscale.engine.schedulers.local_worker HOME`.
Only one worker runs per store (an exclusive lock), so measurements never overlap.
"""
from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from ..monitor import finalize_run
from ..store import Store
from .local import LOCK_NAME

INGEST_EVERY_S = 2.0
KILL_GRACE_S = 10.0


def _claim(store: Store) -> dict | None:
    with store.transaction() as c:
        row = c.execute("SELECT * FROM jobs WHERE backend='local' AND state='PENDING' "
                        "ORDER BY submitted, job_id LIMIT 1").fetchone()
        if row is None:
            return None
        now = time.time()
        c.execute("UPDATE jobs SET state='RUNNING', started=?, nodes='localhost' "
                  "WHERE backend='local' AND job_id=?", (now, row["job_id"]))
        c.execute("UPDATE runs SET state='RUNNING', updated=? WHERE run_id=?",
                  (now, row["run_id"]))
        return dict(row)


def _run_job(store: Store, job: dict, current: dict) -> None:
    payload = json.loads(job["payload"])
    run_dir = Path(payload["run_dir"])
    run_dir.mkdir(parents=True, exist_ok=True)
    metrics = run_dir / "metrics.jsonl"
    with open(payload["log"], "ab") as log:
        log.write(f"dlscale: local job {job['job_id']} of run {job['run_id']} started "
                  f"{time.strftime('%Y-%m-%d %H:%M:%S')}\n".encode())
        log.flush()
        try:
            proc = subprocess.Popen(payload["argv"], cwd=run_dir, stdin=subprocess.DEVNULL,
                                    stdout=log, stderr=subprocess.STDOUT,
                                    env={**os.environ, **payload["env"]},
                                    start_new_session=True)
        except OSError as exc:
            log.write(f"dlscale: cannot start the job: {exc}\n".encode())
            store.update_job("local", job["job_id"], state="FAILED", ended=time.time(),
                             exit_code=127, reason=str(exc))
            finalize_run(store, job["run_id"], "FAILED")
            return
        current["pid"] = proc.pid
        store.update_job("local", job["job_id"], pid=proc.pid)
        last_ingest, kill_sent = 0.0, None
        while proc.poll() is None:
            time.sleep(0.2)
            now = time.time()
            if now - last_ingest > INGEST_EVERY_S:  # partial results survive a killed run
                store.ingest(job["run_id"], metrics)
                last_ingest = now
                cancelled = store.job("local", job["job_id"])["state"] == "CANCELLED"
                if cancelled and kill_sent is None:
                    os.killpg(proc.pid, signal.SIGTERM)
                    kill_sent = now
            if kill_sent and now - kill_sent > KILL_GRACE_S:
                os.killpg(proc.pid, signal.SIGKILL)
        rc = proc.returncode
        log.write(f"dlscale: job {job['job_id']} ended with exit code {rc}\n".encode())
    current = store.job("local", job["job_id"])
    if current["state"] == "CANCELLED":
        state = "CANCELLED"
    else:
        state = "COMPLETED" if rc == 0 else "FAILED"
        store.update_job("local", job["job_id"], state=state, exit_code=rc, ended=time.time())
    finalize_run(store, job["run_id"], state)


def main(home: str) -> int:
    store = Store(home)
    lock = open(Path(home) / LOCK_NAME, "a+")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return 0  # another worker drains the queue
    # A worker stopped with SIGTERM takes its job down with it instead of orphaning it.
    current: dict = {}

    def on_term(signum, frame):  # noqa: ARG001
        if current.get("pid"):
            try:
                os.killpg(current["pid"], signal.SIGTERM)
            except ProcessLookupError:
                pass
        sys.exit(143)
    signal.signal(signal.SIGTERM, on_term)
    while (job := _claim(store)) is not None:
        current.clear()
        _run_job(store, job, current)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
