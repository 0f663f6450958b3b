"""`dlscale report --out` into folders that hold other things: it removes only what its own
earlier report there wrote (its manifest), writes nothing through links, and refuses a
non-empty folder that holds no report of dlscale's unless --force. The store is filled
through its own API (no training), the report made by the real command."""

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from test_store import line, make_run

from conftest import dlscale
from dlscale.engine.errors import UserError
from dlscale.engine.results.report import document as reporting
from dlscale.engine.results.report.folder import MANIFEST
from dlscale.engine.tracking.store import Store


def add_experiment(store: Store, tmp_path: Path, name: str, tta: bool = False) -> list[str]:
    """A completed 1- and 2-rank experiment; with `tta`, a time-to-accuracy figure too."""
    store.save_experiment(
        name, str(tmp_path / f"{name}.toml"), f'[experiment]\nname = "{name}"\n', "0" * 64
    )
    ids = []
    for rpn in (1, 2):
        run = make_run(experiment=name, ranks_per_node=rpn)
        store.add_run(run)
        metrics = tmp_path / f"{run.run_id}.jsonl"
        metrics.write_text(
            line("params", run_id=run.run_id)
            + line(
                "summary",
                status="completed",
                throughput=100.0 * rpn,
                timed_steps=10,
                warmup_steps=1,
                elapsed_s=1.0,
                time_to_accuracy_s=5.0 / rpn if tta else None,
                best_top1=0.9 if tta else None,
            )
        )
        store.records.ingest(run.run_id, metrics)
        store.update_run(run.run_id, state="COMPLETED")
        ids.append(run.run_id)
    return ids


def snapshot(folder: Path) -> dict[str, bytes | str]:
    """Every entry under folder (links as their target text, never followed)."""
    out = {}
    for p in sorted(folder.rglob("*")):
        rel = str(p.relative_to(folder))
        if p.is_symlink():
            out[rel] = "-> " + str(p.readlink())
        elif p.is_file():
            out[rel] = p.read_bytes()
    return out


@pytest.fixture
def store(home, tmp_path):
    s = Store(home)
    yield s
    s.close()


def test_user_files_beside_a_report_survive_the_next_report(store, tmp_path):
    first = add_experiment(store, tmp_path, "first", tta=True)
    second = add_experiment(store, tmp_path, "second")
    out = tmp_path / "rep"
    made = reporting.build(store, "first", out)
    assert (out / "figures" / "tta.png").is_file()
    assert {p.name for p in (out / "mllog").iterdir()} == {f"{r}.mllog" for r in first}
    mine = {
        "figures/mine.png": b"my figure",
        "mllog/notes.mllog": b"my notes",
        "reruns.json": b'{"mine": 1}',
        "reference.json": b'{"mine": 2}',
        "notes.md": b"# my notes",
    }
    for rel, data in mine.items():
        (out / rel).write_bytes(data)

    made = reporting.build(store, "second", out)
    for rel, data in mine.items():
        assert (out / rel).read_bytes() == data, rel
    # the first report's own files that the second did not write again are gone
    assert not (out / "figures" / "tta.png").exists()
    assert {p.name for p in (out / "mllog").iterdir()} == {"notes.mllog"} | {
        f"{r}.mllog" for r in second
    }
    assert "figures/tta.png" in made.removed and f"mllog/{first[0]}.mllog" in made.removed
    listed = json.loads((out / MANIFEST).read_text())["files"]
    assert set(listed) == {
        str(p.relative_to(out)) for p in [made.path, *(f.path for f in made.figures), *made.mllogs]
    } | {"results.csv", "results.json", "projection.json"}
    assert not list(out.glob(".dlscale-report-*"))  # no staging folder left behind


def test_a_folder_with_no_manifest_is_refused_and_force_keeps_its_files(store, tmp_path):
    add_experiment(store, tmp_path, "e")
    out = tmp_path / "old"
    files = {
        "figures/x.png": b"not dlscale's",
        "mllog/y.mllog": b"mine",
        "reruns.json": b"[1]",
        "reference.json": b"[2]",
    }
    for rel, data in files.items():
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_bytes(data)
    before = snapshot(out)
    proc = dlscale("report", "--out", str(out), check=2)
    assert f"--out {out}: the folder is not empty" in proc.stderr and "--force" in proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert snapshot(out) == before  # refused: nothing written, nothing removed

    proc = dlscale("report", "--out", str(out), "--force", check=0)
    after = snapshot(out)
    assert {k: after[k] for k in before} == before and "report.md" in after


def test_a_report_never_writes_through_or_removes_via_links(store, tmp_path):
    add_experiment(store, tmp_path, "e")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "speedup.png").write_bytes(b"someone else's figure")
    (outside / "keep.png").write_bytes(b"keep")
    (outside / "page.md").write_text("someone else's page")
    kept = snapshot(outside)

    out = tmp_path / "rep"
    reporting.build(store, "e", out)
    shutil.rmtree(out / "figures")
    (out / "figures").symlink_to(outside)  # figures/ now leads outside --out
    proc = dlscale("report", "--out", str(out), check=2)
    assert "figures is a link or a file" in proc.stderr and "Traceback" not in proc.stderr
    assert snapshot(outside) == kept

    (out / "figures").unlink()
    (out / "report.md").unlink()
    (out / "report.md").symlink_to(outside / "page.md")  # a link where the page goes
    before = snapshot(out)
    proc = dlscale("report", "--out", str(out), check=2)
    assert "would overwrite report.md" in proc.stderr
    assert snapshot(outside) == kept and snapshot(out) == before


