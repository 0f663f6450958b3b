"""The log reader: tails of huge files in one block, and a follower that survives a file
appearing late, being truncated, and being replaced."""
import threading
import time

from dlscale.engine.logs import failure_reason, follow, tail_lines


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
    log.write_text("starting\ndlscale-torch-ddp: error: rank 1: TrainerError: boom\n"
                   "torch.distributed.elastic... ChildFailedError\n  more noise\n")
    reason = failure_reason(log)
    assert reason.splitlines()[0] == "dlscale-torch-ddp: error: rank 1: TrainerError: boom"
    assert reason.splitlines()[-1] == "  |   more noise"
    assert failure_reason(tmp_path / "missing.log").startswith("no log at")


def test_follow_survives_late_file_truncation_and_replacement(tmp_path):
    path = tmp_path / "run.log"
    seen = []
    stop = threading.Event()
    t = threading.Thread(daemon=True, target=lambda: seen.extend(follow(path, interval=0.05,
                                                           stop=stop.is_set)))
    t.start()

    def wait_for(line):
        deadline = time.time() + 10
        while line not in seen and time.time() < deadline:
            time.sleep(0.02)
        assert line in seen, seen

    time.sleep(0.2)
    path.write_text("first\n")              # appears late
    wait_for("first")
    with open(path, "a") as fh:
        fh.write("sec")
        fh.flush()
        time.sleep(0.2)
        fh.write("ond\n")                  # a line written in two pieces arrives whole
    wait_for("second")
    path.write_text("after truncate\n")     # truncated and rewritten
    wait_for("after truncate")
    other = tmp_path / "new.log"
    other.write_text("rotated in\n")
    other.replace(path)                     # replaced (log rotation)
    wait_for("rotated in")
    stop.set()
    t.join(5)
    assert "sec" not in seen and seen.count("second") == 1
