"""Store changes are atomic and serialised (issue 46, item 1), as a class: every pair of
store-changing commands at once, and commands killed (SIGKILL, SIGTERM, SIGINT) at random
points, each against a real store of a few hundred runs, through the real `dlscale`
binary. The store's runs are counted before and after: none that was there is lost, an
import is all of its runs or none of them (also after the next change and after a
`store rebuild`), no run folder is left that the store does not know, and every command
ends in an answer or one sentence. Runs are submitted to a fake Slurm (tests/fake_slurm.py),
where each gets its folder at submission as on a real cluster."""

from __future__ import annotations

import itertools
import json
import os
import random
import re
import shutil
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import fake_slurm
import pytest
from test_bundles import _members, _write

from conftest import BIN, HANG_S, REPO, dlscale, write_spec
from dlscale.engine.errors import StoreError
from dlscale.engine.tracking.store import Store, staging
from dlscale.engine.tracking.store import from_folders as recovery
from dlscale.engine.tracking.store import locks as store_locks
from tui_text import recorded_study

pytestmark = pytest.mark.timeout(900)

PROFILE = str(REPO / "examples" / "clusters" / "test-cluster.toml")
RUNS = 200  # runs in each bundle: an import and a rebuild take a second or two here
_RUN = re.compile(r"[0-9a-f]{12}")


def many(members: dict[str, bytes], n: int, path: Path) -> Path:
    """A bundle of `n` runs: the recorded quickstart's six, repeated under new ids."""
    runs = sorted({k.split("/")[1] for k in members if k.startswith("runs/")})
    out = {k: v for k, v in members.items() if not k.startswith("runs/")}
    for i in range(n):
        src, rid = runs[i % len(runs)], f"{i + 1:012x}"
        for name in ("run.json", "metrics.jsonl", "run.log"):
            data = members[f"runs/{src}/{name}"]
            if name == "run.json":
                row = {**json.loads(data), "run_id": rid, "rerun_of": None, "repetition": i}
                data = json.dumps(row).encode()
            out[f"runs/{rid}/{name}"] = data
    return _write(path, out)


def bundle_of(members: dict[str, bytes], site: str, n: int, path: Path) -> Path:
    manifest = {**json.loads(members["manifest.json"]), "site": site}
    return many({**members, "manifest.json": json.dumps(manifest).encode()}, n, path)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """A home holding the recorded study, an imported experiment of RUNS runs and a
    submitted one (queued at the fake Slurm); two more bundles to import; a spec to
    submit. Each case copies it."""
    base = tmp_path_factory.mktemp("atomic")
    home, state, bin_dir = base / "home", base / "slurm", base / "bin"
    state.mkdir()
    fake_slurm.install(bin_dir)
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "FAKE_SLURM_DIR": str(state),
        "NO_COLOR": "1",
    }
    recorded_study(home)
    one = base / "one.tgz"
    dlscale("export", "bundle", "-e", "quickstart", "--out", str(one), "--site", "x", home=home)
    members = _members(one)
    bundles = {s: bundle_of(members, s, RUNS, base / f"{s}.tgz") for s in ("old", "a", "b")}
    spec = write_spec(base / "sub.toml", name="sub", scales='"1x1"')
    spec.write_text(spec.read_text().replace("repetitions = 1\n", "repetitions = 3\n"))
    queued = write_spec(base / "queued.toml", name="queued", scales='"1x1"')
    for argv in (
        ["import", str(bundles["old"])],
        ["run", str(queued), "--backend", "slurm", "--profile", PROFILE],
    ):
        proc = _dlscale(home, env, *argv)
        assert proc.returncode == 0, proc.stderr
    commands = {
        "import a": ["import", str(bundles["a"])],
        "import b": ["import", str(bundles["b"])],
        "rebuild": ["store", "rebuild", "--force"],
        "run": ["run", str(spec), "--backend", "slurm", "--profile", PROFILE],
        "cancel": ["cancel", "--experiment", "queued"],
    }
    return {"base": base, "home": home, "state": state, "env": env, "commands": commands}


def _dlscale(home: Path, env: dict, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(BIN / "dlscale"), "--home", str(home), *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=HANG_S * 4,
    )


def _case(world, tmp_path) -> tuple[Path, dict]:
    """A copy of the world's home and fake Slurm, for one case."""
    home, state = tmp_path / "home", tmp_path / "slurm"
    shutil.copytree(world["home"], home, symlinks=True)
    shutil.copytree(world["state"], state)
    return home, {**world["env"], "FAKE_SLURM_DIR": str(state)}


