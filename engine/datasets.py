"""Getting real datasets into place: CIFAR-10 fetched and verified, ImageNet's layout checked.

A fetch never leaves a half-written dataset behind: the archive downloads to a hidden
temporary name in the target folder, is checked against its published MD5, is unpacked
into a hidden temporary folder (refusing any member that would land outside it), and only
then is renamed to its final name, which is what `training.data_dir` points at.

What it reads is bounded: no more than the published archive's size is downloaded (a body
that goes on is cut there and refused), in no more than a total deadline (`--timeout`; a
server that trickles a byte at a time is cut there too) as well as a minute per read, and
a `file://` URL must name a regular file (not a FIFO, a device or a link to one). What it
writes goes through the one writer's folder (engine/io/outputs.py): the unpacked folder is
renamed into place by descriptor, never through a link. The temporary files are removed
on any failure and on SIGTERM; one left by a fetch that was killed outright is locked by
no one (flock) and is removed by the next fetch into that folder.
"""

from __future__ import annotations

import fcntl
import hashlib
import http.client
import os
import re
import shutil
import signal
import stat
import sys
import tarfile
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..trainers.common.data import DataError, read_cifar10
from ..trainers.common.imagenet import LayoutCheck, check_layout
from .errors import DlscaleError, UserError
from .io.outputs import OutputError, OutputFolder, check_folder


@dataclass(frozen=True)
class Source:
    name: str
    url: str
    md5: str
    folder: str  # the archive's one top-level folder, kept as the final name
    files: tuple[str, ...]  # what must be in it
    size: int  # the published archive's bytes: no more is ever downloaded


CIFAR10 = Source(
    "cifar10",
    "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",
    "c58f30108f718f92721af3b95e74349a",
    "cifar-10-batches-py",
    tuple(f"data_batch_{i}" for i in range(1, 6)) + ("test_batch", "batches.meta"),
    170_498_071,
)
SOURCES = {CIFAR10.name: CIFAR10}

Progress = Callable[[int, int | None], None]  # (bytes so far, total bytes or None)
READ_TIMEOUT_S = 60  # one read (connecting, a header, a chunk) that waits longer fails
DEADLINE_S = 3600  # the whole download: 170 MB at 50 KB/s


class FetchError(DlscaleError):
    """The download failed or did not match its checksum (exit status 1)."""


# Where a server may send a download. The first URL may also be a file (a local mirror,
# named by the user); a redirect never may, nor to any other scheme (ftp, data...).
REDIRECT_SCHEMES = ("https", "http")


class _CheckedRedirects(urllib.request.HTTPRedirectHandler):
    """urllib follows redirects to ftp (and its own checks vary by version): every hop is
    checked here, before anything is opened there."""

    def http_error_302(self, req, fp, code, msg, headers):  # noqa: D102 (urllib's hook)
        target = headers.get("location") or headers.get("uri")
        if target is not None:
            hop = urllib.parse.urljoin(req.full_url, target)
            scheme = urllib.parse.urlparse(hop).scheme.lower()
            if scheme not in REDIRECT_SCHEMES:
                fp.close()
                raise FetchError(
                    f"{req.full_url}: the server redirects ({code}) to {hop!r}; "
                    f"only {' and '.join(REDIRECT_SCHEMES)} redirects are "
                    "followed (nothing was fetched from there)"
                )
        return super().http_error_302(req, fp, code, msg, headers)

    http_error_301 = http_error_303 = http_error_307 = http_error_308 = http_error_302

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # noqa: D102
        # Python 3.10's urllib follows no 308 (3.11's follows it as a 307: same method,
        # same body), so it is passed on as the 307 it means.
        code = 307 if code == 308 else code
        return super().redirect_request(req, fp, code, msg, headers, newurl)


_opener = urllib.request.build_opener(_CheckedRedirects)  # replaces urllib's own handler