def test_files_changed_since_or_not_of_a_reports_shape_are_the_users(store, tmp_path):
    add_experiment(store, tmp_path, "e")
    out = tmp_path / "rep"
    reporting.build(store, "e", out)
    (out / "results.csv").write_text("my edits")
    with pytest.raises(UserError, match="would overwrite results.csv"):
        reporting.build(store, "e", out)
    assert (out / "results.csv").read_text() == "my edits"

    # A manifest is a file anyone can edit: entries outside a report's own names (with the
    # right digests even) are never removed.
    (out / "results.csv").unlink()
    (tmp_path / "outside.txt").write_text("outside")
    (out / "notes.txt").write_text("notes")
    manifest = json.loads((out / MANIFEST).read_text())
    for rel, text in (("../outside.txt", "outside"), ("notes.txt", "notes")):
        manifest["files"][rel] = [hashlib.sha256(text.encode()).hexdigest()]
    (out / MANIFEST).write_text(json.dumps(manifest))
    reporting.build(store, "e", out)
    assert (tmp_path / "outside.txt").read_text() == "outside"
    assert (out / "notes.txt").read_text() == "notes"
    assert (out / "results.csv").is_file()

    (out / MANIFEST).write_text("not json")
    with pytest.raises(UserError, match=f"{MANIFEST} is not a manifest dlscale wrote"):
        reporting.build(store, "e", out, force=True)


@pytest.mark.parametrize("sub", ["figures", "mllog"])
def test_a_link_swapped_in_while_the_report_renders_is_never_written_through(
    store, tmp_path, monkeypatch, sub
):
    """Issue 22, item 2: OUT/figures replaced by a link after the stage appeared made
    dlscale overwrite the files the link pointed to. The swap happens at a fixed step of the
    render (after the figures, while the MLLOG files are written)."""
    ids = add_experiment(store, tmp_path, "e")
    out = tmp_path / "rep"
    reporting.build(store, "e", out)
    outside = tmp_path / "outside"
    outside.mkdir()
    for p in (out / sub).iterdir():  # the user's own files, named as the report's are
        (outside / p.name).write_bytes(b"the user's own " + p.name.encode())
    kept = snapshot(outside)
    assert kept and len(ids) == 2
    real_write = reporting.mllog.write

    def swapping(*args, **kwargs):
        shutil.rmtree(out / sub)
        (out / sub).symlink_to(outside)
        return real_write(*args, **kwargs)

    monkeypatch.setattr(reporting.mllog, "write", swapping)
    with pytest.raises(UserError, match=f"{sub} became a link or a file"):
        reporting.build(store, "e", out)
    assert snapshot(outside) == kept
    assert (out / sub).is_symlink()  # the link itself is left as the user made it
    assert not list(out.glob(".dlscale-report-*"))


def test_a_killed_report_does_not_block_the_next_one(store, tmp_path, home):
    """A report killed mid-way (SIGKILL as soon as its staging folder appears) leaves that
    folder: it is dlscale's, and the next report removes it and writes, into a folder that
    held nothing else and into one that held an earlier report."""
    import signal
    import subprocess

    from conftest import BIN, HANG_S

    add_experiment(store, tmp_path, "e")
    for earlier in (False, True):
        out = tmp_path / f"rep-{earlier}"
        if earlier:
            reporting.build(store, "e", out)
        proc = subprocess.Popen(
            [str(BIN / "dlscale"), "report", "--out", str(out)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            while not list(out.glob(".dlscale-report-*/")) and proc.poll() is None:
                pass
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=HANG_S)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert list(out.glob(".dlscale-report-*/")), "killed before its stage appeared"
        made = dlscale("report", "--out", str(out), check=0)
        assert "report of e" in made.stdout
        assert not list(out.glob(".dlscale-report-*")), list(out.iterdir())
        assert (out / "report.md").is_file()


def test_a_report_killed_before_it_marked_its_stage_leaves_nothing_behind(store, tmp_path):
    """The stage is made (mkdtemp), then locked and marked: a kill in between leaves an
    empty, unmarked folder of the stage's name. The next report removes it; an unmarked
    folder that holds anything, or is named otherwise, is left as it is."""
    import tempfile

    add_experiment(store, tmp_path, "e")
    out = tmp_path / "rep"
    out.mkdir()
    killed = Path(tempfile.mkdtemp(dir=out, prefix=".dlscale-report-"))
    kept_full = out / ".dlscale-report-abcd1234"
    kept_full.mkdir()
    (kept_full / "notes.txt").write_text("mine\n")
    kept_named = out / ".dlscale-report-mine"
    kept_named.mkdir()
    reporting.build(store, "e", out, force=True)
    assert not killed.exists()
    assert (kept_full / "notes.txt").read_text() == "mine\n"
    assert kept_named.is_dir()
    assert (out / "report.md").is_file()


def test_a_live_reports_stage_is_not_taken_for_a_leftover(store, tmp_path):
    from dlscale.engine.results.report.folder import ReportFolder

    out = tmp_path / "rep"
    first = ReportFolder.open(out)
    try:
        second = ReportFolder.open(out, force=True)  # another report at the same moment
        second.discard()
        assert first.stage.is_dir()
        (out / ".dlscale-report-user").mkdir()  # the user's, no marker: never removed
        ReportFolder.open(out, force=True).discard()
        assert (out / ".dlscale-report-user").is_dir() and first.stage.is_dir()
    finally:
        first.discard()
