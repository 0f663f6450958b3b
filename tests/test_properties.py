"""Property-based tests (issue 22): generated metric records, specs and run folders go
through ingest, status, results, export, report and rebuild with no internal error and no
hang. Records are valid ones, ones with a field changed to any JSON value or dropped, and
hostile lines, joined by any line break; specs are a valid spec with any of its values
replaced by any TOML value; run folders hold any of those files, or a folder, FIFO or link
in their place. In-process calls carry most examples (a CLI call costs a second); a few
go through the real `dlscale` commands."""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

import pytest
import tomli_w
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_hostile_records import GOOD, finished_run

from conftest import HANG_S, dlscale
from dlscale.engine.config import specfile
from dlscale.engine.config.spec import load_spec
from dlscale.engine.errors import DlscaleError
from dlscale.engine.launching.plan import plan
from dlscale.engine.paths import write_run_file
from dlscale.engine.results import analysis
from dlscale.engine.results.report import mllog
from dlscale.engine.results.tables import status_table
from dlscale.engine.tracking import queue
from dlscale.engine.tracking.store import Store
from dlscale.engine.tracking.store.from_folders import rebuild
from dlscale.trainers.common.records import REQUIRED, TYPES


def examples(n: int) -> settings:
    """n examples in CI (the file takes about 45 s); DLSCALE_PROPERTY_EXAMPLES=N searches
    deeper by hand."""
    return settings(
        max_examples=int(os.environ.get("DLSCALE_PROPERTY_EXAMPLES") or n),
        deadline=None,
        database=None,
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
            HealthCheck.function_scoped_fixture,  # capsys and monkeypatch are reset per call
        ],
    )


# --- values -----------------------------------------------------------------------------

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**80), max_value=2**80),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
)


def nested(leaves: st.SearchStrategy, most: int) -> st.SearchStrategy:
    """Values made of `leaves` in lists and tables (JSON's or TOML's)."""
    return st.recursive(
        leaves,
        lambda kids: (
            st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=6), kids, max_size=3)
        ),
        max_leaves=most,
    )


json_values = nested(scalars, 12)
_GOOD_VALUE = {
    "count": st.integers(min_value=0, max_value=10**6),
    "number": st.floats(min_value=-1e6, max_value=1e6),
    "rate": st.floats(min_value=0, max_value=1e6),
    "fraction": st.floats(min_value=0, max_value=1),
    "throughput": st.just(0.0) | st.floats(min_value=1e-9, max_value=1e6),
    "text": st.text(max_size=12),
    "flag": st.booleans(),
    "list": st.lists(st.text(max_size=6), max_size=3),
    "texts": st.lists(st.text(max_size=6), max_size=3),
    "table": st.dictionaries(st.text(max_size=6), st.text(max_size=6), max_size=3),
    "names": st.dictionaries(st.text(max_size=6), st.none() | st.text(max_size=6), max_size=3),
}
HOSTILE_LINES = [
    "[" * 100_000 + "]" * 100_000,
    '{"kind": "interval", "time": 1, "step": 1e400, "images_per_s": 1, "loss": 1}',
    '{"kind": "interval", "time": 1, "step": ' + "9" * 5000 + ', "images_per_s": 1, "loss": 1}',
    '{"kind": ["summary"]}',
    "\x00\x1b]0;title\x07",
    "",
]


@st.composite
def records(draw: Any) -> str:
    """One line: a valid record of any kind, perhaps with one field changed or dropped."""
    kind = draw(st.sampled_from(sorted(REQUIRED)))
    fields = {**TYPES["*"], **TYPES[kind]}
    rec: dict[str, Any] = {"kind": kind, "schema": 1, "time": draw(_GOOD_VALUE["number"])}
    for name, want in fields.items():
        if name in REQUIRED[kind] or draw(st.booleans()):
            rec[name] = draw(_GOOD_VALUE[want.rstrip("?")])
    change = draw(st.sampled_from(["none", "none", "value", "drop", "kind"]))
    if change == "value":
        rec[draw(st.sampled_from(sorted(rec)))] = draw(json_values)
    elif change == "drop":
        rec.pop(draw(st.sampled_from(sorted(rec))))
    elif change == "kind":
        rec["kind"] = draw(json_values)
    return json.dumps(rec)