def _open_url(url: str):
    """(a readable stream, its size where known). A file:// URL must be a regular file: a
    FIFO would hang the fetch, a device (/dev/zero) never end."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme != "file":
        resp = _opener.open(url, timeout=READ_TIMEOUT_S)
        total = resp.headers.get("Content-Length")
        return resp, int(total) if total and total.isdigit() else None
    path = urllib.request.url2pathname(parts.path)
    try:  # O_NONBLOCK: opening a FIFO does not wait for a writer
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        raise FetchError(f"{url}: cannot read {path} ({exc.strerror})") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise UserError(
            f"--url {url!r}: {path} is not a regular file (a FIFO, device or folder); "
            "a file URL must name the archive itself"
        )
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb"), st.st_size


class _Deadline(Exception):
    pass


class _DeadlineAlarm:
    """The download's total deadline, also while a read is blocked (connecting, a header
    sent a byte at a time): a timer signal ends it, where signals can be handled (the main
    thread); elsewhere the deadline is checked between reads."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.armed = False

    def _ring(self, *_: object) -> None:
        raise _Deadline

    def __enter__(self) -> _DeadlineAlarm:
        if threading.current_thread() is threading.main_thread():
            self.old = signal.signal(signal.SIGALRM, self._ring)
            signal.setitimer(signal.ITIMER_REAL, self.seconds)
            self.armed = True
        return self

    def __exit__(self, *exc: object) -> None:
        if self.armed:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self.old)


def _download(
    url: str,
    fh,
    limit: int,
    on_progress: Progress,
    deadline_s: float = DEADLINE_S,
    where: Path = Path("."),
) -> str:
    """Stream url into the open file `fh`, at most `limit` bytes in at most `deadline_s`
    seconds; return the MD5 of what arrived."""
    md5 = hashlib.md5()
    too_big = FetchError(
        f"{url}: more than {limit:,} bytes, the size of the published archive; "
        "refusing the rest (nothing kept)"
    )
    too_slow = FetchError(
        f"{url}: not downloaded within --timeout {deadline_s:g} s (nothing kept); a slow "
        "link needs a longer --timeout, a stalled server another --url"
    )
    end = time.monotonic() + deadline_s
    try:
        with _DeadlineAlarm(deadline_s):
            resp, total = _open_url(url)
            with resp:
                if total is not None and total > limit:
                    raise too_big
                done = 0
                on_progress(0, total)
                # read1: what one read brings, so the deadline is looked at between reads
                while chunk := resp.read1(min(1 << 20, limit + 1 - done)):
                    if time.monotonic() > end:
                        raise _Deadline
                    done += len(chunk)
                    if done > limit:
                        raise too_big
                    try:
                        fh.write(chunk)
                    except OSError as exc:  # a full disk: the writer's sentence
                        raise OutputError.of("--dir", where, exc) from None
                    md5.update(chunk)
                    on_progress(done, total)
    except _Deadline:
        raise too_slow from None
    except urllib.error.HTTPError as exc:
        raise FetchError(f"{url}: the server answered {exc.code} {exc.reason}") from None
    except (urllib.error.URLError, OSError, TimeoutError) as exc:
        reason = getattr(exc, "reason", None) or exc
        raise FetchError(f"{url}: download failed: {reason}") from None
    except (ValueError, http.client.HTTPException) as exc:  # a URL urllib cannot use
        raise FetchError(f"{url}: download failed: {type(exc).__name__}: {exc}") from None
    return md5.hexdigest()


def _check_url(url: str | None, default: str) -> str:
    """The URL to fetch from: --url as given (never silently the default when it is
    empty), of an allowed scheme and a shape urllib can use."""
    if url is None:
        return default
    if not url.strip():
        raise UserError(
            "--url '': empty; give the archive's URL, or leave --url out for the official "
            f"address ({default})"
        )
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018  (raises on a port that is not one)
    except ValueError as exc:
        raise UserError(f"--url {url!r}: not a usable URL ({exc})") from None
    if parts.scheme not in ("http", "https", "file"):
        raise UserError(f"--url {url!r}: only http, https and file URLs are allowed")
    if parts.scheme != "file" and not parts.hostname:
        raise UserError(f"--url {url!r}: names no host")
    if parts.scheme == "file" and parts.netloc not in ("", "localhost"):
        raise UserError(f"--url {url!r}: a file URL names a file on this machine (file:///path)")
    return url


def _remove_leftovers(dest: Path, source: Source) -> None:
    """Temporary files of fetches into `dest` that were killed (SIGKILL): a download no
    live fetch holds locked, and its unpack folder."""
    try:
        names = os.listdir(dest)
    except OSError:
        return  # the fetch itself says what is wrong with the folder
    for name in names:
        if not (name.startswith(f".{source.name}-") and name.endswith(".download")):
            continue
        try:
            fd = os.open(dest / name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            continue
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                continue
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            continue  # a live fetch's
        finally:
            os.close(fd)
        _remove_temporaries(dest / name)


def _unpack_dir(archive: Path) -> Path:
    return archive.with_suffix(".unpack")


def _remove_temporaries(archive: Path) -> None:
    archive.unlink(missing_ok=True)
    unpack = _unpack_dir(archive)
    if unpack.is_dir() and not unpack.is_symlink():
        shutil.rmtree(unpack, ignore_errors=True)


class _TermAsExit:
    """SIGTERM ends the fetch as Ctrl-C would, through its clean-up (exit status 143);
    only where signals can be handled (the main thread)."""

    def __enter__(self) -> None:
        self.old = None
        if threading.current_thread() is threading.main_thread():
            self.old = signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))

    def __exit__(self, *exc: object) -> None:
        if self.old is not None:
            signal.signal(signal.SIGTERM, self.old)


