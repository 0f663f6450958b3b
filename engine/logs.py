"""Reading run logs: the last lines of a file of any size, and following it as it grows."""
from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import Callable, Iterator

_TRAINER_ERROR = re.compile(r"dlscale-[\w-]+: error: .*")


def tail_lines(path: str | Path, n: int = 20, block: int = 64 * 1024) -> list[str]:
    """The last `n` lines, reading backwards from the end: a 1 GB log costs one block."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            pos = fh.tell()
            data = b""
            while pos > 0 and data.count(b"\n") <= n:
                step = min(block, pos)
                pos -= step
                fh.seek(pos)
                data = fh.read(step) + data
    except FileNotFoundError:
        return []
    lines = data.decode("utf-8", errors="replace").splitlines()
    return lines[-n:]


def failure_reason(path: str | Path, context: int = 5) -> str:
    """One line saying why a run failed (the trainer's own error line when it printed one),
    followed by the last lines of its log."""
    lines = tail_lines(path, 200)
    if not lines:
        return f"no log at {path}"
    errors = [m.group(0) for line in lines if (m := _TRAINER_ERROR.search(line))]
    tail = [line for line in lines if line.strip()][-context:]
    head = errors[-1] if errors else tail[-1] if tail else "the job failed without output"
    return "\n".join([head, *("  | " + line for line in tail)])


def follow(path: str | Path, from_end_lines: int = 20, interval: float = 0.5,
           stop: Callable[[], bool] = lambda: False) -> Iterator[str]:
    """Yield the last lines, then new lines as they are written (see follow_chunks)."""
    for chunk in follow_chunks(path, from_end_lines, interval, stop):
        yield from chunk


def follow_chunks(path: str | Path, from_end_lines: int = 20, interval: float = 0.5,
                  stop: Callable[[], bool] = lambda: False) -> Iterator[list[str]]:
    """The last lines as one list, then each read's new lines as a list, and an empty list
    whenever a poll found nothing (so a viewer can flush and check for cancellation).

    Survives the file appearing late, and being truncated, rewritten or replaced (it
    starts again from the top): the last bytes read are kept as a fingerprint, so a file
    truncated and rewritten past the old offset is noticed too, which a size check alone
    misses."""
    path = Path(path)
    yield tail_lines(path, from_end_lines)
    offset, inode, mark = 0, None, b""
    try:
        st = path.stat()
        offset, inode = st.st_size, st.st_ino
        with open(path, "rb") as fh:
            fh.seek(max(0, offset - _MARK))
            mark = fh.read(_MARK)
    except FileNotFoundError:
        pass
    pending = b""
    while not stop():
        try:
            st = path.stat()
        except FileNotFoundError:
            yield []
            time.sleep(interval)
            continue
        if st.st_ino != inode or st.st_size < offset:  # replaced or truncated
            offset, inode, mark, pending = 0, st.st_ino, b"", b""
        if st.st_size > offset:
            with open(path, "rb") as fh:
                if mark:
                    fh.seek(offset - len(mark))
                    if fh.read(len(mark)) != mark:  # rewritten under us: start over
                        offset, mark, pending = 0, b"", b""
                fh.seek(offset)
                chunk = fh.read(1 << 20)
            offset += len(chunk)
            mark = (mark + chunk)[-_MARK:]
            pending += chunk
            *complete, pending = pending.split(b"\n")
            yield [raw.decode("utf-8", errors="replace") for raw in complete]
            continue
        yield []
        time.sleep(interval)


_MARK = 64