metric_files = st.builds(
    lambda lines, sep, end: sep.join(line.encode() for line in lines) + (sep if end else b""),
    st.lists(records() | st.sampled_from(HOSTILE_LINES) | st.text(max_size=30), max_size=12),
    st.sampled_from([b"\n", b"\r\n", b"\r"]),
    st.booleans(),
)


def _every_reader(home: Path, run_ids: list[str]) -> None:
    """What status, results and export read of a store: none may raise."""
    store = Store(home)
    try:
        status_table(queue.rows(store))
        store.records.skipped_notes()
        for name in store.experiment_names():
            for row in analysis.results(store, name):  # no number a table cannot show
                for key, value in row.items():
                    assert not (isinstance(value, float) and math.isnan(value)), (key, row)
            analysis.notes(store, name)
        for run_id in run_ids:
            mllog.lines(store, run_id)
    finally:
        store.close()


# --- records ----------------------------------------------------------------------------


@examples(120)
@given(metrics=metric_files, state=st.sampled_from(["COMPLETED", "FAILED", "CANCELLED"]))
def test_any_records_file_is_ingested_read_and_rebuilt_alike(metrics, state):
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        store, run_id = finished_run(home, metrics, state)
        row = store.run(run_id)
        write_run_file(row, Path(row["run_dir"]), "local")
        before = (len(store.records.of(run_id)), row["bad_records"])
        assert row["state"] in ("COMPLETED", "FAILED", "CANCELLED")
        store.save_experiment(row["experiment"], "spec.toml", "", "")
        store.close()
        _every_reader(home, [run_id])
        rebuild(home, force=True)
        rebuilt = Store(home)
        again = (len(rebuilt.records.of(run_id)), rebuilt.run(run_id)["bad_records"])
        rebuilt.close()
        assert again == before  # the same file, the same rules, the same records kept
        _every_reader(home, [run_id])


# --- specs ------------------------------------------------------------------------------

toml_scalars = st.one_of(
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(["1x1", "01x1", "\u0661x1", "0", " 30", "30\n", "pytorch-ddp", "resnet20"]),
)
toml_values = nested(toml_scalars, 8)
BASE = {
    "experiment": {
        "name": "t",
        "frameworks": ["pytorch-ddp"],
        "models": ["resnet20"],
        "datasets": ["synthetic-cifar"],
        "scales": ["1x1", "1x2"],
        "per_device_batch": [8],
        "precisions": ["fp32"],
        "repetitions": 1,
    },
    "training": {"steps": 4, "warmup_steps": 1, "log_every": 2},
}
_KEYS = [(t, k) for t, table in BASE.items() for k in table] + [
    ("training", "loader_workers"),
    ("training", "lr"),
    ("experiment", "scaling"),
    ("experiment", "global_batch"),
    ("experiment", "loaders"),
]


@examples(400)
@given(
    changes=st.lists(st.tuples(st.sampled_from(_KEYS), toml_values), max_size=4),
    extra=st.dictionaries(st.text(max_size=6), toml_values, max_size=2),
)
def test_any_spec_is_loaded_or_refused_with_a_sentence(changes, extra):
    data = json.loads(json.dumps(BASE))
    for (table, key), value in changes:
        data[table][key] = value
    data.update({k: v for k, v in extra.items() if k not in data})
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "s.toml"
        try:
            path.write_text(tomli_w.dumps(data), encoding="utf-8")
        except (TypeError, ValueError, UnicodeEncodeError):
            return  # not writable as TOML (a nan key, lone surrogates): nothing to read
        try:
            loaded = load_spec(path)
        except DlscaleError as exc:
            assert exc.exit_code == 2 and str(path) in str(exc)
        else:
            runs = plan(loaded).runs
            assert len({r.run_id for r in runs}) == len(runs)  # never a duplicate run
            assert loaded.spec.training.steps is None or (
                loaded.spec.training.warmup_steps < loaded.spec.training.steps
            )
        form, problems = specfile.read(path)
        for value in form.get("experiment", {}).values():  # what the Build form holds
            for item in value if isinstance(value, list) else [value]:
                hash(tuple(item.items()) if isinstance(item, dict) else item)
        assert all(isinstance(p, str) for p in problems)


