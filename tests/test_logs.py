"""The log reader: tails of huge files in one block, bounded reads however few line breaks
a log has, progress-bar redraws (\\r) as lines, and a follower that survives a file
appearing late, being truncated, and being replaced."""

import threading
import time

import pytest

from conftest import HANG_S, REPO
from dlscale.engine.tracking.logs import (
    CUT,
    MAX_LINE,
    REASON_BYTES,
    failure_reason,
    follow_chunks,
    follow_lines,
    tail_lines,
)


def test_tail_of_a_large_log_reads_only_its_end(tmp_path, monkeypatch):
    path = tmp_path / "big.log"
    with open(path, "wb") as fh:
        fh.truncate(200 * 1024 * 1024)  # 200 MB of holes: reading it all would show
        fh.seek(0, 2)
        fh.write(b"".join(b"line %d\n" % i for i in range(100)))
    read = []
    real_open = open

    def counting_open(*a, **k):
        f = real_open(*a, **k)
        orig = f.read
        f.read = lambda n=-1: read.append(n) or orig(n)
        return f

    monkeypatch.setattr("builtins.open", counting_open)
    assert tail_lines(path, 3) == ["line 97", "line 98", "line 99"]
    assert sum(read) <= 64 * 1024


def test_failure_reason_prefers_the_trainers_line(tmp_path):
    log = tmp_path / "run.log"
    log.write_text(
        "starting\ndlscale-torch-ddp: error: rank 1: TrainerError: boom\n"
        "torch.distributed.elastic... ChildFailedError\n  more noise\n"
    )
    reason = failure_reason(log)
    assert reason.splitlines()[0] == "dlscale-torch-ddp: error: rank 1: TrainerError: boom"
    assert reason.splitlines()[-1] == "  |   more noise"
    assert failure_reason(tmp_path / "missing.log").startswith("no log at")


def test_follow_survives_late_file_truncation_and_replacement(tmp_path):
    path = tmp_path / "run.log"
    seen = []
    stop = threading.Event()
    t = threading.Thread(
        daemon=True, target=lambda: seen.extend(follow_lines(path, interval=0.05, stop=stop.is_set))
    )
    t.start()

    def wait_for(line):
        deadline = time.time() + HANG_S
        while line not in seen and time.time() < deadline:
            time.sleep(0.02)
        assert line in seen, seen

    time.sleep(0.2)
    path.write_text("first\n")  # appears late
    wait_for("first")
    with open(path, "a") as fh:
        fh.write("sec")
        fh.flush()
        time.sleep(0.2)
        fh.write("ond\n")  # a line written in two pieces arrives whole
    wait_for("second")
    path.write_text("after truncate\n")  # truncated and rewritten
    wait_for("after truncate")
    other = tmp_path / "new.log"
    other.write_text("rotated in\n")
    other.replace(path)  # replaced (log rotation)
    wait_for("rotated in")
    stop.set()
    t.join(5)
    assert "sec" not in seen and seen.count("second") == 1


# --- logs with few line breaks: linear, bounded, \r as a line break (issue 11) ------------


def counting_reads(monkeypatch) -> list[int]:
    """The bytes each read() of a log returns, however the reader asks."""
    got = []
    real_open = open

    def counting_open(*a, **k):
        f = real_open(*a, **k)
        orig = f.read
        f.read = lambda n=-1: (lambda b: got.append(len(b)) or b)(orig(n))
        return f

    monkeypatch.setattr("builtins.open", counting_open)
    return got


def sparse(path, size, tail=b""):
    """`size` bytes of holes (no line break in them), then `tail`."""
    with open(path, "wb") as fh:
        fh.truncate(size)
        fh.seek(0, 2)
        fh.write(tail)
    return path


def test_a_log_without_line_breaks_costs_a_bounded_read(tmp_path, monkeypatch):
    path = sparse(tmp_path / "run.log", 4 << 20, b"x" * 10000 + b" 99% done")
    reads = counting_reads(monkeypatch)
    (line,) = tail_lines(path, 2)
    # the line's start is too far back to read: its end is shown, cut, marked as such
    assert line == "\u2026" + ("x" * 10000 + " 99% done")[-MAX_LINE:]
    assert sum(reads) <= 64 * 1024 + 2 * MAX_LINE
    reads.clear()
    reason = failure_reason(path)
    assert reason.splitlines()[0].endswith(" 99% done")
    assert sum(reads) <= REASON_BYTES + 64 * 1024 + 200 * MAX_LINE


