"""Bounded inputs and plans, and names, by class (issue 33): every JSON dlscale reads is
bounded in depth and size (a bundle's members, a report's manifest, run.json), a spec's
matrix is counted before anything is built, a list of problems is a few lines and "and N
more", special files are refused before they are opened (bundles and kernel files too), a
download has a total deadline, a name that is not UTF-8 is a sentence, and a link where a
run folder belongs is named, never followed. Each case: exit 2 (1 for the world's faults),
a sentence, no traceback, no hang, the store as it was."""

from __future__ import annotations

import http.server
import json
import os
import shutil
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from test_bad_input import invoke
from test_bundles import _dump, _first, _members, _write

from conftest import HANG_S, dlscale, write_spec
from dlscale.engine.io.reading import JSON_DEPTH, JSONError, load_json
from tui_text import recorded_study

pytestmark = pytest.mark.timeout(600)

DEEP = b"[" * 100_000 + b"]" * 100_000


def here(capsys, *argv: str) -> SimpleNamespace:
    """`dlscale ARGV` in this process (a real command costs a second a call)."""
    code, out, err = invoke(capsys, *argv)
    return SimpleNamespace(returncode=code, stdout=out, stderr=err)


def sentence(proc, code: int, *says: str) -> None:
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    assert "internal error" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    for s in says:
        assert s in proc.stderr, (s, proc.stderr)


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    base = tmp_path_factory.mktemp("bounds")
    home = base / "home"
    recorded_study(home)
    out = base / "b.tar.gz"
    dlscale("export", "bundle", "-e", "quickstart", "--out", str(out), "--site", "there", home=home)
    return out


# --- JSON ----------------------------------------------------------------------------------


def test_json_is_bounded_in_depth_and_size():
    assert load_json(b"[" * JSON_DEPTH + b"]" * JSON_DEPTH) is not None
    for text, says in ((DEEP, "nested over"), (b"[1]" + b" " * 100, "larger than")):
        with pytest.raises(JSONError, match=says):
            load_json(text, limit=64 if says == "larger than" else 1 << 20)


def test_deep_json_anywhere_in_a_bundle_is_refused_whole(tmp_path, bundle, capsys, monkeypatch):
    home = tmp_path / "home"
    monkeypatch.setenv("DLSCALE_HOME", str(home))
    recorded_study(home)
    before = _dump(home)
    m = _members(bundle)
    run_json = _first(m, "run.json")
    cases = {
        "manifest": _write(tmp_path / "m.tgz", {**m, "manifest.json": DEEP}, reseal=False),
        "run.json": _write(tmp_path / "r.tgz", {**m, run_json: DEEP}),
        "experiment.json": _write(tmp_path / "e.tgz", {**m, "experiment.json": DEEP}),
    }
    spec = str(write_spec(tmp_path / "s.toml"))
    for what, path in cases.items():
        sentence(here(capsys, "import", str(path)), 2, "nested over")
        sentence(here(capsys, "check", spec, "--baseline", str(path)), 2, "nested over")
        assert _dump(home) == before, what


def test_a_bundles_spec_is_held_to_the_bounds_a_rebuild_reads_it_with(
    tmp_path, bundle, capsys, monkeypatch
):
    """A spec nested 5,000 deep would be accepted and then lost by `store rebuild`."""
    m = _members(bundle)
    exp = json.loads(m["experiment.json"])
    exp["spec_text"] = "a = " + "[" * 5000 + "]" * 5000 + "\n"
    path = _write(tmp_path / "deep-spec.tgz", {**m, "experiment.json": json.dumps(exp).encode()})
    monkeypatch.setenv("DLSCALE_HOME", str(tmp_path / "h"))
    sentence(here(capsys, "import", str(path)), 2, "spec_text", "nested over")


def test_a_deep_report_manifest_is_not_dlscales(tmp_path, capsys, monkeypatch):
    home = tmp_path / "home"
    monkeypatch.setenv("DLSCALE_HOME", str(home))
    name = recorded_study(home)
    out = tmp_path / "report"
    out.mkdir()
    (out / ".dlscale-report.json").write_bytes(DEEP)
    sentence(here(capsys, "report", "-e", name, "--out", str(out)), 2, "not a manifest")


# --- plans ---------------------------------------------------------------------------------


@pytest.mark.torch  # the count is checked before, the plan's other checks after
def test_a_spec_is_counted_before_anything_is_built(tmp_path, home):
    batches = ", ".join(str(b) for b in range(1, 65_537))
    scales = ", ".join(f'"{n}x1"' for n in range(1, 2001))
    huge = write_spec(tmp_path / "huge.toml", scales=scales, experiment="repetitions = 100")
    huge.write_text(
        huge.read_text()
        .replace("per_device_batch = [8]", f"per_device_batch = [{batches}]")
        .replace("repetitions = 1\n", "")
    )
    proc = dlscale("plan", str(huge), timeout=HANG_S)
    sentence(proc, 2, "2,000 scales", "65,536 per_device_batch", "100 repetitions", "runs, over")
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    # 2,000 scales the local backend refuses: a screen of them, then how many more
    many = write_spec(tmp_path / "many.toml", scales=scales)
    proc = dlscale("plan", str(many), timeout=HANG_S)
    sentence(proc, 2, "needs 13 nodes", "and 1987 more problem(s)")
    assert len(proc.stderr.strip().splitlines()) <= 13, proc.stderr


# --- special files -------------------------------------------------------------------------