def _start(home: Path, env: dict, argv: list[str]) -> subprocess.Popen:
    return subprocess.Popen(
        [str(BIN / "dlscale"), "--home", str(home), *argv],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _runs(home: Path) -> dict[str, tuple[str, str]]:
    """Every run the store holds: (experiment, state) by id; the store must open and pass
    SQLite's check."""
    store = Store(home)
    try:
        assert [r[0] for r in store.conn.execute("PRAGMA quick_check")] == ["ok"]
        return {r["run_id"]: (r["experiment"], r["state"]) for r in store.runs()}
    finally:
        store.close()


def _folders(home: Path) -> set[str]:
    return {p.name for p in (home / "runs").iterdir() if _RUN.fullmatch(p.name)}


def _sane(home: Path, before: dict[str, tuple[str, str]], imported: set[str]) -> dict:
    """What holds after any commands, whatever ended them: every run that was there still
    is, each import is all of its runs or none, every import that said so is all there,
    and no run folder is one the store does not know."""
    after = _runs(home)
    lost = set(before) - set(after)
    assert not lost, f"{len(lost)} run(s) lost, of {len(before)}"
    for site in ("a", "b"):
        n = sum(e == f"quickstart@{site}" for e, _ in after.values())
        assert n in (0, RUNS), f"import of {site}: {n} of {RUNS} runs in the store"
        if site in imported:
            assert n == RUNS, f"import of {site} said it added them; the store has {n}"
    orphans = _folders(home) - set(after)
    assert not orphans, f"{len(orphans)} run folder(s) the store does not know"
    return after


def _one_answer(name: str, proc: subprocess.Popen, out: str, err: str) -> None:
    assert proc.returncode in (0, 1, 2), (name, proc.returncode, err[-2000:])
    assert "Traceback" not in err and "internal error" not in err, (name, err[-2000:])
    if proc.returncode:
        said = [line for line in err.splitlines() if line.startswith("dlscale: error")]
        assert len(said) == 1, (name, err[-2000:])


def _imported(name: str, code: int) -> set[str]:
    """The site an import that said it was done came from."""
    return {name.split()[1]} if name.startswith("import") and code == 0 else set()


CHANGES = ["import a", "import b", "rebuild", "run", "cancel"]
PAIRS = list(itertools.combinations_with_replacement(CHANGES, 2))


@pytest.mark.parametrize("pair", PAIRS, ids=["+".join(p).replace(" ", "-") for p in PAIRS])
def test_two_store_changes_at_once_lose_nothing(world, tmp_path, pair):
    home, env = _case(world, tmp_path)
    before = _runs(home)
    procs = [(name, _start(home, env, world["commands"][name])) for name in pair]
    imported: set[str] = set()
    for name, proc in procs:
        out, err = proc.communicate(timeout=HANG_S * 4)
        _one_answer(name, proc, out, err)
        imported |= _imported(name, proc.returncode)
        if name == "run" and proc.returncode == 0:
            imported.add("run")
    after = _sane(home, before, imported)
    if "run" in imported:
        assert sum(e == "sub" for e, _ in after.values()) == 3
    # a rebuild afterwards keeps every run that has a folder, and brings back no part
    rebuilt = _dlscale(home, env, "store", "rebuild", "--force")
    assert rebuilt.returncode == 0, rebuilt.stderr
    final = _sane(home, {k: v for k, v in after.items() if k in _folders(home)}, imported)
    assert set(final) == _folders(home)


SIGNALS = [signal.SIGKILL, signal.SIGTERM, signal.SIGINT]


def test_store_changes_killed_at_random_points_happen_whole_or_not_at_all(world, tmp_path):
    """Bounded in time: as many kills as fit in the budget (at least four), each at a
    random moment of a command's life, by a random signal; the seed is printed."""
    seed = int(os.environ.get("DLSCALE_TEST_SEED") or time.time())
    rng = random.Random(seed)
    print(f"seed {seed} (DLSCALE_TEST_SEED={seed} repeats it)")
    took = {}
    for name in ("import a", "rebuild", "run"):  # how long each takes whole, here
        home, env = _case(world, tmp_path / f"time-{name.replace(' ', '-')}")
        start = time.monotonic()
        assert _dlscale(home, env, *world["commands"][name]).returncode == 0
        took[name] = time.monotonic() - start
    end, tries = time.monotonic() + 60, 0
    while tries < 4 or time.monotonic() < end:
        tries += 1
        name = rng.choice(["import a", "import a", "rebuild", "run"])
        sig, delay = rng.choice(SIGNALS), rng.uniform(0.2, took[name])
        where = f"seed {seed}, try {tries}: {name} sent {sig.name} after {delay:.2f} s"
        home, env = _case(world, tmp_path / f"kill-{tries}")
        before = _runs(home)
        proc = _start(home, env, world["commands"][name])
        time.sleep(delay)
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=HANG_S * 4)
        assert "Traceback" not in err and "internal error" not in err, (where, err[-2000:])
        imported = _imported(name, proc.returncode)
        try:
            after = _sane(home, before, imported)
            # the next change finishes or removes what the killed one left
            nxt = _dlscale(home, env, *world["commands"]["import b"])
            assert nxt.returncode == 0, nxt.stderr
            after = _sane(home, after, imported | {"b"})
            assert not (home / "runs" / staging.STAGING).exists()
            rebuilt = _dlscale(home, env, "store", "rebuild", "--force")
            assert rebuilt.returncode == 0, rebuilt.stderr
            kept = {k: v for k, v in after.items() if k in _folders(home)}
            final = _sane(home, kept, imported | {"b"})
            assert set(final) == _folders(home)
            assert not list(home.glob("dlscale.db.rebuilding-*"))
        except AssertionError as exc:
            raise AssertionError(f"{where}: {exc}") from None


