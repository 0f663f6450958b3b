"""Bundles: an experiment exported from one store and imported into another, its site kept
as part of each point's identity; hostile bundles refused whole with the store untouched.
Stores are built from the quickstart's recorded records (tests/fixtures/tui-quickstart)."""

import hashlib
import io
import json
import tarfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import dlscale
from dlscale.engine.results import analysis, bundles
from dlscale.engine.results.bundles import read as bundle_read
from dlscale.engine.results.bundles.read import BundleError, read_bundle
from dlscale.engine.tracking.store import Store
from tui_text import recorded_study


def _export(tmp_path: Path, name: str, site: str) -> Path:
    home = tmp_path / f"home-{name}"
    recorded_study(home)
    out = tmp_path / f"{name}.tar.gz"
    dlscale(
        "export",
        "bundle",
        "-e",
        "quickstart",
        "--out",
        str(out),
        "--site",
        site,
        home=home,
        check=0,
    )
    return out


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    return _export(tmp_path_factory.mktemp("bundle"), "alpha", "alpha")


def _dump(home: Path) -> tuple[list[str], list[str]]:
    """Everything in a store: its rows (SQL text) and its run folders' files."""
    store = Store(home)
    try:
        rows = [line for line in store.conn.iterdump() if "counters" not in line]
    finally:
        store.close()
    files = sorted(str(p.relative_to(home)) for p in (home / "runs").rglob("*"))
    return rows, files


def test_two_sites_import_into_a_third_store_beside_its_own_runs(tmp_path, bundle):
    beta = _export(tmp_path, "beta", "beta")
    third = tmp_path / "third"
    recorded_study(third)  # the third site's own quickstart: the same spec, the same ids
    for b in (bundle, beta):
        out = dlscale("import", str(b), home=third, check=0).stdout
        assert "6 run(s) added" in out
    store = Store(third)
    assert store.experiment_names() == ["quickstart", "quickstart@alpha", "quickstart@beta"]
    points = analysis.points(store)
    # the same configurations measured at three sites are three points each, never merged
    assert len(points) == 6
    assert sorted({p.experiment for p in points}) == store.experiment_names()
    for p in points:
        assert len(p.throughputs) == 3
        assert p.baseline is not None and p.baseline.experiment == p.experiment
    sites = {r["experiment"]: r["site"] for r in store.runs()}
    assert sites == {"quickstart": None, "quickstart@alpha": "alpha", "quickstart@beta": "beta"}
    here = {p.devices: p.throughputs for p in points if p.experiment == "quickstart"}
    there = {p.devices: p.throughputs for p in points if p.experiment == "quickstart@alpha"}
    assert here == there  # the same records, carried whole
    imported = next(r for r in store.runs("quickstart@alpha"))
    folder = Path(imported["run_dir"])
    names = {p.name for p in folder.iterdir()}
    assert {"run.json", "metrics.jsonl", "run.log", "spec.toml"} <= names
    assert json.loads((folder / "run.json").read_text())["site"] == "alpha"
    store.close()
    # nothing imported can be submitted again here
    proc = dlscale("resubmit", imported["run_id"], home=third, check=2)
    assert "imported from site alpha" in proc.stderr


def test_importing_twice_changes_nothing(tmp_path, bundle):
    home = tmp_path / "h"
    dlscale("import", str(bundle), home=home, check=0)
    before = _dump(home)
    out = dlscale("import", str(bundle), home=home, check=0).stdout
    assert "0 run(s) added, 0 updated, 6 unchanged" in out
    assert _dump(home) == before


@pytest.mark.parametrize("site", [None, "elsewhere"])
def test_a_bundle_imported_into_the_store_it_came_from_is_refused_and_nothing_changes(
    tmp_path, site
):
    """Its runs are this store's own (the same ids, made at the same moment, the same
    records), whatever site the bundle names: imported, they would only be copied as
    NAME@SITE, a second site that measured nothing. Refused in one line, exit 2, the store
    as it was. (Another store's runs of the same spec, the same ids and records, are
    imported: test_two_sites_import_into_a_third_store_beside_its_own_runs.)"""
    home = tmp_path / "h"
    recorded_study(home)
    out = tmp_path / "own.tar.gz"
    named = ["--site", site] if site else []
    dlscale("export", "bundle", "--out", str(out), *named, home=home, check=0)
    before = _dump(home)
    proc = dlscale("import", str(out), home=home, check=2)
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert "6 of the bundle's 6 run(s) are this store's own runs of quickstart" in proc.stderr
    assert "exported from this store" in proc.stderr and "nothing was imported" in proc.stderr
    assert _dump(home) == before
    assert [e["name"] for e in Store(home).experiments()] == ["quickstart"]


