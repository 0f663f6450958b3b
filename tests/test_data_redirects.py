"""`dlscale data fetch` against a real HTTP server on 127.0.0.1 that redirects: every hop
must be http or https (ftp and file are refused, naming the hop, before anything is opened
there), and an --md5 that is not one is refused before any download."""

import http.server
import socket
import threading

import pytest
from test_datasets import cifar_archive

from conftest import dlscale
from dlscale.engine import datasets
from dlscale.engine.errors import UserError


@pytest.fixture
def redirects(tmp_path):
    """An HTTP server whose paths redirect as `routes` says ({path: (code, Location)}),
    serving tmp_path/www otherwise; and a TCP listener standing in for an FTP server,
    which counts the connections it gets (and closes them at once)."""
    root = tmp_path / "www"
    root.mkdir()
    routes, hits, ftp_calls = {}, [], []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *a, **k):
            super().__init__(*a, directory=str(root), **k)

        def do_GET(self):
            hits.append(self.path)
            if self.path in routes:
                code, where = routes[self.path]
                self.send_response(code)
                self.send_header("Location", where)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            super().do_GET()

        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    ftp = socket.create_server(("127.0.0.1", 0))
    ftp.settimeout(0.2)
    stop = threading.Event()

    def accept():
        while not stop.is_set():
            try:
                conn, _ = ftp.accept()
            except OSError:
                continue
            ftp_calls.append(1)
            conn.close()

    threading.Thread(target=accept, daemon=True).start()
    yield (
        root,
        f"http://127.0.0.1:{httpd.server_address[1]}",
        routes,
        hits,
        f"ftp://127.0.0.1:{ftp.getsockname()[1]}",
        ftp_calls,
    )
    stop.set()
    httpd.shutdown()
    httpd.server_close()
    ftp.close()


def test_a_redirect_to_ftp_is_refused_naming_the_hop(tmp_path, redirects, home):
    root, url, routes, hits, ftp_url, ftp_calls = redirects
    md5 = cifar_archive(root / "c.tar.gz", tmp_path)
    routes["/start"] = (302, "/next")  # an http hop is followed
    routes["/next"] = (302, f"{ftp_url}/c.tar.gz")  # the ftp hop is not
    dest = tmp_path / "data"
    proc = dlscale(
        "data",
        "fetch",
        "cifar10",
        "--dir",
        str(dest),
        "--url",
        f"{url}/start",
        "--md5",
        md5,
        check=1,
    )
    assert f"{url}/next: the server redirects (302) to '{ftp_url}/c.tar.gz'" in proc.stderr
    assert "only https and http redirects are followed" in proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert hits == ["/start", "/next"] and ftp_calls == []  # nothing opened there
    assert not dest.exists()  # nothing kept, not even the folder it made


@pytest.mark.parametrize("code", [301, 303, 307, 308])
def test_every_kind_of_redirect_is_checked(tmp_path, redirects, code):
    root, url, routes, hits, ftp_url, ftp_calls = redirects
    routes["/c.tar.gz"] = (code, f"{ftp_url}/c.tar.gz")
    with pytest.raises(datasets.FetchError, match=f"redirects \\({code}\\) to 'ftp://"):
        datasets.fetch(datasets.CIFAR10, tmp_path / "data", f"{url}/c.tar.gz", "0" * 32)
    assert ftp_calls == [] and not (tmp_path / "data").exists()  # nothing made
    # and an https/http hop is followed: the archive arrives through it
    md5 = cifar_archive(root / "real.tar.gz", tmp_path)
    routes["/c.tar.gz"] = (code, "/real.tar.gz")
    assert datasets.fetch(datasets.CIFAR10, tmp_path / "data", f"{url}/c.tar.gz", md5).is_dir()


def test_a_redirect_to_a_local_file_is_refused(tmp_path, redirects, home):
    root, url, routes, hits, _, _ = redirects
    archive = tmp_path / "local.tar.gz"
    md5 = cifar_archive(archive, tmp_path)  # a good archive: following would "work"
    routes["/c.tar.gz"] = (302, archive.as_uri())
    dest = tmp_path / "data"
    proc = dlscale(
        "data",
        "fetch",
        "cifar10",
        "--dir",
        str(dest),
        "--url",
        f"{url}/c.tar.gz",
        "--md5",
        md5,
        check=1,
    )
    assert f"redirects (302) to '{archive.as_uri()}'" in proc.stderr
    assert not dest.exists()  # nothing kept, not even the folder it made
    # the same archive named by the user as a file URL is theirs to ask for
    dlscale(
        "data",
        "fetch",
        "cifar10",
        "--dir",
        str(dest),
        "--url",
        archive.as_uri(),
        "--md5",
        md5,
        check=0,
    )
    assert (dest / "cifar-10-batches-py" / "test_batch").is_file()


def test_an_md5_that_is_not_one_is_refused_before_downloading(tmp_path, redirects, home):
    root, url, _, hits, _, _ = redirects
    cifar_archive(root / "c.tar.gz", tmp_path)
    dest = tmp_path / "data"
    for md5 in ["", "g" * 32, "0" * 31, "0" * 33, "0" * 32 + "\n", " " + "0" * 32]:
        with pytest.raises(UserError, match="an MD5 is 32 hexadecimal digits"):
            datasets.fetch(datasets.CIFAR10, dest, f"{url}/c.tar.gz", md5)
    proc = dlscale(
        "data",
        "fetch",
        "cifar10",
        "--dir",
        str(dest),
        "--url",
        f"{url}/c.tar.gz",
        "--md5",
        "abc",
        check=2,
    )
    assert "'abc'" in proc.stderr and "32 hex" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert hits == [] and not dest.exists()
