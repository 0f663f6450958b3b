"""Outputs never overwrite inputs, and the history is written whole with the verdict (issue
46, item 3), as classes:

- every output option of every command (found in the CLI's definitions, as
  tests/test_outputs.py finds them) pointed at each of its command's inputs (the spec, the
  baseline, the history), at the same file under another name (a hard link, `./x`), and at
  the store (its database, a run's records, its run folders), named before or after the
  input: exit 2, one sentence naming both, the input as it was;
- a history whose last line lost its newline gets the next line on a line of its own, and
  reads back whole;
- a full disk (a small tmpfs, as root) under the history or the JUnit file: either the
  history's lines are all there and the verdict stands (its exit status), or they are not
  there and the check says nothing was written; never "nothing was written" after writing.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
from pathlib import Path

import click
import pytest
from test_bad_input import COMMANDS, invoke
from test_check import SPEC, _study, baseline_bundle  # noqa: F401  (a fixture)
from test_outputs import fill, output_params

from dlscale.engine.cli.options import InputName, InputPath
from dlscale.engine.tracking.store import Store
from tui_text import recorded_study

pytestmark = pytest.mark.timeout(600)

ROOT = os.geteuid() == 0


@pytest.fixture(scope="module")
def world(tmp_path_factory, baseline_bundle):  # noqa: F811
    base = tmp_path_factory.mktemp("apart")
    home = base / "home"
    name = recorded_study(home)
    spec = base / "spec.toml"
    shutil.copy(SPEC, spec)
    bundle = base / "baseline.tar.gz"
    shutil.copy(baseline_bundle, bundle)
    history = base / "history.jsonl"
    history.write_text("")
    recipes = {  # each command's line without its outputs (as test_outputs.py's)
        "check": ["check", str(spec), "--baseline", str(bundle)],
        "export bundle": ["export", "bundle", "-e", name],
        "export mllog": ["export", "mllog", "-e", name],
        "report": ["report", "-e", name],
        "data fetch": ["data", "fetch", "cifar10", "--md5", "0" * 32],
        "data sample": ["data", "sample", "imagenet", "{out}", "--classes", "1"],
        "env create": ["env", "create", "pytorch-ddp"],
    }
    run = Store(home).runs()[0]["run_id"]
    return {
        "home": home,
        "spec": spec,
        "bundle": bundle,
        "history": history,
        "recipes": recipes,
        "run": run,
    }


def test_every_input_a_command_names_is_known_as_one():
    """The rule needs to know a command's inputs: every path it reads is an InputPath, and
    check's --baseline (an experiment, or a bundle file) an InputName."""
    (check,) = [cmd for path, cmd in COMMANDS if path == ("check",)]
    types = {p.name: type(p.type) for p in check.params}
    assert types["spec"] is InputPath and types["baseline"] is InputName


def _targets(world, command: str, folder: bool, tmp_path: Path) -> list[tuple[str, Path]]:
    """What an output of `command` must never be: its inputs under any name, the store."""
    home, run = world["home"], world["run"]
    if folder:
        return [("the run folders", home / "runs"), ("a run's folder", home / "runs" / run)]
    out = [
        ("the store", home / "dlscale.db"),
        ("a run's records", home / "runs" / run / "metrics.jsonl"),
    ]
    if command == "check":
        link = tmp_path / "same-spec.toml"
        tmp_path.mkdir(parents=True, exist_ok=True)
        if not link.exists():
            os.link(world["spec"], link)  # the spec under another name: its inode is the same
        out += [
            ("the spec", world["spec"]),
            ("the spec, hard-linked", link),
            ("the spec, as ./", Path(os.path.relpath(world["spec"]))),
            ("the baseline", world["bundle"]),
            ("the history", world["history"]),
        ]
    return out


def _line(world, path: tuple[str, ...], param: click.Parameter, target: Path, first: bool):
    argv = [a.replace("{out}", str(target)) for a in world["recipes"][" ".join(path)]]
    if isinstance(param, click.Argument):
        return argv
    option = [max(param.opts, key=len), str(target)]
    if param.name == "junit":
        option += ["--history", str(world["history"])]  # read too: --junit must not be it
    n = len(path)
    return [*argv[:n], *option, *argv[n:]] if first else [*argv, *option]


def _state(paths: list[Path]) -> dict[Path, object]:
    out: dict[Path, object] = {}
    for p in paths:
        if p.is_dir():
            out[p] = sorted(str(q.relative_to(p)) for q in p.rglob("*"))
        elif p.exists():
            out[p] = p.read_bytes()
    return out


@pytest.mark.parametrize("first", [False, True], ids=["output-last", "output-first"])
def test_no_output_is_one_of_its_commands_inputs(world, capsys, monkeypatch, tmp_path, first):
    monkeypatch.setenv("DLSCALE_HOME", str(world["home"]))
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.chdir(world["spec"].parent)
    tried = 0
    for path, param in output_params():
        name = " ".join(path)
        if isinstance(param, click.Argument) and not param.type.folder:
            continue
        for what, target in _targets(world, name, param.type.folder, tmp_path / name):
            if (param.name, what) == ("history", "the history"):
                continue  # its own file: appended to, as it should be
            watched = [target, world["spec"], world["bundle"], world["history"]]
            before = _state(watched)
            code, _, err = invoke(capsys, *_line(world, path, param, target, first))
            said = [line for line in err.splitlines() if line.startswith("dlscale: error")]
            case = (name, param.name, what, err)
            assert code == 2 and len(said) == 1 and "internal error" not in err, case
            assert str(target) in said[0] or os.path.relpath(target) in said[0], case
            assert _state(watched) == before, case
            tried += 1
    assert tried >= 20