def _safe_members(tar: tarfile.TarFile, folder: str, archive: str) -> list[tarfile.TarInfo]:
    """Every member must be a plain file or folder under `folder`: no absolute paths, no
    `..`, no links or devices, so unpacking cannot write anywhere else."""
    members = tar.getmembers()
    for m in members:
        parts = Path(m.name).parts
        if m.name.startswith(("/", "\\")) or ".." in parts or not parts or parts[0] != folder:
            raise FetchError(
                f"{archive}: member {m.name!r} would land outside "
                f"{folder}/; refusing to unpack this archive"
            )
        if not (m.isfile() or m.isdir()):
            raise FetchError(
                f"{archive}: member {m.name!r} is a link or special file; "
                "refusing to unpack this archive"
            )
    return members


def fetch(
    source: Source,
    dest: str | Path,
    url: str | None = None,
    md5: str | None = None,
    on_progress: Progress = lambda done, total: None,
    deadline_s: float = DEADLINE_S,
) -> Path:
    """Download, verify and unpack `source` into dest/<source.folder>; return that folder.
    Already there and complete: returned as it is, nothing downloaded."""
    url = _check_url(url, source.url)
    if md5 is not None and not re.fullmatch(r"[0-9a-fA-F]{32}", md5):
        raise UserError(f"--md5 {md5!r}: an MD5 is 32 hexadecimal digits (0-9, a-f)")
    md5 = (md5 or source.md5).lower()
    dest = Path(dest).expanduser()
    final = dest / source.folder
    check_folder(dest, "--dir", writable=False)  # a link, a file, a FIFO: refused at once
    if dest.is_dir():
        _remove_leftovers(dest, source)
    if final.is_dir() and all((final / f).is_file() for f in source.files):
        return final
    if os.path.lexists(final):
        raise UserError(
            f"{final} exists but is not a complete {source.name} folder (it lacks "
            f"{', '.join(f for f in source.files if not (final / f).is_file())}); "
            "move it away and fetch again"
        )
    with OutputFolder.open(dest, "--dir") as folder, _TermAsExit():
        return _fetch_into(source, folder, url, md5, on_progress, deadline_s)


def _fetch_into(
    source: Source,
    folder: OutputFolder,
    url: str,
    md5: str,
    on_progress: Progress,
    deadline_s: float,
) -> Path:
    try:
        fd, tmp_name = tempfile.mkstemp(
            dir=folder.path, prefix=f".{source.name}-", suffix=".download"
        )
    except OSError as exc:
        raise OutputError.of("--dir", folder.path, exc) from None
    archive = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as fh:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX)  # held while this fetch lives
            got = _download(url, fh, source.size, on_progress, deadline_s, folder.path)
            try:
                fh.flush()
            except OSError as exc:
                raise OutputError.of("--dir", folder.path, exc) from None
            _unpack_checked(source, archive, url, got, md5, folder)
    finally:
        _remove_temporaries(archive)
    return folder.path / source.folder


def _unpack_checked(
    source: Source, archive: Path, url: str, got: str, md5: str, folder: OutputFolder
) -> None:
    """The downloaded archive checked, unpacked beside it and renamed into place."""
    if got != md5:
        raise FetchError(
            f"{url}: checksum mismatch: MD5 {got}, expected {md5}; the "
            "download is corrupt or not the published archive (nothing kept)"
        )
    unpack = _unpack_dir(archive)
    try:
        unpack.mkdir(mode=0o700)
        with tarfile.open(archive, "r:*") as tar:
            members = _safe_members(tar, source.folder, url)
            # filter="data" (Python's own guard) as a second line of defence
            tar.extractall(unpack, members=members, filter="data")
    except (tarfile.TarError, EOFError) as exc:
        raise FetchError(f"{url}: not a readable tar archive ({exc})") from None
    except OSError as exc:  # a full disk while unpacking: the writer's sentence
        raise OutputError.of("--dir", folder.path, exc) from None
    missing = [f for f in source.files if not (unpack / source.folder / f).is_file()]
    if missing:
        raise FetchError(f"{url}: the archive lacks {', '.join(missing)} under {source.folder}/")
    try:
        read_cifar10(str(unpack / source.folder))
    except DataError as exc:
        raise FetchError(f"{url}: unpacked, but not readable as {source.name}: {exc}") from None
    folder.place_folder(unpack / source.folder, source.folder)