def test_special_files_are_refused_before_they_are_opened(tmp_path, home):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    spec = write_spec(tmp_path / "s.toml")
    cases = [
        (["import", str(fifo)], "is a FIFO, not a regular file"),
        (["import", "/dev/zero"], "is a character device, not a regular file"),
        (["plan", str(fifo)], "is a FIFO, not a regular file"),
        (["check", str(spec), "--baseline", str(fifo)], "nor a bundle file"),
        (["doctor", "--profile", str(fifo)], "is a FIFO, not a regular file"),
    ]
    if Path("/proc/kmsg").exists():  # waits for the kernel, as root: a hang before
        cases.append((["plan", "/proc/kmsg"], "a file of the kernel's"))
    for argv, says in cases:
        sentence(dlscale(*argv, timeout=HANG_S), 2, says)  # a FIFO opened would wait for ever


# --- downloads -----------------------------------------------------------------------------


class _Trickle(http.server.BaseHTTPRequestHandler):
    """A server that sends a byte every half second, for ever."""

    def do_GET(self):  # noqa: N802 (http.server's name)
        self.send_response(200)
        self.send_header("Content-Length", "100000")
        self.end_headers()
        try:
            while True:
                self.wfile.write(b"x")
                self.wfile.flush()
                time.sleep(0.5)
        except OSError:
            return

    def log_message(self, *args):
        pass


def test_a_download_has_a_total_deadline(tmp_path, home):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Trickle)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/cifar.tgz"
        started = time.monotonic()
        argv = ["data", "fetch", "cifar10", "--dir", str(tmp_path / "d"), "--url", url]
        proc = dlscale(*argv, "--timeout", "2", timeout=60)
        sentence(proc, 1, "not downloaded within --timeout 2 s")
        assert time.monotonic() - started < 50  # every read answers: only the deadline ends it
        assert not (tmp_path / "d").exists()  # nothing kept, not even the folder it made
    finally:
        server.shutdown()


# --- names ---------------------------------------------------------------------------------


def test_a_name_that_is_not_utf8_is_a_sentence(tmp_path, capsys, monkeypatch):
    home = tmp_path / "home"
    monkeypatch.setenv("DLSCALE_HOME", str(home))
    recorded_study(home)
    name = os.fsdecode(b"spec-\xff.toml")
    shutil.copy(write_spec(tmp_path / "s.toml"), tmp_path / name)
    for argv in (["run", str(tmp_path / name)], ["logs", os.fsdecode(b"\xff\xfe")]):
        code, out, err = invoke(capsys, *argv)
        assert code == 2 and "not UTF-8" in err and len(err.strip().splitlines()) == 1, err
        assert "\\xff" in err  # named by its bytes
    monkeypatch.setenv("DLSCALE_HOME", os.fsdecode(b"/tmp/h\xff"))
    code, out, err = invoke(capsys, "status")
    assert code == 2 and "DLSCALE_HOME" in err, err


def test_a_file_name_that_is_not_utf8_in_a_folder_is_shown_by_its_bytes(tmp_path, capsys):
    root = tmp_path / "imagenet"
    (root / "train" / os.fsdecode(b"n0\xff")).mkdir(parents=True)
    code, out, err = invoke(capsys, "data", "check", "imagenet", str(root), "--classes", "1")
    assert code == 2 and "internal error" not in err, err


def test_a_link_where_a_run_folder_belongs_is_named_not_followed(tmp_path, bundle):
    home = tmp_path / "home"
    dlscale("import", str(bundle), home=home, check=0)
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "mine.txt").write_text("the user's\n")
    folder = next((home / "runs").iterdir())
    shutil.rmtree(folder)
    folder.symlink_to(victim)
    # a later bundle of the same site that changes that run: its folder is written again
    m = _members(bundle)
    local = {json.loads(m[n])["run_id"]: n for n in m if n.endswith("run.json")}
    changed = {}
    for member in local.values():
        row = json.loads(m[member])
        row["reason"] = "changed at the site"
        changed[member] = json.dumps(row).encode()
    later = _write(tmp_path / "later.tgz", {**m, **changed})
    sentence(dlscale("import", str(later), home=home), 2, str(folder), "is a link")
    proc = dlscale("store", "rebuild", "--force", home=home)
    sentence(proc, 0)
    assert f"{folder}" in proc.stdout and "is a link" in proc.stdout, proc.stdout
    assert [p.name for p in victim.iterdir()] == ["mine.txt"]
    assert folder.is_symlink()


# --- rebuild -------------------------------------------------------------------------------


def test_a_run_that_was_imported_is_rebuilt(tmp_path, bundle):
    """Its spec is another site's: it need not validate here (a framework unknown here) to
    keep its runs when the store is rebuilt from the folders."""
    m = _members(bundle)
    exp = json.loads(m["experiment.json"])
    exp["spec_text"] = exp["spec_text"].replace('"pytorch-ddp"', '"their-own-framework"')
    assert "their-own-framework" in exp["spec_text"]
    path = _write(tmp_path / "theirs.tgz", {**m, "experiment.json": json.dumps(exp).encode()})
    home = tmp_path / "home"
    dlscale("import", str(path), home=home, check=0)
    rows, _ = _dump(home)
    before = sorted(r for r in rows if r.startswith('INSERT INTO "runs"'))
    proc = dlscale("store", "rebuild", "--force", home=home, check=0)
    assert "not recovered" not in proc.stdout, proc.stdout
    from dlscale.engine.tracking.store import Store

    store = Store(home)
    try:
        kept = {r["run_id"]: r["state"] for r in store.runs()}
        assert len(kept) == len(before) and set(kept.values()) == {"COMPLETED"}, kept
        assert store.experiments()[0]["spec_text"] == exp["spec_text"]
    finally:
        store.close()
