"""The one writer, as a class (engine/outputs.py): every option of every command that names
a path dlscale writes is found in the CLI's own definitions (its type is OutputPath), so a
new one is covered without editing this test, and each is run against what may be in its
place: a link to a victim, a dangling link, a FIFO, the wrong kind (a folder where a file
goes, a file where a folder goes), a read-only folder, a full disk and, as root, a device
node made in a throwaway folder (never one under /dev).

Each ends the same way: exit 2 and one sentence naming the path, the victim as it was,
nothing made through the link, no hang, and no partial file left. The read-only folder and
the full disk are small tmpfs mounts where the test runs as root (as the test command
does); elsewhere a folder without write permission stands in for the first, and the full
disk is skipped, saying so.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import stat
import subprocess
from pathlib import Path

import click
import pytest
from test_bad_input import COMMANDS, invoke

from conftest import REPO
from dlscale.engine.cli.options import InputPath, OutputPath
from dlscale.engine.io.outputs import OutputError, OutputFolder, write_file
from tui_text import recorded_study

pytestmark = pytest.mark.timeout(600)

ROOT = os.geteuid() == 0
QUICKSTART = REPO / "tests" / "fixtures" / "tui-quickstart" / "spec.toml"


def output_params() -> list[tuple[tuple[str, ...], click.Parameter]]:
    """(command, parameter) for every path a command writes, from the click definitions."""
    return [
        (path, p) for path, cmd in COMMANDS for p in cmd.params if isinstance(p.type, OutputPath)
    ]


def test_every_path_a_command_takes_says_whether_it_is_read_or_written():
    untyped = [
        (" ".join(path), p.name)
        for path, cmd in COMMANDS
        for p in cmd.params
        if isinstance(p.type, click.Path) and not isinstance(p.type, (InputPath, OutputPath))
    ]
    assert untyped == []  # a new path option must be InputPath or OutputPath
    found = {(" ".join(path), p.name) for path, p in output_params()}
    assert {("check", "junit"), ("check", "history"), ("report", "out_dir")} <= found


# --- the world the commands run in ---------------------------------------------------------


class Mounts:
    """A read-only and a full file system, made small and thrown away."""

    def __init__(self, base: Path) -> None:
        self.ro, self.full = base / "ro", base / "full"
        self.mounted: list[Path] = []
        for m in (self.ro, self.full):
            m.mkdir()
        try:
            if ROOT and self._mount(self.ro, "size=64k") and self._mount(self.full, "size=64k"):
                subprocess.run(["mount", "-o", "remount,ro", str(self.ro)], check=True)
                self.fill()
            else:  # not root: a folder no one but root may write
                self.ro.chmod(0o555)
        except BaseException:
            self.close()
            raise

    def _mount(self, where: Path, opts: str) -> bool:
        ok = subprocess.run(["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(where)]).returncode
        if ok == 0:
            self.mounted.append(where)
        return ok == 0

    @property
    def real(self) -> bool:
        return len(self.mounted) == 2

    def fill(self) -> None:
        fill(self.full)

    def close(self) -> None:
        for m in self.mounted:
            subprocess.run(["umount", "-l", str(m)])
        self.ro.chmod(0o755)


def fill(disk: Path) -> None:
    """Every byte of a small file system taken (a few KiB at a time, to the last)."""
    with open(disk / "fill", "ab", buffering=0) as fh:
        for size in (4096, 512, 1):
            try:
                while True:
                    fh.write(b"\0" * size)
            except OSError:
                continue


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A store with a finished study, its bundle, a spec, an archive to fetch, and the
    mounts; shared by every case (nothing here is written by a refused command)."""
    from dlscale.engine.results import bundles
    from dlscale.engine.tracking.store import Store

    base = tmp_path_factory.mktemp("outputs")
    home = base / "home"
    name = recorded_study(home)
    store = Store(home)
    bundle = base / "baseline.tar.gz"
    bundles.export(store, name, bundle, site="there")
    store.close()
    archive = base / "archive.bin"
    archive.write_bytes(os.urandom(1 << 20))  # more than the full disk could ever hold
    md5 = hashlib.md5(archive.read_bytes()).hexdigest()
    mounts = Mounts(base)
    # each command's line without its outputs: an output option is added to it with the
    # path under test; an output argument is the {out} the line holds
    recipes = {
        "check": ["check", str(QUICKSTART), "--baseline", str(bundle)],
        "export bundle": ["export", "bundle", "-e", name],
        "export mllog": ["export", "mllog", "-e", name],
        "report": ["report", "-e", name],
        "data fetch": ["data", "fetch", "cifar10", "--url", archive.as_uri(), "--md5", md5],
        "data sample": [
            "data",
            "sample",
            "imagenet",
            "{out}",
            "--classes",
            "1",
            "--per-class",
            "1",
            "--val-per-class",
            "1",
        ],
        "env create": ["env", "create", "pytorch-ddp"],
    }
    yield {"home": home, "recipes": recipes, "mounts": mounts, "base": base}
    mounts.close()


def test_every_output_has_a_way_to_run(world):
    """A command that gains an output option is run below; a new command needs its line."""
    assert {" ".join(path) for path, _ in output_params()} <= set(world["recipes"])


# --- the cases -----------------------------------------------------------------------------