# --- ImageNet's folder layout ------------------------------------------------------------


def check_imagenet(root: str | Path, expect_classes: int = 1000) -> LayoutCheck:
    """The trainers' own layout check (trainers/common/imagenet.py), for `data check`."""
    try:
        return check_layout(root, expect_classes)
    except DataError as exc:
        raise UserError(str(exc)) from None


# --- a small ImageNet-format sample --------------------------------------------------------

SAMPLE_SIZE = (320, 240)  # width x height: a photo's 4:3, cropped and resized like ImageNet's


def write_imagenet_sample(
    dest: str | Path,
    classes: int = 10,
    per_class: int = 32,
    val_per_class: int = 8,
    seed: int = 0,
    size: tuple[int, int] = SAMPLE_SIZE,
) -> LayoutCheck:
    """Write real images (scikit-learn's bundled handwritten digits, one class per digit,
    upscaled and tinted to RGB JPEGs) in ImageNet's layout at `dest`, for trying the
    ImageNet loaders and testing them without ImageNet. Written into a hidden temporary
    folder beside `dest` and renamed into place once `data check` accepts it, so an
    interrupted run leaves nothing half-written; a non-empty `dest` is never touched."""
    import numpy as np  # noqa: PLC0415
    from PIL import Image  # noqa: PLC0415  (Pillow comes with matplotlib)

    from ..trainers.common.data import load_digits  # noqa: PLC0415

    if not 1 <= classes <= 10:
        raise UserError(f"--classes {classes}: the digits sample has 1 to 10 classes")
    if per_class < 1 or val_per_class < 1:
        raise UserError("--per-class and --val-per-class must be 1 or more")
    dest = Path(dest).expanduser()
    check_folder(dest)  # a link, a file, a FIFO, a read-only folder: refused at once
    if dest.exists() and any(dest.iterdir()):
        raise UserError(
            f"{dest} exists and is not an empty folder; name a new one (nothing was written)"
        )
    try:
        train, test = load_digits(seed)
    except DataError as exc:
        raise UserError(str(exc)) from None
    images = np.concatenate([train.images, test.images])[:, 0]  # grey, 32x32
    labels = np.concatenate([train.labels, test.labels])
    rng = np.random.default_rng(seed)
    picked = {}
    for cls in range(classes):
        idx = rng.permutation(np.flatnonzero(labels == cls))
        if len(idx) < per_class + val_per_class:
            raise UserError(
                f"--per-class {per_class} + --val-per-class {val_per_class}: the "
                f"digits have only {len(idx)} images of class {cls}"
            )
        picked[cls] = idx[: per_class + val_per_class]
    parent = OutputFolder.open(dest.parent, make=True, follow=True)
    try:
        tmp = Path(tempfile.mkdtemp(dir=dest.parent, prefix=f".{dest.name}-"))
    except OSError as exc:
        parent.close(failed=True)
        raise OutputError.of("", dest, exc) from None
    failed = True
    try:
        for cls, idx in picked.items():
            name = f"digit-{cls}"  # sorts as 0..9: label = the digit
            for split, part in (("train", idx[:per_class]), ("val", idx[per_class:])):
                folder = tmp / split / name
                folder.mkdir(parents=True)
                for i in part:
                    grey = Image.fromarray(images[i]).resize(size, Image.Resampling.BICUBIC)
                    # A random ink and paper colour: three channels that differ, as photos'
                    # do, without changing what the image shows.
                    ink, paper = rng.integers(0, 256, 3), rng.integers(0, 256, 3)
                    a = np.asarray(grey, dtype=np.float32)[..., None] / 255.0
                    rgb = (paper * (1 - a) + ink * a).round().astype(np.uint8)
                    Image.fromarray(rgb).save(folder / f"digit_{i:05d}.JPEG", quality=90)
        check = check_layout(tmp, classes)
        if check.problems:  # a bug here, not the user's: say so plainly
            raise DlscaleError(
                "the sample written does not pass its own check: " + "; ".join(check.problems)
            )
        parent.place_folder(tmp, dest.name)  # onto a missing or empty folder: atomic
        failed = False
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(exc, OSError):  # a full disk: the one writer's sentence
            raise OutputError.of("", dest, exc) from None
        raise
    finally:
        parent.close(failed)
    return check_layout(dest, classes)