# --- run folders ------------------------------------------------------------------------

_ENTRY = st.sampled_from(["absent", "text", "folder", "fifo", "link-out", "link-loop", "empty"])


def _place(path: Path, how: str, text: bytes) -> None:
    if path.exists() or path.is_symlink():
        path.unlink()
    if how == "text":
        path.write_bytes(text)
    elif how == "empty":
        path.write_bytes(b"")
    elif how == "folder":
        path.mkdir()
    elif how == "fifo":
        os.mkfifo(path)
    elif how == "link-out":
        path.symlink_to("/dev/zero")
    elif how == "link-loop":
        path.symlink_to(path.name)


@examples(100)
@given(
    metrics=metric_files,
    run_json=st.sampled_from(["good", "any"]),
    any_json=json_values,
    entries=st.fixed_dictionaries(
        {
            "run.json": _ENTRY,
            "metrics.jsonl": _ENTRY,
            "run.log": _ENTRY,
            "rerun_of": _ENTRY,
            "spec.toml": _ENTRY,
            "attempts": _ENTRY,
        }
    ),
    log=st.binary(max_size=200),
)
def test_any_run_folder_is_rebuilt_or_named_and_every_other_run_kept(
    metrics, run_json, any_json, entries, log
):
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        good = GOOD / "runs"
        store, kept = finished_run(home, (sorted(good.iterdir())[0] / "metrics.jsonl").read_bytes())
        row = store.run(kept)
        write_run_file(row, Path(row["run_dir"]), "local")
        store.close()
        folder = home / "runs" / "abcdef012345"
        folder.mkdir()
        write_run_file({**row, "run_id": folder.name}, folder, "local")
        good_json = (folder / "run.json").read_bytes()
        contents = {
            "run.json": good_json if run_json == "good" else json.dumps(any_json).encode(),
            "metrics.jsonl": metrics,
            "run.log": log,
            "rerun_of": b"0123456789ab\n",
            "spec.toml": (GOOD / "spec.toml").read_bytes(),
            "attempts": b"x",
        }
        for name, how in entries.items():
            if how != "absent":
                _place(folder / name, how, contents[name])
        out = rebuild(home, force=True)
        rebuilt = Store(home)
        ids = {r["run_id"] for r in rebuilt.runs()}
        rebuilt.close()
        assert kept in ids  # one folder never costs another run
        assert folder.name in ids or any(folder.name in u for u in out.unreadable)
        _every_reader(home, sorted(ids))


# --- the commands themselves, on a few generated stores ---------------------------------


@settings(max_examples=2, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(metrics=metric_files)
@pytest.mark.timeout(600)  # twelve commands, each given HANG_S
def test_the_commands_on_generated_records(metrics):
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        store, run_id = finished_run(home, metrics, "COMPLETED")
        loaded = load_spec(GOOD / "spec.toml")
        store.save_experiment("quickstart", str(GOOD / "spec.toml"), loaded.text, loaded.digest)
        store.close()
        for argv in (
            ["status", "--all"],
            ["results", "-e", "quickstart"],
            ["logs", run_id],
            ["export", "mllog", run_id],
            ["report", "-e", "quickstart", "--out", str(Path(tmp) / "report")],
            ["store", "rebuild", "--force"],
        ):
            proc = dlscale(*argv, home=home, timeout=HANG_S)
            said = proc.stdout + proc.stderr
            assert "internal error" not in said and "Traceback" not in said, (argv, said)
            assert proc.returncode in (0, 1, 2), (argv, said)  # 2: nothing to report
