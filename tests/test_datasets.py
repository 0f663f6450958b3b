"""`dlscale data`: CIFAR-10 fetched from a real HTTP server on this machine (an archive made
here in the published format, with its own MD5), and ImageNet folder layouts checked."""

import functools
import hashlib
import http.server
import io
import json
import pickle
import tarfile
import threading

import pytest

from conftest import dlscale, write_spec
from dlscale.trainers.common.data import read_cifar10
from test_data import make_cifar


@pytest.fixture
def server(tmp_path):
    """A real HTTP server on 127.0.0.1 serving tmp_path/www; counts the GETs it answers."""
    root = tmp_path / "www"
    root.mkdir()
    hits = []

    class Handler(http.server.SimpleHTTPRequestHandler):
        def do_GET(self):
            hits.append(self.path)
            super().do_GET()

        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(Handler, directory=str(root))
    )
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield root, f"http://127.0.0.1:{httpd.server_address[1]}", hits
    httpd.shutdown()
    httpd.server_close()


def cifar_archive(path, tmp_path, n=16):
    """cifar-10-python.tar.gz as published: one folder cifar-10-batches-py holding the five
    training batches, test_batch and batches.meta."""
    folder = tmp_path / "src" / "cifar-10-batches-py"
    folder.parent.mkdir()
    make_cifar(folder, n)
    with open(folder / "batches.meta", "wb") as fh:
        pickle.dump({b"label_names": [f"c{i}".encode() for i in range(10)]}, fh, protocol=2)
    with tarfile.open(path, "w:gz") as tar:
        tar.add(folder, arcname="cifar-10-batches-py")
    return hashlib.md5(path.read_bytes()).hexdigest()


def test_fetch_cifar10_verifies_unpacks_and_skips_a_second_time(tmp_path, server, home):
    root, url, hits = server
    md5 = cifar_archive(root / "c.tar.gz", tmp_path)
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
        check=0,
    )
    folder = dest / "cifar-10-batches-py"
    assert f'training.data_dir = "{folder}"' in proc.stdout
    assert sorted(p.name for p in dest.iterdir()) == ["cifar-10-batches-py"]  # no leftovers
    train, test = read_cifar10(str(folder))
    assert train.images.shape == (80, 3, 32, 32) and test.images.shape == (16, 3, 32, 32)
    again = dlscale(
        "data",
        "fetch",
        "cifar10",
        "--dir",
        str(dest),
        "--url",
        f"{url}/c.tar.gz",
        "--md5",
        md5,
        check=0,
    )
    assert str(folder) in again.stdout and hits == ["/c.tar.gz"]  # not downloaded twice


def test_the_url_and_checksum_come_from_the_environment_too(tmp_path, server, home, monkeypatch):
    root, url, _ = server
    md5 = cifar_archive(root / "c.tar.gz", tmp_path)
    monkeypatch.setenv("DLSCALE_CIFAR10_URL", f"{url}/c.tar.gz")
    monkeypatch.setenv("DLSCALE_CIFAR10_MD5", md5)
    dlscale("data", "fetch", "cifar10", "--dir", str(tmp_path / "d"), check=0)
    assert (tmp_path / "d" / "cifar-10-batches-py" / "test_batch").is_file()


def test_a_bad_checksum_fails_and_keeps_nothing(tmp_path, server, home):
    root, url, _ = server
    cifar_archive(root / "c.tar.gz", tmp_path)
    dest = tmp_path / "data"
    proc = dlscale(
        "data", "fetch", "cifar10", "--dir", str(dest), "--url", f"{url}/c.tar.gz", check=1
    )  # the published MD5 cannot match the archive made here
    assert "checksum mismatch" in proc.stderr and "c58f30108f718f92721af3b95e74349a" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not dest.exists()  # nothing kept, not even the folder it made


def test_missing_file_on_the_server_is_a_clear_error(tmp_path, server, home):
    _, url, _ = server
    dest = tmp_path / "data"
    proc = dlscale(
        "data", "fetch", "cifar10", "--dir", str(dest), "--url", f"{url}/nope.tgz", check=1
    )
    assert "404" in proc.stderr and "Traceback" not in proc.stderr
    assert not dest.exists()  # nothing kept, not even the folder it made