def test_the_manifest_names_site_version_and_every_member(bundle):
    with tarfile.open(bundle) as tar:
        names = tar.getnames()
        manifest = json.loads(tar.extractfile("manifest.json").read())
        for name in names:
            if name != "manifest.json":
                data = tar.extractfile(name).read()
                assert manifest["files"][name] == hashlib.sha256(data).hexdigest()
    assert manifest["site"] == "alpha" and manifest["experiment"] == "quickstart"
    assert manifest["dlscale_version"] == bundles.dlscale_version()
    assert set(manifest["files"]) == set(names) - {"manifest.json"}
    assert sum(n.endswith("/metrics.jsonl") for n in names) == 6


def test_export_refuses_what_it_cannot_do_cleanly(tmp_path, bundle):
    home = tmp_path / "h"
    recorded_study(home)
    dlscale("import", str(bundle), home=home, check=0)
    proc = dlscale(
        "export",
        "bundle",
        "-e",
        "quickstart@alpha",
        "--out",
        str(tmp_path / "x"),
        home=home,
        check=2,
    )
    assert "imported from alpha" in proc.stderr
    proc = dlscale("export", "bundle", "-e", "quickstart", "--out", str(bundle), home=home, check=2)
    assert "already exists" in proc.stderr
    proc = dlscale(
        "export",
        "bundle",
        "-e",
        "quickstart",
        "--site",
        "a b;rm",
        "--out",
        str(tmp_path / "y"),
        home=home,
        check=2,
    )
    assert "--site" in proc.stderr and not (tmp_path / "y").exists()


# --- hostile bundles ---------------------------------------------------------------------


def _members(path: Path) -> dict[str, bytes]:
    with tarfile.open(path) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers()}


def _write(path: Path, members: dict[str, bytes], extra=(), reseal=True) -> Path:
    """A bundle of these members (the manifest's checksums made again when `reseal`), and
    `extra` TarInfo entries as given (links, devices)."""
    members = dict(members)
    if reseal:
        manifest = json.loads(members["manifest.json"])
        manifest["files"] = {
            n: hashlib.sha256(b).hexdigest() for n, b in members.items() if n != "manifest.json"
        }
        members["manifest.json"] = json.dumps(manifest).encode()
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for info in extra:
            tar.addfile(info)
    return path


def _first(members: dict[str, bytes], suffix: str) -> str:
    return next(n for n in sorted(members) if n.endswith(suffix))