# --- the locks, one sentence each -------------------------------------------------------------


def test_a_change_waits_for_another_then_refuses_in_one_sentence(tmp_path):
    home = tmp_path / "home"
    Store(home).close()
    with store_locks.changing(home, "import"):
        with pytest.raises(StoreError) as refused:
            with store_locks.changing(home, "import", wait_s=0.2):
                pass
    said = str(refused.value)
    assert "\n" not in said and f"pid {os.getpid()}: import" in said and "nothing" in said
    with store_locks.changing(home, "import", wait_s=0.2):  # released: taken at once
        pass


def test_a_rebuild_refuses_while_another_process_has_the_store_open(tmp_path, monkeypatch):
    home = tmp_path / "home"
    recorded_study(home)
    monkeypatch.setattr(store_locks, "WAIT_S", 0.3)
    store = Store(home)  # as the TUI, or `run --wait`, holds it
    try:
        with pytest.raises(StoreError, match="open in another dlscale process") as refused:
            recovery.rebuild(home, force=True)
        assert "\n" not in str(refused.value)
        assert not list(home.glob("dlscale.db.*"))  # nothing kept aside, nothing made
    finally:
        store.close()
    assert len(recovery.rebuild(home, force=True).kept_aside) == 1


def test_a_store_opened_during_a_rebuild_waits_then_refuses_in_one_sentence(tmp_path, monkeypatch):
    home = tmp_path / "home"
    recorded_study(home)
    monkeypatch.setattr(store_locks, "WAIT_S", 0.3)
    with store_locks.replacing(home):
        with pytest.raises(StoreError, match="being rebuilt") as refused:
            Store(home)
    assert "store rebuild" in str(refused.value) and "\n" not in str(refused.value)
    Store(home).close()


def test_a_partial_import_is_never_rebuilt_and_a_decided_one_always_is(tmp_path, world):
    """The two states a killed import leaves, made exactly: staged but not decided (its
    folders are removed), and decided (its folders are moved in, whole)."""
    home, env = _case(world, tmp_path)
    before = _runs(home)
    runs_dir = home / "runs"
    partial = staging.Staged.begin(runs_dir, "import")
    for i in range(5):
        (partial.folder(f"{0xABC000 + i:012x}")).mkdir()
    decided = staging.Staged.begin(runs_dir, "import")
    moved = {f"{0xDEF000 + i:012x}" for i in range(5)}
    for rid in moved:
        src = next(p for p in runs_dir.iterdir() if p.name in before)
        shutil.copytree(src, decided.folder(rid))
        row = json.loads((decided.folder(rid) / "run.json").read_text())
        (decided.folder(rid) / "run.json").write_text(json.dumps({**row, "run_id": rid}))
    decided.decide({"experiment": {}, "rows": [], "records": {}})
    rebuilt = _dlscale(home, env, "store", "rebuild", "--force")
    assert rebuilt.returncode == 0, rebuilt.stderr
    after = _runs(home)
    assert set(before) | moved == set(after)
    assert not any(f"{0xABC000 + i:012x}" in after for i in range(5))
    assert not (runs_dir / staging.STAGING).exists()


def test_a_killed_rebuild_leaves_the_old_store_and_its_file_goes_next_time(tmp_path, world):
    home, env = _case(world, tmp_path)
    before = _runs(home)
    db = home / "dlscale.db"
    unfinished = home / "dlscale.db.rebuilding-1-0000"
    shutil.copy(db, unfinished)  # as a rebuild killed while it filled its new file
    with sqlite3.connect(unfinished) as conn:
        conn.execute("DELETE FROM runs")
    assert _runs(home) == before  # the store is the old one
    rebuilt = _dlscale(home, env, "store", "rebuild", "--force")
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert set(_runs(home)) == set(before) and not unfinished.exists()
