"""A property test across the classes of issue 33: hostile names, depths and sizes go
through import, export, report, check, plan and rebuild, and each ends in an answer or a
sentence, never an internal error or a hang; nothing printed holds an escape; a run that
import accepted is one `store rebuild` keeps (the two apply the same bounds); and what is
written goes through the one writer (an output named hostilely is written as named, or
refused). Bundles are the recorded quickstart's, changed per example; most examples run
in process, through the command line's own entry; a few through the real binary."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_bad_input import invoke
from test_bundles import _dump, _first, _members, _write
from test_printer import leaks
from test_properties import examples

from conftest import HANG_S, dlscale
from dlscale.engine.tracking.store import Store
from tui_text import recorded_study

pytestmark = pytest.mark.timeout(900)


# Names: controls, escapes, bidi, separators, `..`, and what a shell or a URI reads.
hostile_text = st.lists(
    st.one_of(
        st.sampled_from(["\x1b[2J", "\x1b]0;x\x07", "\x9b", "\x85", "\r", "\u202e", "\u2028"]),
        st.sampled_from(["..", "/", "#", "?", "%", "$(id)", "'", '"', "\\", "\0", " "]),
        st.characters(exclude_categories=("Cs",)),
    ),
    max_size=12,
).map("".join)
depths = st.one_of(st.integers(0, 32), st.integers(33, 120))  # within the bounds, and past
sizes = st.integers(min_value=0, max_value=20_000)


def nested_json(depth: int, leaf: object) -> object:
    value = leaf
    for i in range(depth):
        value = [value] if i % 2 else {"k": value}
    return value


def nested_toml(key: str, depth: int) -> str:
    return f"{json.dumps(key)} = {'[' * depth}1{']' * depth}\n"


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> tuple[Path, dict[str, bytes]]:
    base = tmp_path_factory.mktemp("hostile")
    home = base / "home"
    recorded_study(home)
    out = base / "b.tar.gz"
    dlscale("export", "bundle", "-e", "quickstart", "--out", str(out), "--site", "there", home=home)
    return out, _members(out)


def hostile_bundle(path: Path, members: dict[str, bytes], name: str, depth: int, size: int):
    """The bundle with a hostile key, reason, log and job script, and values nested `depth`
    deep in the spec and the run's recipe; the spec holds `size` more bytes."""
    m = dict(members)
    exp = json.loads(m["experiment.json"])
    exp["spec_text"] += "\n[options.x]\n" + nested_toml(name, depth) + "#" * size + "\n"
    m["experiment.json"] = json.dumps(exp).encode()
    run_json = _first(m, "run.json")
    row = json.loads(m[run_json])
    row["training"] = {**row["training"], name: nested_json(depth, name)}
    row["reason"] = name
    m[run_json] = json.dumps(row).encode()
    run_dir = run_json.rsplit("/", 1)[0]
    m[f"{run_dir}/run.log"] = (name + "\n").encode("utf-8", "surrogateescape") * 3
    m[f"{run_dir}/job.sh"] = f"#!/bin/sh\necho {name}\n".encode()
    return _write(path, m)


def no_harm(code: int, out: str, err: str, what: object) -> None:
    assert code in (0, 1, 2), (what, code, err)
    assert "internal error" not in err and "Traceback" not in err, (what, err)
    assert leaks(out + err) == [], (what, out[-1000:], err[-1000:])


@examples(12)
@given(name=hostile_text, depth=depths, size=sizes)
def test_hostile_bundles_through_every_command(
    bundle, tmp_path_factory, capsys, monkeypatch, name, depth, size
):
    base = tmp_path_factory.mktemp("case")
    home = base / "home"
    monkeypatch.setenv("DLSCALE_HOME", str(home))
    monkeypatch.setenv("NO_COLOR", "1")
    path = hostile_bundle(base / "b.tgz", bundle[1], name, depth, size)
    code, out, err = invoke(capsys, "import", str(path))
    no_harm(code, out, err, ("import", name, depth, size))
    if code != 0:  # refused whole: nothing of it in the store
        assert not (home / "runs").exists() or not list((home / "runs").iterdir())
        return
    imported = {r["run_id"]: r["state"] for r in Store(home).runs()}
    spec = base / "spec.toml"
    spec.write_text(json.loads(bundle[1]["experiment.json"])["spec_text"])
    target = base / f"out{name.replace('/', '_')}"[:200]
    experiment = Store(home).experiment_names()[0]
    for argv in (
        ["status", "--all"],
        ["results"],
        ["report", "-e", experiment, "--out", str(target)],
        ["export", "mllog", "-e", experiment, "--out", str(base / "mllog")],
        ["check", str(spec), "--baseline", str(path)],
        ["plan", str(spec)],
        ["store", "rebuild", "--force"],
    ):
        code, out, err = invoke(capsys, *argv)
        no_harm(code, out, err, (argv, name, depth, size))
    # import and rebuild share their bounds: every run accepted is kept, as it was
    assert {r["run_id"]: r["state"] for r in Store(home).runs()} == imported
    shutil.rmtree(base, ignore_errors=True)


@examples(3)
@given(name=hostile_text, depth=depths)
def test_hostile_bundles_through_the_real_commands(bundle, tmp_path_factory, name, depth):
    base = tmp_path_factory.mktemp("real")
    home = base / "home"
    path = hostile_bundle(base / "b.tgz", bundle[1], name, depth, 0)
    proc = dlscale("import", str(path), home=home, timeout=HANG_S)
    no_harm(proc.returncode, proc.stdout, proc.stderr, ("import", name, depth))
    if proc.returncode == 0:
        before, _ = _dump(home)
        runs = sorted(r for r in before if r.startswith('INSERT INTO "runs"'))
        proc = dlscale("store", "rebuild", "--force", home=home, timeout=HANG_S)
        no_harm(proc.returncode, proc.stdout, proc.stderr, ("rebuild", name, depth))
        assert len(Store(home).runs()) == len(runs)
    shutil.rmtree(base, ignore_errors=True)
