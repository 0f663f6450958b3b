"""Issue 22, item 3: `data fetch` reads only what it should. `--url file:///dev/zero` wrote
3.7 GB in 15 s and an endless HTTP body the same; a killed fetch left its partial download;
a FIFO `--url` hung; `--url ''` silently fetched the default; `http://[::1` was a
ValueError. A real HTTP server on 127.0.0.1 (its endless body stops by itself after a few
seconds) and real `dlscale` processes."""

from __future__ import annotations

import http.server
import os
import signal
import subprocess
import threading
import time

import pytest
from test_datasets import cifar_archive, server  # noqa: F401  (the fixture)

from conftest import BIN, HANG_S, dlscale
from dlscale.engine.datasets import CIFAR10

ENDLESS_S = 20.0  # the endless body stops by itself after this long


@pytest.fixture
def endless():
    """A server whose /endless body never ends (until ENDLESS_S or the client goes), and
    whose /huge announces a Content-Length beyond the archive's size."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            if self.path == "/huge":
                self.send_header("Content-Length", str(CIFAR10.size + 1))
                self.end_headers()
                return
            self.end_headers()
            chunk = b"\0" * (1 << 16)
            slow = self.path == "/slow"
            deadline = time.monotonic() + ENDLESS_S
            try:
                while time.monotonic() < deadline:
                    self.wfile.write(chunk)
                    if slow:
                        time.sleep(0.05)
            except OSError:
                pass  # the client went

        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def _fetch(dest, url, *more, check=None):
    return dlscale("data", "fetch", "cifar10", "--dir", str(dest), "--url", url, *more, check=check)


@pytest.mark.parametrize("path", ["/endless", "/huge"])
def test_a_body_beyond_the_archives_size_is_cut_and_nothing_kept(tmp_path, endless, path):
    dest = tmp_path / "d"
    started = time.monotonic()
    proc = _fetch(dest, endless + path, check=1)
    assert time.monotonic() - started < ENDLESS_S  # cut at the bound, not at the server's end
    assert f"more than {CIFAR10.size:,} bytes" in proc.stderr and "Traceback" not in proc.stderr
    assert not dest.exists()  # nothing kept, not even the folder it made


def test_file_urls_must_name_a_regular_file_within_the_bound(tmp_path):
    dest = tmp_path / "d"
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    (tmp_path / "zero-link").symlink_to("/dev/zero")
    big = tmp_path / "big.tar.gz"
    with open(big, "wb") as fh:
        fh.truncate(CIFAR10.size + 1)  # sparse: nothing is written to make it
    for target, says in (
        ("/dev/zero", "not a regular file"),
        (str(tmp_path / "zero-link"), "not a regular file"),
        (str(fifo), "not a regular file"),
        (str(tmp_path), "not a regular file"),
        (str(big), "more than"),
    ):
        url = f"file://{target}"
        proc = dlscale("data", "fetch", "cifar10", "--dir", str(dest), "--url", url, timeout=HANG_S)
        assert proc.returncode in (1, 2) and says in proc.stderr, (target, proc.stderr)
        assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr
        assert not dest.exists() or list(dest.iterdir()) == []


@pytest.mark.parametrize(
    "url, says",
    [
        ("", "--url '': empty"),
        ("  ", "empty"),
        ("http://[::1", "not a usable URL"),
        ("http://[::1]:port/x", "not a usable URL"),
        ("http://127.0.0.1:99999/x", "not a usable URL"),
        ("http:///x", "names no host"),
        ("file://elsewhere/x", "a file URL names a file on this machine"),
    ],
)
def test_urls_that_cannot_be_fetched_exit_2_with_a_sentence(tmp_path, url, says):
    proc = _fetch(tmp_path / "d", url, check=2)
    assert says in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "d").exists()


def _start_fetch(dest, url):
    proc = subprocess.Popen(
        [str(BIN / "dlscale"), "data", "fetch", "cifar10", "--dir", str(dest), "--url", url],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + HANG_S
    while not any(p.stat().st_size for p in dest.glob(".cifar10-*.download")):
        assert time.monotonic() < deadline and proc.poll() is None, proc.stderr
        time.sleep(0.02)
    return proc


def test_a_fetch_stopped_by_sigterm_removes_its_partial_download(tmp_path, endless):
    dest = tmp_path / "d"
    dest.mkdir()
    proc = _start_fetch(dest, endless + "/slow")
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=HANG_S)
    assert proc.returncode == 128 + signal.SIGTERM and "Traceback" not in err
    assert list(dest.iterdir()) == []


def test_a_fetch_killed_outright_leaves_a_download_the_next_fetch_removes(
    tmp_path,
    endless,
    server,  # noqa: F811
):
    root, url, _ = server
    md5 = cifar_archive(root / "c.tar.gz", tmp_path)
    dest = tmp_path / "d"
    dest.mkdir()
    (dest / ".cifar10-mine.txt").write_text("the user's")  # not a download: never removed
    proc = _start_fetch(dest, endless + "/slow")
    proc.kill()
    proc.communicate(timeout=HANG_S)
    assert list(dest.glob(".cifar10-*.download"))
    _fetch(dest, f"{url}/c.tar.gz", "--md5", md5, check=0)
    assert sorted(p.name for p in dest.iterdir()) == [".cifar10-mine.txt", "cifar-10-batches-py"]
