"""Reading run logs: the last lines of a file of any size, and following it as it grows."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from ..io.reading import open_regular
from ..io.text import printable

_TRAINER_ERROR = re.compile(rb"dlscale-[\w-]+: error: [^\r\n]*")
# Where a script is not dlscale's, the line that says what went wrong: a Python exception
# (`ValueError: ...`, also inside a launcher's words: `(ModuleNotFoundError: No module
# named 'torch')`) or the C runtime's last words. The first one in the log's tail is the
# cause: a rank's error comes before the others' "Connection closed by peer" and the
# launcher's own traceback (ChildFailedError, which only says a rank failed).
_SCRIPT_ERROR = re.compile(
    r"\b(?!ChildFailedError\b)[A-Z]\w*(?:Error|Exception)\b: \S"
    r"|^terminate called|Segmentation fault|\bout of memory\b|\boom[-_]kill"
)
# The words a full disk (or quota) is reported in: the C library's, Python's and the
# shell's. Where a failed run's log says so, that is its reason, before any other error
# (the disk full is why the trainer's checkpoint, or its data loader, failed).
_DISK_FULL = re.compile(
    r"No space left on device|\bENOSPC\b|\[Errno 28\]|Disk quota exceeded|\bEDQUOT\b"
    r"|\[Errno 122\]"
)
# A line ends at \n, \r\n or a lone \r: progress bars (tqdm, Keras) redraw themselves with
# \r, and each redraw is shown as a line rather than one line that never ends.
_BREAK = re.compile(rb"\r\n|\r|\n")
MAX_LINE = 4096  # characters of a line shown; a longer one is cut (and marked)
CUT = " \u2026"  # marks where a line was cut
REASON_BYTES = 4 << 20  # how far from the end a failed run's error line is looked for
REASON_LINES = 200  # how many last lines a script's own error line is looked for in


# No such file, or no such folder to hold it (a run folder not laid out yet, or
# something else in its place): the log is not there.
ABSENT = (FileNotFoundError, NotADirectoryError)


def _show(raw: bytes) -> str:
    """A line of job output as it may reach a terminal: cut, every control character
    made visible (text.printable)."""
    text = raw.decode("utf-8", errors="replace")
    return printable(text if len(text) <= MAX_LINE else text[:MAX_LINE] + CUT)


def _read_back(fh, breaks_wanted: int, block: int, budget: int) -> tuple[bytes, bool]:
    """The file's last bytes, read backwards block by block until they hold more than
    `breaks_wanted` line breaks or `budget` bytes: each block is read and counted once,
    so the cost is linear in what is read and bounded whatever the log holds. Returns the
    bytes and whether they start at the top of the file."""
    pos = fh.seek(0, os.SEEK_END)
    blocks: list[bytes] = []
    breaks = size = 0
    while pos > 0 and breaks <= breaks_wanted and size < budget:
        step = min(block, pos, budget - size)
        pos -= step
        fh.seek(pos)
        chunk = fh.read(step)
        breaks += chunk.count(b"\n") + chunk.count(b"\r") - chunk.count(b"\r\n")
        if blocks and chunk.endswith(b"\r") and blocks[-1].startswith(b"\n"):
            breaks -= 1  # one \r\n split across two blocks
        blocks.append(chunk)
        size += len(chunk)
    return b"".join(reversed(blocks)), pos == 0


def tail_lines(path: str | Path, n: int = 20, block: int = 64 * 1024) -> list[str]:
    """The last `n` lines, read backwards from the end: a 1 GB log costs one block when its
    lines are short, and at most a block and `n` long lines' worth when they are not (a
    line longer than MAX_LINE is cut; the first line shown starts with an ellipsis when
    even that did not reach its start). A log that is not a regular file of the run's own
    (a link, a FIFO, a folder) raises files.NotRegularFile, an OSError, and is not read."""
    if n <= 0:
        return []
    try:
        with open_regular(path, follow=False) as fh:
            data, whole = _read_back(fh, n, block, block + n * MAX_LINE)
    except ABSENT:
        return []
    parts = _BREAK.split(data)
    if parts[-1] == b"":  # the file ends with a line break (or is empty)
        parts.pop()
    head = []
    if not whole and parts:
        first = parts.pop(0)  # a line whose start was not read
        if len(parts) < n:
            # its end, the most recent output (a progress bar's last state)
            head = ["\u2026" + printable(first.decode("utf-8", errors="replace")[-MAX_LINE:])]
    return (head + [_show(raw) for raw in parts])[-n:]


def failure_reason(path: str | Path, context: int = 5) -> str:
    """One line saying why a run failed, followed by the last lines of its log. The line is
    "the disk was full (...)" where one of its last REASON_LINES lines says so; else the
    trainer's own error line where it printed one in the last REASON_BYTES of its log;
    else the first exception or crash in its last REASON_LINES lines (a script that is not
    dlscale's); else its last line."""
    try:
        with open_regular(path, follow=False) as fh:
            size = fh.seek(0, os.SEEK_END)
            fh.seek(max(0, size - REASON_BYTES))
            end = fh.read(REASON_BYTES)
        lines = [line for line in tail_lines(path, REASON_LINES) if line.strip()]
    except ABSENT:
        return f"no log at {path}"
    except OSError as exc:  # not the run's own regular file: not read
        return f"its log was not read: {printable(str(exc))}"
    tail = lines[-context:]
    errors = _TRAINER_ERROR.findall(end)
    full = next((line for line in reversed(lines) if _DISK_FULL.search(line)), None)
    if full is not None:
        head = f"the disk was full ({full.strip()})"
    elif errors:
        head = _show(errors[-1])
    else:
        cause = next((line for line in lines if _SCRIPT_ERROR.search(line)), None)
        head = cause or (tail[-1] if tail else "the job failed without output")
    return "\n".join([head, *("  | " + line for line in tail)])


def follow_lines(
    path: str | Path,
    from_end_lines: int = 20,
    interval: float = 0.5,
    stop: Callable[[], bool] = lambda: False,
) -> Iterator[str]:
    """Yield the last lines, then new lines as they are written (see follow_chunks)."""
    for chunk in follow_chunks(path, from_end_lines, interval, stop):
        yield from chunk


def follow_chunks(
    path: str | Path,
    from_end_lines: int = 20,
    interval: float = 0.5,
    stop: Callable[[], bool] = lambda: False,
) -> Iterator[list[str]]:
    """The last lines as one list, then each read's new lines as a list, and an empty list
    whenever a poll found nothing (so a viewer can flush and check for cancellation).
    Lines end as tail_lines' do (\\n, \\r\\n or \\r) and are cut at MAX_LINE likewise.

    Survives the file appearing late, and being truncated, rewritten or replaced (it
    starts again from the top): the last bytes read are kept as a fingerprint, so a file
    truncated and rewritten past the old offset is noticed too, which a size check alone
    misses."""
    path = Path(path)
    try:
        yield tail_lines(path, from_end_lines)
    except OSError as exc:  # not the run's own regular file: said once, not read
        yield [f"dlscale: {printable(str(exc))}; not shown"]
        return
    offset, inode, mark, cut = 0, None, b"", False
    try:
        with open_regular(path, follow=False) as fh:
            st = os.fstat(fh.fileno())
            offset, inode = st.st_size, st.st_ino
            fh.seek(max(0, offset - _MARK))
            mark = fh.read(_MARK)
    except OSError:
        pass
    pending = b""
    while not stop():
        try:
            st = path.lstat()
        except ABSENT:
            yield []
            time.sleep(interval)
            continue
        if st.st_ino != inode or st.st_size < offset:  # replaced or truncated
            offset, inode, mark, pending, cut = 0, st.st_ino, b"", b"", False
        if st.st_size > offset:
            try:
                fh = open_regular(path, follow=False)
            except ABSENT:
                continue
            except OSError as exc:
                yield [f"dlscale: {printable(str(exc))}; not shown"]
                return
            with fh:
                if mark:
                    fh.seek(offset - len(mark))
                    if fh.read(len(mark)) != mark:  # rewritten under us: start over
                        offset, mark, pending, cut = 0, b"", b"", False
                fh.seek(offset)
                chunk = fh.read(1 << 20)
            offset += len(chunk)
            mark = (mark + chunk)[-_MARK:]
            lines, pending, cut = _complete_lines(pending + chunk, cut)
            yield lines
            continue
        yield []
        time.sleep(interval)


_MARK = 64


def _complete_lines(pending: bytes, cut: bool) -> tuple[list[str], bytes, bool]:
    """The whole lines in `pending`, what is left of the unfinished one, and whether that
    one was already shown cut. A line that grows past MAX_LINE is shown cut at once and the
    rest of it skipped, so memory stays bounded whatever a job writes."""
    hold = b""
    if pending.endswith(b"\r"):  # perhaps the first half of \r\n: decide with the next read
        pending, hold = pending[:-1], b"\r"
    *complete, rest = _BREAK.split(pending)
    if cut and complete:  # the end of the line shown cut
        complete, cut = complete[1:], False
    lines = [_show(raw) for raw in complete]
    if cut:
        rest = b""
    elif len(rest) > MAX_LINE:
        lines.append(_show(rest[:MAX_LINE]) + CUT)
        rest, cut = b"", True
    return lines, rest + hold, cut


def page(path: str | Path) -> int:
    """Show a log in the user's pager ($PAGER, else `less`), from the terminal the caller
    hands over (the TUI suspends itself first). The pager is run as an argument list:
    $PAGER is split as a shell would (`less -R`), the path is one argument. Returns the
    pager's exit status, 127 when it cannot be started."""
    import shlex
    import subprocess

    argv = shlex.split(os.environ.get("PAGER") or "less") or ["less"]
    try:
        return subprocess.run([*argv, str(path)], check=False).returncode
    except OSError:
        return 127