def _link(name: str, kind: bytes, target: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    return info


def _hostile(bundle: Path, tmp_path: Path) -> dict[str, tuple[Path, str]]:
    m = _members(bundle)
    metrics, run_json = _first(m, "metrics.jsonl"), _first(m, "run.json")
    run_dir = run_json.rsplit("/", 1)[0]
    bad_row = json.loads(m[run_json])
    bad_row["nodes"] = "two"
    bad_line = m[metrics].replace(b'"throughput": ', b'"throughput": "fast", "x": ', 1)
    tampered = {**m, metrics: m[metrics] + b'{"kind": "summary"}\n'}
    cases = {
        "checksum": (_write(tmp_path / "sum.tgz", tampered, reseal=False), "checksum fails"),
        "absolute": (_write(tmp_path / "abs.tgz", {**m, "/etc/passwd": b"x"}), "absolute path"),
        "dotdot": (_write(tmp_path / "up.tgz", {**m, "runs/../../x": b"x"}), "leaves the bundle"),
        "symlink": (
            _write(tmp_path / "sym.tgz", m, [_link(f"{run_dir}/job.sh", tarfile.SYMTYPE, "/etc")]),
            "a link",
        ),
        "hardlink": (
            _write(tmp_path / "hard.tgz", m, [_link("x", tarfile.LNKTYPE, "manifest.json")]),
            "a link",
        ),
        "device": (
            _write(tmp_path / "dev.tgz", m, [_link(f"{run_dir}/run.log", tarfile.CHRTYPE)]),
            "not a regular file",
        ),
        "fifo": (_write(tmp_path / "fifo.tgz", m, [_link("f", tarfile.FIFOTYPE)]), "not a regular"),
        "unknown member": (_write(tmp_path / "odd.tgz", {**m, "runs/x.py": b"1"}), "not a member"),
        "bad record": (_write(tmp_path / "rec.tgz", {**m, metrics: bad_line}), "jsonl line"),
        "bad row": (
            _write(tmp_path / "row.tgz", {**m, run_json: json.dumps(bad_row).encode()}),
            "nodes",
        ),
        "unlisted": (
            _write(tmp_path / "unl.tgz", {**m, f"{run_dir}/profile.toml": b""}, reseal=False),
            "not listed",
        ),
        "not a bundle": (tmp_path / "junk.tgz", "not a dlscale bundle"),
    }
    (tmp_path / "junk.tgz").write_bytes(b"\x1f\x8b not really gzip")
    return cases


def test_hostile_bundles_are_refused_whole_and_the_store_is_untouched(tmp_path, bundle):
    home = tmp_path / "h"
    recorded_study(home)
    before = _dump(home)
    for what, (path, says) in _hostile(bundle, tmp_path).items():
        proc = dlscale("import", str(path), home=home)
        assert proc.returncode == 2, (what, proc.stdout, proc.stderr)
        assert says in proc.stderr and "nothing was imported" in proc.stderr, (what, proc.stderr)
        assert "Traceback" not in proc.stderr
        assert _dump(home) == before, what
    assert not list(tmp_path.glob("etc*")) and not (tmp_path.parent / "x").exists()


def test_bounds_on_members_and_size(tmp_path, bundle, monkeypatch):
    m = _members(bundle)
    monkeypatch.setattr(bundle_read, "MAX_MEMBERS", 5)
    with pytest.raises(BundleError, match="more than 5 members"):
        read_bundle(bundle)
    monkeypatch.setattr(bundle_read, "MAX_MEMBERS", 100_000)
    monkeypatch.setattr(bundle_read, "MAX_BYTES", 10_000)
    with pytest.raises(BundleError, match="over 0 MiB|more than 0 MiB"):
        read_bundle(bundle)
    monkeypatch.setattr(bundle_read, "MAX_BYTES", 1 << 30)
    # a bomb: one member claiming far more than it may hold is refused by its header
    monkeypatch.setattr(bundle_read, "MAX_MEMBER_BYTES", 1000)
    big = _write(tmp_path / "big.tgz", {**m, _first(m, "run.log"): b"\0" * 5000})
    with pytest.raises(BundleError, match="over the 0 MiB a member may hold"):
        read_bundle(big)


_PROPERTY = settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@_PROPERTY
@given(data=st.data())
def test_any_changed_byte_of_any_member_is_refused(tmp_path, bundle, data):
    """Property: a bundle whose member differs from its checksum by any byte is refused."""
    m = _members(bundle)
    name = data.draw(st.sampled_from(sorted(n for n in m if n != "manifest.json")))
    body = m[name]
    at = data.draw(st.integers(0, max(0, len(body) - 1)))
    flip = data.draw(st.integers(1, 255))
    changed = body[:at] + bytes([(body[at] if body else 0) ^ flip]) + body[at + 1 :]
    path = _write(tmp_path / "p.tgz", {**m, name: changed}, reseal=False)
    with pytest.raises(BundleError, match="checksum fails"):
        read_bundle(path)


@_PROPERTY
@given(name=st.text(st.sampled_from("ab./\\:-_"), min_size=1, max_size=20))
def test_only_the_bundles_own_member_names_are_taken(tmp_path, bundle, name):
    """Property: a member named anything but manifest.json, experiment.json or
    runs/RUN/FILE is refused, whatever the name holds."""
    m = _members(bundle)
    if name.rstrip("/") in m:
        return
    path = _write(tmp_path / "n.tgz", {**m, name: b"x"})
    with pytest.raises(BundleError):
        read_bundle(path)


def test_a_rebuilt_store_keeps_imported_runs_apart(tmp_path, bundle):
    home = tmp_path / "h"
    recorded_study(home)
    dlscale("import", str(bundle), home=home, check=0)
    dlscale("store", "rebuild", "--force", home=home, check=0)
    store = Store(home)
    runs = store.runs("quickstart@alpha")
    assert len(runs) == 6 and {r["site"] for r in runs} == {"alpha"}
    assert {r["state"] for r in runs} == {"COMPLETED"}
    # the local runs (placed from their records: the fixture's folders hold no run.json)
    assert {r["site"] for r in store.runs() if r["experiment"] != "quickstart@alpha"} == {None}
    from dlscale.engine.results.compare import site_of

    assert site_of(store, "quickstart@alpha") == "alpha"
    assert [len(p.throughputs) for p in analysis.points(store, "quickstart@alpha")] == [3, 3]


def test_a_later_bundle_of_the_same_site_replaces_only_what_changed(tmp_path):
    source = tmp_path / "source"
    recorded_study(source)
    first, later = tmp_path / "first.tar.gz", tmp_path / "later.tar.gz"
    dlscale("export", "bundle", "--site", "s", "--out", str(first), home=source, check=0)
    store = Store(source)
    changed = store.runs("quickstart")[0]["run_id"]
    store.conn.execute("UPDATE runs SET state='FAILED', reason='x' WHERE run_id=?", (changed,))
    store.close()
    dlscale("export", "bundle", "--site", "s", "--out", str(later), home=source, check=0)
    home = tmp_path / "h"
    dlscale("import", str(first), home=home, check=0)
    out = dlscale("import", str(later), home=home, check=0).stdout
    assert "0 run(s) added, 1 updated, 5 unchanged" in out
    states = [r["state"] for r in Store(home).runs("quickstart@s")]
    assert states.count("FAILED") == 1 and states.count("COMPLETED") == 5