# --- the history: whole with the verdict ---------------------------------------------------------


def _check(home: Path, *argv: str) -> subprocess.CompletedProcess:
    from conftest import dlscale

    return dlscale("check", str(SPEC), *argv, home=home)


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_last_line_without_its_newline_is_ended_before_the_next(
    tmp_path,
    baseline_bundle,  # noqa: F811
):
    home = _study(tmp_path / "h", [100, 100.5, 99.5], [190, 190.5, 189.5])
    history = tmp_path / "history.jsonl"
    first = _check(home, "--baseline", str(baseline_bundle), "--history", str(history))
    assert first.returncode == 0, first.stderr
    history.write_bytes(history.read_bytes().rstrip(b"\n"))  # cut short, or edited by hand
    again = _check(home, "--baseline", str(baseline_bundle), "--history", str(history))
    assert again.returncode == 0, again.stderr
    assert len(_lines(history)) == 4  # two points, twice: no line glued to another
    third = _check(home, "--window", "3", "--history", str(history))
    assert third.returncode in (0, 3), third.stderr  # it reads back: not bad input


class Full:
    """A small tmpfs, filled to its last byte once its files are in place."""

    def __init__(self, where: Path) -> None:
        where.mkdir()
        self.where = where
        ok = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(where)])
        if ok.returncode != 0:
            pytest.skip("a full disk is a small tmpfs, mounted as root")

    def fill(self) -> None:
        fill(self.where)

    def close(self) -> None:
        subprocess.run(["umount", "-l", str(self.where)])


@pytest.fixture
def full(tmp_path):
    if not ROOT:
        pytest.skip("a full disk is a small tmpfs, mounted as root")
    disk = Full(tmp_path / "full")
    yield disk
    disk.close()


def test_a_history_on_a_full_disk_gains_nothing_and_says_so(
    tmp_path,
    full,
    baseline_bundle,  # noqa: F811
):
    home = _study(tmp_path / "h", [100, 100.5, 99.5], [150, 150.5, 149.5])  # one regressed
    history = full.where / "history.jsonl"
    first = _check(home, "--baseline", str(baseline_bundle), "--history", str(history))
    assert first.returncode == 1, first.stderr
    kept = history.read_bytes()
    full.fill()
    junit = tmp_path / "j.xml"
    label = "x" * 6000  # lines longer than the slack in the file's last page
    proc = _check(
        home,
        *["--baseline", str(baseline_bundle), "--history", str(history)],
        *["--junit", str(junit), "--label", label],
    )
    said = [line for line in proc.stderr.splitlines() if line.startswith("dlscale: error")]
    assert proc.returncode == 2 and len(said) == 1, proc.stderr
    assert "--history" in said[0] and "full" in said[0] and "nothing was written" in said[0]
    assert history.read_bytes() == kept  # nothing of this check's lines
    assert "regressed" in proc.stdout  # the verdict was said; it is just not recorded


def test_a_junit_file_on_a_full_disk_leaves_the_history_as_it_was(
    tmp_path,
    full,
    baseline_bundle,  # noqa: F811
):
    home = _study(tmp_path / "h", [100, 100.5, 99.5], [150, 150.5, 149.5])
    history = tmp_path / "history.jsonl"
    full.fill()
    proc = _check(
        home,
        "--baseline",
        str(baseline_bundle),
        "--history",
        str(history),
        "--junit",
        str(full.where / "j.xml"),
    )
    said = [line for line in proc.stderr.splitlines() if line.startswith("dlscale: error")]
    assert proc.returncode == 2 and len(said) == 1 and "--junit" in said[0], proc.stderr
    assert not history.exists() or history.read_text() == ""
    assert not (full.where / "j.xml").exists()


def test_once_the_history_has_its_lines_the_verdict_stands(
    tmp_path,
    capsys,
    monkeypatch,
    baseline_bundle,  # noqa: F811
):
    """The JUnit file cannot take its place after the history's lines were appended (a
    rename refused: the one step left): the verdict's exit status, and a line saying so."""
    from dlscale.engine.io import outputs

    home = _study(tmp_path / "h", [100, 100.5, 99.5], [150, 150.5, 149.5])
    history, junit = tmp_path / "history.jsonl", tmp_path / "j.xml"
    real = os.replace

    def refused(src, dst, *args, **kw):
        if str(dst).endswith("j.xml"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(src, dst, *args, **kw)

    monkeypatch.setattr(outputs.os, "replace", refused)
    monkeypatch.setenv("DLSCALE_HOME", str(home))
    code, out, err = invoke(
        capsys,
        *["check", str(SPEC), "--baseline", str(baseline_bundle)],
        *["--history", str(history), "--junit", str(junit)],
    )
    assert code == 1, err  # regressed: not 2
    assert len(_lines(history)) == 2
    assert "the verdict above stands (exit 1)" in err and "--junit" in err
    assert not junit.exists() and not list(tmp_path.glob(".j.xml*"))