def snapshot(folder: Path) -> dict[str, object]:
    """Every entry under folder, links as their text, never followed."""
    out: dict[str, object] = {}
    for p in sorted(folder.rglob("*")):
        st = p.lstat()
        rel = str(p.relative_to(folder))
        if stat.S_ISLNK(st.st_mode):
            out[rel] = "-> " + os.readlink(p)
        elif stat.S_ISREG(st.st_mode):
            out[rel] = p.read_bytes()
        else:
            out[rel] = stat.S_IFMT(st.st_mode)
    return out


def arrange(case: str, folder: Path, kind: str, mounts: Mounts) -> tuple[Path, list[Path]]:
    """The path to give the option and the places that must not change."""
    victim = folder / "victim"
    if kind == "folder":
        victim.mkdir()
        (victim / "mine.txt").write_text("the user's\n")
    else:
        victim.write_text("the user's\n")
    out = folder / "out"
    if case == "link":
        out.symlink_to(victim)
    elif case == "dangling link":
        out.symlink_to(folder / "nowhere")
    elif case == "fifo":
        os.mkfifo(out)
    elif case == "device":
        os.mknod(out, 0o600 | stat.S_IFCHR, os.makedev(1, 7))  # /dev/full's numbers
    elif case == "wrong kind":
        if kind == "folder":
            out.write_text("the user's file\n")
        else:
            out.mkdir()
            (out / "mine.txt").write_text("the user's\n")
    elif case == "read-only folder":
        out = mounts.ro / "out"
        return out, [folder, mounts.ro]
    elif case == "full disk":
        out = mounts.full / "out"
        return out, [folder, mounts.full]
    return out, [folder]


SKLEARN = importlib.util.find_spec("sklearn") is not None
CASES = ["link", "dangling link", "fifo", "wrong kind", "read-only folder", "full disk", "device"]


@pytest.mark.parametrize("case", CASES)
def test_no_output_goes_through_or_over_anything(world, case, capsys, monkeypatch, tmp_path):
    mounts: Mounts = world["mounts"]
    if case == "device" and not ROOT:
        pytest.skip("a device node needs root (made in a throwaway folder)")
    if case == "full disk" and not mounts.real:
        pytest.skip("a full disk is a small tmpfs, mounted as root")
    monkeypatch.setenv("DLSCALE_HOME", str(world["home"]))
    monkeypatch.setenv("NO_COLOR", "1")
    for path, param in output_params():
        name = " ".join(path)
        if name == "data sample" and case == "full disk" and not SKLEARN:
            continue  # it fails at the disk only after drawing the digits, which need sklearn
        kind = "folder" if param.type.folder else "file"
        folder = tmp_path / f"{name}-{param.name}".replace(" ", "-")
        folder.mkdir()
        out, places = arrange(case, folder, kind, mounts)
        before = {p: snapshot(p) for p in places}
        argv = [a.replace("{out}", str(out)) for a in world["recipes"][name]]
        if isinstance(param, click.Option):
            argv += [max(param.opts, key=len), str(out)]
        code, _, err = invoke(capsys, *argv)
        said = [line for line in err.splitlines() if line.startswith("dlscale: error")]
        assert code == 2 and len(said) == 1 and err.rstrip().endswith(said[0]), (name, case, err)
        assert str(out) in said[0] and "internal error" not in err, (name, case, err)
        for p in places:
            assert snapshot(p) == before[p], (name, case, "changed", p)
        assert not (folder / "nowhere").exists(), (name, case)


# --- the writer itself ---------------------------------------------------------------------


def test_a_link_swapped_in_while_writing_is_replaced_never_followed(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("the user's\n")
    target = tmp_path / "out.xml"
    with OutputFolder.open(tmp_path, "--junit") as folder:
        with pytest.raises(OutputError, match="link"), folder.writing("out.xml") as fh:
            fh.write(b"<xml/>")
            target.symlink_to(victim)  # swapped in after the checks
        assert target.is_symlink() and victim.read_text() == "the user's\n"
        assert not [p for p in tmp_path.iterdir() if p.name.endswith(".part")]


def test_an_error_while_writing_leaves_nothing(tmp_path):
    with pytest.raises(KeyboardInterrupt), OutputFolder.open(tmp_path) as folder:
        with folder.writing("half.json") as fh:
            fh.write(b"{")
            raise KeyboardInterrupt
    assert list(tmp_path.iterdir()) == []


def test_a_file_is_written_whole_and_replaced_only_when_asked(tmp_path):
    out = tmp_path / "x.xml"
    write_file(out, "one")
    write_file(out, "two")
    assert out.read_text() == "two"
    with pytest.raises(OutputError, match="already exists"):
        write_file(out, "three", "--out", replace=False)
    assert out.read_text() == "two" and sorted(os.listdir(tmp_path)) == ["x.xml"]


def test_a_spec_saved_from_the_tui_goes_through_the_writer(tmp_path):
    from dlscale.engine.session import Session

    victim = tmp_path / "victim"
    victim.write_text("the user's\n")
    link = tmp_path / "spec.toml"
    link.symlink_to(victim)
    from dlscale.engine.config.toml_text import tomllib

    data = tomllib.loads(QUICKSTART.read_text())
    with pytest.raises(OutputError, match="is a link"):
        Session.save_spec(data, str(link))
    assert victim.read_text() == "the user's\n"