def test_carriage_returns_end_lines_like_newlines(tmp_path, monkeypatch):
    bar = b"".join(b"\r%3d%%|%-10s| %d/100" % (i, b"#" * (i // 10), i) for i in range(101))
    path = sparse(tmp_path / "run.log", 4 << 20, b"epoch 1\n" + bar * 2000 + b"\nDone\r\n")
    reads = counting_reads(monkeypatch)
    assert tail_lines(path, 3) == [" 99%|######### | 99/100", "100%|##########| 100/100", "Done"]
    assert sum(reads) <= 64 * 1024  # one block holds plenty of redraws
    small = tmp_path / "crlf.log"
    small.write_bytes(b"a\r\nb\r\n\r\nc\rd\ne")
    for block in (1, 2, 3, 5, 64 * 1024):  # a \r\n split between two blocks is one break
        assert tail_lines(small, 10, block=block) == ["a", "b", "", "c", "d", "e"]
        assert tail_lines(small, 2, block=block) == ["d", "e"]


def test_long_lines_are_cut_and_short_ones_kept_whole(tmp_path):
    path = tmp_path / "run.log"
    path.write_text("first\n" + "y" * (MAX_LINE + 50) + "\n" + "last\n")
    assert tail_lines(path, 3) == ["first", "y" * MAX_LINE + CUT, "last"]
    assert tail_lines(path, 1) == ["last"]


def test_the_trainers_error_line_is_found_behind_a_wall_of_progress(tmp_path):
    path = tmp_path / "run.log"
    path.write_bytes(
        b"dlscale-torch-ddp: error: rank 0: CUDA out of memory\n"
        + b"\r 50%|#####     | 5/10" * 50000
        + b"\nKilled\n"
    )
    reason = failure_reason(path).splitlines()
    assert reason[0] == "dlscale-torch-ddp: error: rank 0: CUDA out of memory"
    assert reason[-2:] == ["  |  50%|#####     | 5/10", "  | Killed"]


def test_follow_shows_progress_redraws_and_cuts_a_line_that_never_ends(tmp_path):
    path = tmp_path / "run.log"
    path.write_text("")
    stop = threading.Event()
    chunks = follow_chunks(path, interval=0.02, stop=stop.is_set)
    assert next(chunks) == [] and next(chunks) == []  # the tail, then following from its end
    with open(path, "ab") as fh:
        fh.write(b"\r 10%\r 20%\r")
        fh.flush()
        seen = next(c for c in chunks if c)
        assert seen == ["", " 10%"]  # " 20%" is complete only once what follows \r is known
        fh.write(b"\n" + b"z" * (3 * MAX_LINE))
        fh.flush()
        got = []
        while len(got) < 2:
            got += next(chunks)
        assert got == [" 20%", "z" * MAX_LINE + CUT]  # shown at once, cut
        fh.write(b"z" * (1 << 20) + b"\rafter\n")  # the rest of that line is skipped
        fh.flush()
        got = []
        while not got:
            got += next(chunks)
        assert got == ["after"]
    stop.set()


@pytest.mark.parametrize(
    "log,cause",
    [
        (
            "srun-no-torch.log",
            "python3: Error while finding module specification for 'torch.distributed.run' "
            "(ModuleNotFoundError: No module named 'torch')",
        ),
        (
            "torchrun-user-error.log",
            "[rank1]: ValueError: --seq-len 4096 is longer than the model's context (1024)",
        ),
        ("torchrun-gloo-abort.log", "terminate called without an active exception"),
    ],
)
def test_a_scripts_failure_is_named_by_its_cause_not_the_launchers_last_words(log, cause):
    """Recorded logs of scripts that are not dlscale's (tests/fixtures/failed-logs): the
    reason is the first exception or crash, not srun's 'Terminating StepId' nor torchrun's
    ChildFailedError; the log's last lines follow it."""
    path = REPO / "tests" / "fixtures" / "failed-logs" / log
    head, *context = failure_reason(path).splitlines()
    assert head.endswith(cause), head
    last = [x for x in path.read_text().splitlines() if x.strip()][-1]
    assert context[-1] == "  | " + last


def test_with_no_error_line_the_reason_is_the_logs_last_line(tmp_path):
    log = tmp_path / "run.log"
    log.write_text("step 1\nWarning: slow\nstep 2 (Errors: 0)\nkilled by the user\n")
    assert failure_reason(log).splitlines()[0] == "killed by the user"