def test_an_archive_escaping_its_folder_is_refused(tmp_path, server, home):
    root, url, _ = server
    path = root / "evil.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        body = b"owned"
        info = tarfile.TarInfo("cifar-10-batches-py/../../escaped.txt")
        info.size = len(body)
        tar.addfile(info, io.BytesIO(body))
    md5 = hashlib.md5(path.read_bytes()).hexdigest()
    dest = tmp_path / "deep" / "data"
    proc = dlscale(
        "data",
        "fetch",
        "cifar10",
        "--dir",
        str(dest),
        "--url",
        f"{url}/evil.tar.gz",
        "--md5",
        md5,
        check=1,
    )
    assert "would land outside" in proc.stderr
    assert (
        not (tmp_path / "deep" / "escaped.txt").exists() and not (tmp_path / "escaped.txt").exists()
    )
    assert not dest.exists()  # nothing kept, not even the folder it made


def test_bad_options_exit_2(tmp_path, home):
    assert dlscale("data", "fetch", "mnist").returncode == 2
    proc = dlscale("data", "fetch", "cifar10", "--url", "ftp://example.invalid/x", check=2)
    assert "only http, https and file URLs" in proc.stderr


@pytest.mark.slow
def test_a_fetched_cifar10_folder_trains_as_data_dir(tmp_path, server, home):
    root, url, _ = server
    md5 = cifar_archive(root / "c.tar.gz", tmp_path, n=32)
    proc = dlscale(
        "data",
        "fetch",
        "cifar10",
        "--dir",
        str(tmp_path / "data"),
        "--url",
        f"{url}/c.tar.gz",
        "--md5",
        md5,
        check=0,
    )
    folder = proc.stdout.split('training.data_dir = "')[1].split('"')[0]
    spec = tmp_path / "s.toml"
    write_spec(spec, scales='"1x1"', training=f'data_dir = "{folder}"')
    text = (
        spec.read_text()
        .replace("synthetic-cifar", "cifar10")
        .replace("steps = 4\n", "epochs = 1\n")
    )
    spec.write_text(text.replace("warmup_steps = 1", "warmup_steps = 2"))
    dlscale("run", str(spec), "--wait", check=0)
    rows = json.loads(dlscale("results", "--format", "json", check=0).stdout)
    assert rows[0]["dataset"] == "cifar10" and rows[0]["state"] == "COMPLETED"
    assert rows[0]["best_top1"] is not None  # it evaluated on the fetched test_batch


# --- ImageNet layout -----------------------------------------------------------------------

JPEG = b"\xff\xd8\xff\xe0" + b"\0" * 60


def imagenet(root, classes=("n01", "n02", "n03"), per_class=2):
    for split in ("train", "val"):
        for c in classes:
            d = root / split / c
            d.mkdir(parents=True)
            for i in range(per_class):
                (d / f"{c}_{i}.JPEG").write_bytes(JPEG)
    return root


def test_a_good_imagenet_layout_passes(tmp_path, home):
    root = imagenet(tmp_path / "imagenet")
    proc = dlscale("data", "check", "imagenet", str(root), "--classes", "3", check=0)
    assert "train: 3 classes, 6 images" in proc.stdout and "layout OK" in proc.stdout


def test_imagenet_problems_are_each_named(tmp_path, home):
    root = imagenet(tmp_path / "imagenet")
    for f in (root / "val" / "n03").iterdir():  # val lacks images of n03, which is empty
        f.unlink()
    (root / "val" / "loose.JPEG").write_bytes(JPEG)  # the raw, unsorted val layout
    (root / "train" / "n02" / "n02_0.JPEG").write_bytes(b"\x89PNG\r\n")  # a PNG in disguise
    (root / "train" / "n01" / "notes.txt").write_text("x")
    (root / "train" / "n04").mkdir()
    proc = dlscale("data", "check", "imagenet", str(root), "--classes", "3", check=2)
    err = proc.stderr
    assert "Traceback" not in err
    assert "val: 1 image(s) lie directly in val/" in err
    assert f"{root / 'train'}: 4 class folders, expected 3" in err
    assert "n04" in err and "hold no JPEG" in err
    assert "1 file(s) named .JPEG but not JPEG data: n02/n02_0.JPEG" in err
    assert "not .JPEG/.jpg: n01/notes.txt" in err
    assert f"{root / 'val'}: lacks 1 class(es) that train/ has: n04" in err


def test_imagenet_without_splits(tmp_path, home):
    (tmp_path / "x").mkdir()
    proc = dlscale("data", "check", "imagenet", str(tmp_path / "x"), check=2)
    assert "train: missing" in proc.stderr and "val: missing" in proc.stderr
    assert (
        "not a folder"
        in dlscale("data", "check", "imagenet", str(tmp_path / "nope"), check=2).stderr
    )
