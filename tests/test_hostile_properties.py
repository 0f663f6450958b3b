"""A property test across the classes of issue 33: hostile names, depths and sizes go
through import, export, report, check, plan and rebuild, and each ends in an answer or a
sentence, never an internal error or a hang; nothing printed holds an escape; a run that
import accepted is one `store rebuild` keeps (the two apply the same bounds); and what is
written goes through the one writer (an output named hostilely is written as named, or
refused). Bundles are the recorded quickstart's, changed per example; most examples run
in process, through the command line's own entry; a few through the real binary."""

from __future__ import annotations

import ast
import csv
import html.parser
import io
import json
import math
import re
import shutil
import sys
import unicodedata
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import click
import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from rich.cells import cell_len
from test_bad_input import COMMANDS, invoke
from test_bundles import _dump, _first, _members, _write
from test_printer import leaks
from test_properties import examples

from conftest import HANG_S, REPO, dlscale
from dlscale.engine.config.profile import Interconnect, load_profile
from dlscale.engine.config.quantities import BANDWIDTH, BATCH, LATENCY, THROUGHPUT, Measure, normal
from dlscale.engine.config.spec import load_spec
from dlscale.engine.errors import SpecError, UserError
from dlscale.engine.io.text import printable
from dlscale.engine.results.regression import history
from dlscale.engine.tracking.store import Store
from dlscale.trainers.common import records
from dlscale.trainers.common.flags import TRAINING
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


def no_harm(code: int, out: str, err: str, what: object, codes=(0, 1, 2)) -> None:
    assert code in codes, (what, code, err)
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


# --- numbers (issue 46): every number from outside held to its domain --------------------
#
# Floats as a hostile or careless user gives them: NaN, infinities, -0.0, denormals, huge,
# negative, and text that only looks like a number. Every numeric option of every command
# (found in the command tree, so a new one is covered) and every numeric field of a profile,
# a spec, a bundle's row and records and a history line either refuses the value in a
# sentence naming where it was, or holds it inside its quantity's domain; and what the
# commands then write holds no NaN and no infinity.

hostile_floats = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True, allow_subnormal=True),
    st.sampled_from(
        [0.0, -0.0, 5e-324, 1e-310, sys.float_info.min, 1e-300, 1e300, sys.float_info.max, -1.0]
    ),
)
number_text = st.one_of(
    hostile_floats.map(repr),
    st.integers(-(2**70), 2**70).map(str),
    st.sampled_from(
        ["nan", "-nan", "inf", "-Infinity", "1e999", "0x10", "", " 5 ", "\u0661", "1_0", "0.5"]
    ),
)


def finite_json(text: str) -> Any:
    """`text` as strict JSON (NaN and Infinity are not JSON), every number in it finite."""

    def refuse(name: str) -> None:
        raise AssertionError(f"{name} in JSON output")

    def number(text: str) -> float:
        assert math.isfinite(float(text)), text  # 1e999 reads as infinity
        return float(text)

    return json.loads(text, parse_constant=refuse, parse_float=number)


NONFINITE = re.compile(r"(?<![A-Za-z_\\])(nan|inf|infinity)(?![A-Za-z_])", re.IGNORECASE)


def numeric_options() -> list[tuple[tuple[str, ...], click.Command, click.Parameter]]:
    """Every option or argument of every command whose type is a number."""
    numeric = (click.types.IntParamType, click.types.FloatParamType, Measure)
    return [
        (path, cmd, p) for path, cmd in COMMANDS for p in cmd.params if isinstance(p.type, numeric)
    ]


NUMERIC = numeric_options()


def test_every_numeric_option_is_a_quantity_or_a_bounded_count():
    """Click's FloatRange takes NaN: no option is a float but through a Quantity; a count is
    an IntRange bounded on both sides."""
    assert len(NUMERIC) >= 20, NUMERIC
    for path, _, p in NUMERIC:
        where = (path, p.name)
        assert not isinstance(p.type, click.types.FloatParamType), where
        if isinstance(p.type, click.types.IntParamType):
            assert isinstance(p.type, click.IntRange), where
            assert p.type.min is not None and p.type.max is not None, where


def _in_domain(param: click.Parameter, value: Any) -> None:
    if isinstance(param.type, Measure):
        assert param.type.quantity.problem(value) is None, (param.name, value)
        assert isinstance(value, int) or normal(value), (param.name, value)
        assert not (isinstance(value, float) and math.copysign(1, value) < 0 and value == 0)
    else:
        assert isinstance(value, int) and param.type.min <= value <= param.type.max


@examples(300)
@given(which=st.sampled_from(NUMERIC), text=number_text)
def test_every_numeric_option_refuses_or_holds_its_domain(which, text):
    path, cmd, param = which
    ctx = click.Context(cmd, info_name=path[-1])
    try:
        got = param.process_value(ctx, (text,) if param.multiple else text)
    except click.BadParameter as exc:
        message = exc.format_message()
        assert message and "\n" not in message, message
        return
    for value in got if param.multiple else [got]:
        _in_domain(param, value)


@examples(150)
@given(batch=number_text, x=number_text, again=st.none() | number_text)
def test_stated_throughputs_refuse_or_hold_their_domain(batch, x, again):
    """--throughput BATCH=X: a whole batch and a throughput in range, or one sentence; a
    batch stated twice with two throughputs is a contradiction, refused naming both."""
    cmd = dict(COMMANDS)[("project",)]
    param = next(p for p in cmd.params if p.name == "throughput")
    given_ = (f"{batch}={x}",) + (() if again is None else (f"{batch}={again}",))
    try:
        got = param.process_value(click.Context(cmd, info_name="project"), given_)
    except click.BadParameter as exc:
        assert "\n" not in exc.format_message()
        return
    for b, v in got.items():
        assert BATCH.problem(b) is None and THROUGHPUT.problem(v) is None, (b, v)


def _option_values(param: click.Parameter) -> st.SearchStrategy[str]:
    """Values inside the option's domain (so the projection runs)."""
    if isinstance(param.type, Measure):
        q = param.type.quantity
        if q.whole:
            return st.integers(int(q.low), int(q.high)).map(str)
        return st.floats(q.low, q.high, exclude_max=q.high_open).map(repr)
    return st.integers(param.type.min, min(param.type.max, 64)).map(str)


def _mostly(data: st.DataObject, inside: st.SearchStrategy, label: str) -> Any:
    """One value in ten hostile (refused in a sentence), the others inside the domain."""
    hostile = data.draw(st.integers(0, 9), label=f"{label} hostile?") == 0
    return data.draw(number_text if hostile else inside, label=label)


PROJECT = dict(COMMANDS)[("project",)]
PROJECT_NUMBERS = {
    p.opts[0]: _option_values(p)
    for p in PROJECT.params
    if isinstance(p.type, (click.types.IntParamType, Measure))
    and p.name not in ("to", "global_batch", "parameters")  # drawn below, within reason
}


@examples(60)
@given(
    options=st.dictionaries(st.sampled_from(sorted(PROJECT_NUMBERS)), st.just(None), max_size=5),
    batches=st.lists(st.integers(1, 4096), min_size=1, max_size=3, unique=True),
    data=st.data(),
    fmt=st.sampled_from(["json", "table"]),
)
def test_project_from_hostile_figures_writes_only_numbers_in_their_domain(
    capsys, monkeypatch, tmp_path_factory, options, batches, data, fmt
):
    monkeypatch.setenv("DLSCALE_HOME", str(tmp_path_factory.mktemp("project")))
    monkeypatch.setenv("NO_COLOR", "1")
    argv = ["project", "--model", "resnet50", "--to", str(data.draw(st.integers(2, 64)))]
    x = data.draw(st.floats(1e-9, 2**53), label="throughput")
    for batch in sorted(batches):  # rising, as a larger batch's throughput does
        x = data.draw(st.floats(x, min(2**53, 2 * x)), label="throughput")
        argv += ["--throughput", f"{batch}={_mostly(data, st.just(repr(x)), str(batch))}"]
    for flag in options:
        argv += [flag, _mostly(data, PROJECT_NUMBERS[flag], flag)]
    argv += ["--intra-gbps", "100", "--inter-gbps", "25", "--format", fmt]
    code, out, err = invoke(capsys, *argv)
    assert code in (0, 2), (argv, code, err)
    assert "internal error" not in err and "Traceback" not in err, (argv, err)
    if code == 2:
        assert err.strip(), argv
        return
    if fmt == "json":
        finite_json(out)
    else:
        assert not NONFINITE.search(out), (argv, NONFINITE.search(out), out[-2000:])


def test_a_time_budget_of_nan_is_refused_not_switched_off(capsys, tmp_path):
    spec = tmp_path / "s.toml"
    spec.write_text("")
    for value in ("nan", "inf", "-1", "1e-320", "0"):
        code, _, err = invoke(
            capsys, "check", str(spec), "--window", "3", "--run", "--max-minutes", value
        )
        assert code == 2 and "--max-minutes" in err and "Traceback" not in err, (value, err)


def _float_fields(model: type) -> list[str]:
    """A pydantic model's fields that take a float (found from their types)."""
    return [n for n, f in model.model_fields.items() if "float" in str(f.annotation).lower()]


def _refused_or_normal(exc: Exception | None, value: Any, where: str, field: str) -> None:
    if exc is not None:
        text = str(exc)
        assert where in text and field in text, (where, field, text)
        assert "Traceback" not in text
    else:
        assert isinstance(value, int) or normal(value), (field, value)


HISTORY_FLOATS = _float_fields(history.Entry)


@examples(150)
@given(field=st.sampled_from(HISTORY_FLOATS), value=hostile_floats)
def test_a_history_line_refuses_or_holds_every_number(tmp_path_factory, field, value):
    path = tmp_path_factory.mktemp("history") / "h.jsonl"
    line = {
        "date": "2026-01-01T00:00:00Z",
        "label": "c",
        "site": "s",
        "experiment": "e",
        "point": "p",
        "statistic": "mean",
        "values": [100.0],
        "value": 100.0,
        "outcome": "passed",
        field: [value] if field == "values" else value,
    }
    path.write_text(json.dumps(line) + "\n")
    try:
        got = history.read(path).entries[0]
    except UserError as exc:
        _refused_or_normal(exc, value, f"{path}:1", field)
        return
    kept = getattr(got, field)
    _refused_or_normal(None, kept[0] if field == "values" else kept, "", field)


def test_the_history_fields_that_take_numbers_are_found():
    assert {"values", "value", "ratio", "low", "high"} <= set(HISTORY_FLOATS)


# A record's numbers, by kind: every field of every record kind the engine reads.
RECORD_NUMBERS = [
    (kind, name, want.rstrip("?"))
    for kind, table in records.TYPES.items()
    if kind != "*"
    for name, want in table.items()
    if want.rstrip("?") in ("number", "rate", "fraction", "throughput")
]


def _record_line(kind: str, **fields: Any) -> str:
    base = {"kind": kind, "schema": 1, "time": 1.0}
    base.update({f: _REQUIRED_VALUES.get(f, 1) for f in records.REQUIRED[kind]})
    base.update(fields)
    return json.dumps(base)


_REQUIRED_VALUES: dict[str, Any] = {
    "framework": "f",
    "model": "m",
    "dataset": "d",
    "framework_versions": {},
    "hostnames": [],
    "devices": [],
    "dlscale_version": "1",
    "status": "ok",
    "collective": "allreduce",
    "backend": "gloo",
    "metered": "around the script",
    "cpus": [],
}


@examples(300)
@given(which=st.sampled_from(RECORD_NUMBERS), value=hostile_floats)
def test_a_record_refuses_or_holds_every_number(which, value):
    """Records reach the store from a run's file, a declared framework's log and another
    site's bundle, all through parse_record: every number in its kind's domain, or the
    record refused naming the field."""
    kind, name, want = which
    try:
        got = records.parse_record(_record_line(kind, **{name: value}))
    except records.RecordError as exc:
        assert f"{kind}.{name}" in str(exc), (which, value, str(exc))
        return
    kept = got[name]
    assert normal(kept), (which, kept)
    if want == "throughput":
        assert kept == 0 or THROUGHPUT.problem(kept) is None, (which, kept)
    if want in ("rate", "fraction", "throughput"):
        assert kept >= 0


def test_records_hold_the_engines_throughput_domain():
    """The record format runs without the engine: its throughput bounds are THROUGHPUT's."""
    assert (records.MIN_THROUGHPUT, records.MAX_COUNT) == (THROUGHPUT.low, THROUGHPUT.high)
    for x in (0.0, 5e-324, 1e-310, sys.float_info.min, 1.0, -0.0):
        assert records._normal(x) == normal(x), x  # noqa: SLF001  (the twin of the rule)


@examples(80)
@given(field=st.sampled_from(_float_fields(Interconnect)), value=hostile_floats)
def test_a_profiles_links_refuse_or_hold_their_domain(tmp_path_factory, field, value):
    path = tmp_path_factory.mktemp("profile") / "p.toml"
    toml_value = {math.inf: "inf", -math.inf: "-inf"}.get(value, repr(value))
    if math.isnan(value):
        toml_value = "nan"
    path.write_text(
        'name = "c"\n[[partitions]]\nname = "p"\nnodes = 2\ncpus_per_node = 8\n'
        f"[interconnect]\n{field} = {toml_value}\n"
    )
    try:
        got = load_profile(path).profile.interconnect
    except SpecError as exc:
        _refused_or_normal(exc, value, str(path), f"interconnect.{field}")
        return
    kept = getattr(got, field)
    assert kept is not None and (BANDWIDTH if "gbps" in field else LATENCY).problem(kept) is None


NUMBER_KNOBS = [k.name for k in TRAINING if k.kind == "number"]


@examples(80)
@given(knob=st.sampled_from(NUMBER_KNOBS), value=hostile_floats)
def test_a_specs_numbers_refuse_or_hold_their_domain(tmp_path_factory, knob, value):
    from conftest import write_spec

    toml_value = (
        "nan" if math.isnan(value) else {math.inf: "inf", -math.inf: "-inf"}.get(value, repr(value))
    )
    path = write_spec(tmp_path_factory.mktemp("spec") / "s.toml", training=f"{knob} = {toml_value}")
    try:
        got = load_spec(path).spec.training
    except SpecError as exc:
        _refused_or_normal(exc, value, str(path), f"training.{knob}")
        return
    _refused_or_normal(None, getattr(got, knob), "", knob)


def a_home(tmp_path_factory, monkeypatch, name: str) -> tuple[Path, Path]:
    """A fresh folder and the home in it the commands use, printing without colour."""
    base = tmp_path_factory.mktemp(name)
    monkeypatch.setenv("DLSCALE_HOME", str(base / "home"))
    monkeypatch.setenv("NO_COLOR", "1")
    return base, base / "home"


def bundle_with_throughputs(path: Path, members: dict[str, bytes], values: list[float]) -> Path:
    """The bundle with each run's throughputs (its summary's and its intervals') set to
    one of `values` in turn."""
    m = dict(members)
    names = sorted(n for n in m if n.endswith("metrics.jsonl"))
    for i, name in enumerate(names):
        x = values[i % len(values)]
        lines = []
        for line in m[name].decode().splitlines():
            rec = json.loads(line)
            if rec["kind"] == "summary":
                rec["throughput"] = x
            elif rec["kind"] == "interval":
                rec["images_per_s"] = x
            lines.append(json.dumps(rec) + "\n")
        m[name] = "".join(lines).encode()
    return _write(path, m)


throughputs = st.one_of(
    st.floats(1e-9, 2**53),
    st.sampled_from([1e-9, 2**53, 1e-9 * 1.5, 3.0e15, 0.0, 100.0]),
    hostile_floats,
)


@examples(8)
@given(values=st.lists(throughputs, min_size=1, max_size=6))
@example(values=[5e-324])  # issue 46: passed import's check, then crashed check and compare
@example(values=[1e-9, 2**53])
def test_a_bundles_throughputs_are_refused_or_give_only_finite_answers(
    bundle, tmp_path_factory, capsys, monkeypatch, values
):
    base, home = a_home(tmp_path_factory, monkeypatch, "numbers")
    recorded_study(home)  # the study itself, to compare and check against
    path = bundle_with_throughputs(base / "b.tgz", bundle[1], values)
    code, out, err = invoke(capsys, "import", str(path))
    no_harm(code, out, err, ("import", values))
    if code != 0:
        assert code == 2 and "metrics.jsonl" in err, err  # the file and the field named
        assert "throughput" in err or "images_per_s" in err, err
        return
    spec = base / "spec.toml"  # the study's own: checked against the bundle
    spec.write_text(json.loads(bundle[1]["experiment.json"])["spec_text"])
    runs = [
        ["results", "--format", "json"],
        ["results", "-e", "quickstart@there", "--format", "json"],
        ["compare", "quickstart", "quickstart@there", "--format", "json"],
        ["project", "-e", "quickstart@there", "--to", "4", "--format", "json"],
        ["results", "-e", "quickstart@there"],
        ["compare", "quickstart", "quickstart@there"],
        ["check", str(spec), "--baseline", str(path)],
        ["report", "-e", "quickstart@there", "--out", str(base / "report")],
    ]
    for argv in runs:
        code, out, err = invoke(capsys, *argv)
        no_harm(code, out, err, (argv, values), codes=(0, 1, 2, 3))  # 3: check's not judged
        if "json" in argv and code == 0:
            finite_json(out)
        elif code == 0:
            assert not NONFINITE.search(out), (argv, values, out[-2000:])
    report = base / "report"
    if report.exists():
        for name in ("results.json", "projection.json"):
            if (report / name).exists():
                finite_json((report / name).read_text())
        assert not NONFINITE.search((report / "report.md").read_text())
        for row in csv.DictReader(io.StringIO((report / "results.csv").read_text())):
            for cell in row.values():
                assert not NONFINITE.fullmatch(cell or ""), row
    shutil.rmtree(base, ignore_errors=True)


# --- names and text for each reader (issue 46) -------------------------------------------
#
# Text a site or a user wrote (a host, a device, a library's version, a file's name) holding
# what acts on a terminal (controls, format characters), what makes Markdown structure or
# HTML, and what a spreadsheet runs as a formula: each format shows it as text. Names that
# identify a point (framework, model, dataset, precision, loader) follow the spec's name
# rule, from a bundle as from a spec: another is refused at import, naming the field.

reader_text = st.lists(
    st.one_of(
        st.sampled_from(["\x07", "\x1b[2J", "\x1b]0;t\x07", "\x9b", "\r", "\n", "\t", "\x00"]),
        st.sampled_from(["\u200b", "\u200d", "\u2060", "\u2064", "\ufeff", "\xad", "\u202e"]),
        st.sampled_from(["\n# H", "|", "<b>", "<script>x</script>", "`", "```", "*", "_"]),
        st.sampled_from(["[l](javascript:x)", "![i](u)", "&amp;", "\n- ", "\n1. ", "\n    c"]),
        st.sampled_from(["=cmd|' /C calc'!A0", "@SUM(A1)", "+1", "-1", "\\", "]", "#"]),
        st.characters(exclude_categories=("Cs",)),
    ),
    min_size=1,
    max_size=8,
).map("".join)
MARK = "MARK"
FORMULA = ("=", "+", "-", "@", "\t", "\r")


def unseen(text: str) -> list[str]:
    """What in `text` acts on a terminal or cannot be seen: controls (but tab and newline)
    and format characters (category Cf)."""
    return sorted(
        {c for c in text if (unicodedata.category(c) in ("Cc", "Cf") and c not in "\t\n")}
    )


def test_printable_shows_every_format_character_as_its_escape():
    """The 150-odd invisible format characters (U+200B-D, U+2060-2064, U+FEFF, U+00AD, tags
    ...) are shown as escapes, so `resnet\\u200b20` never reads as resnet20."""
    cf = [c for c in range(0x110000) if unicodedata.category(chr(c)) == "Cf"]
    assert len(cf) > 150
    for c in cf:
        shown = printable(chr(c))
        assert shown.isascii() and shown.startswith("\\"), hex(c)
    assert printable("resnet\u200b20") != printable("resnet20")


@examples(300)
@given(text=st.text())
def test_printable_text_holds_nothing_unseen(text):
    assert unseen(printable(text)) == []
    assert "\n" not in printable(text) and unseen(printable(text, newlines=True)) == []


def with_text(text: str):
    """A recorded study's edit: every run's env record names its hosts, its devices and
    its torch with `text`."""

    def edit(run_id: str, lines: list[str]) -> list[str]:
        out = []
        for line in lines:
            rec = json.loads(line)
            if rec["kind"] == "env":
                rec["hostnames"] = rec["nodes"] = [text + MARK]
                rec["devices"] = [text + MARK] * len(rec["devices"])
                rec["framework_versions"] = {**rec["framework_versions"], "torch": text + MARK}
            out.append(json.dumps(rec) + "\n")
        return out

    return edit


ALLOWED_TAGS = {
    "html", "head", "meta", "title", "style", "body", "h1", "h2", "h3", "p", "code", "table",
    "tr", "th", "td", "figure", "img", "figcaption", "pre", "div",
}  # fmt: skip


class _Tags(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: set[str] = set()

    def handle_starttag(self, tag: str, attrs: Any) -> None:
        self.tags.add(tag)


def markdown_structure_holds(md: str) -> None:
    """report.md as a Markdown reader parses it: no HTML, no text of MARK's in a heading, a
    list, a quote, a code block or a link, and every table row as wide as its header."""
    from markdown_it import MarkdownIt

    tokens = MarkdownIt("commonmark").enable("table").parse(md)
    open_kinds: list[str] = []
    cells = 0
    for t in tokens:
        assert t.type not in ("html_block", "html_inline"), t
        if t.nesting == 1:
            open_kinds.append(t.type)
        elif t.nesting == -1:
            open_kinds.pop()
        if t.type in ("tr_open",):
            cells = 0
        if t.type in ("th_open", "td_open"):
            cells += 1
        if t.type == "thead_open":
            header = None
        if t.type == "tr_close":
            if "thead_open" in open_kinds:
                header = cells
            else:
                assert cells == header, (cells, header)
        if t.type in ("inline", "fence", "code_block") and MARK in t.content:
            blocks = {"heading_open", "bullet_list_open", "ordered_list_open", "blockquote_open"}
            assert not blocks & set(open_kinds), (open_kinds, t.content)
            assert t.type == "inline", t
            for child in t.children or []:
                assert child.type not in ("link_open", "image", "html_inline"), child


@examples(4)
@given(text=reader_text)
@example(text="\n# H\n| a | b |\n<img src=x onerror=alert(1)>\x1b]0;t\x07\u200b")
@example(text="=cmd|' /C calc'!A0")
def test_text_from_outside_is_written_for_each_reader(
    bundle, tmp_path_factory, capsys, monkeypatch, text
):
    base, home = a_home(tmp_path_factory, monkeypatch, "readers")
    recorded_study(home, with_text(text))
    code, out, err = invoke(capsys, "import", str(bundle[0]))  # the same study, clean
    assert code == 0, err
    # the terminal: nothing acts on it or hides, and every table's lines are as wide
    for argv in (["results"], ["compare", "quickstart", "quickstart@there"], ["status"]):
        code, out, err = invoke(capsys, *argv)
        no_harm(code, out, err, (argv, text))
        assert unseen(out + err) == [], (argv, unseen(out + err))
        for table in re.findall(r"^┏.*?^└[^\n]*", out, re.M | re.S):
            widths = {cell_len(line) for line in table.splitlines()}
            assert len(widths) == 1, (argv, table)
    for fmt in ("md", "html"):
        argv = ["report", "-e", "quickstart", "--format", fmt, "--out", str(base / fmt)]
        code, out, err = invoke(capsys, *argv)
        no_harm(code, out, err, ("report", fmt, text))
        page = (base / fmt / f"report.{fmt}").read_text()
        assert unseen(page) == [] and MARK in page, fmt
        if fmt == "md":
            markdown_structure_holds(page)
        else:
            tags = _Tags()
            tags.feed(page)
            assert tags.tags <= ALLOWED_TAGS, tags.tags - ALLOWED_TAGS
    rows = list(csv.reader(io.StringIO((base / "md" / "results.csv").read_text())))
    for row in rows[1:]:
        for cell in row:
            assert not cell.startswith(FORMULA) or _is_number(cell), cell
            assert unseen(cell) == [], cell
    shutil.rmtree(base, ignore_errors=True)


def _is_number(cell: str) -> bool:
    try:
        return math.isfinite(float(cell))
    except ValueError:
        return False


@examples(15)
@given(text=reader_text)
@example(text="\x01\x1b[2J\x07")  # issue 46: a baseline's name with control bytes
def test_a_junit_file_parses_whatever_the_names(capsys, tmp_path_factory, text):
    base = tmp_path_factory.mktemp("junit")
    spec = base / "spec.toml"
    spec.write_text("[experiment]\n")
    name = (text.replace("/", "_").replace("\0", "_") + "b.tgz")[:200]
    junit = base / "j.xml"
    code, out, err = invoke(
        capsys, "check", str(spec), "--baseline", str(base / name), "--junit", str(junit)
    )
    assert code == 2, err
    data = junit.read_bytes()
    ET.fromstring(data)  # it parses
    assert unseen(data.decode()) == []


@examples(20)
@given(
    field=st.sampled_from(["framework", "model", "dataset", "precision", "loader"]),
    name=hostile_text | reader_text,
)
def test_a_bundles_point_names_follow_the_specs_rule(bundle, tmp_path_factory, capsys, field, name):
    """A name that identifies a point is what a spec can hold, from any site: one that is
    not is refused at import, naming the run's file and the field."""
    from dlscale.engine.config.custom import NAME

    base = tmp_path_factory.mktemp("names")
    m = dict(bundle[1])
    for member in [n for n in m if n.endswith("run.json")]:
        row = json.loads(m[member])
        row[field] = name
        m[member] = json.dumps(row).encode()
    for member in [n for n in m if n.endswith("metrics.jsonl")]:
        lines = []
        for line in m[member].decode().splitlines():
            rec = json.loads(line)
            if rec["kind"] == "params" and field in rec:
                rec[field] = name
            lines.append(json.dumps(rec) + "\n")
        m[member] = "".join(lines).encode()
    path = _write(base / "b.tgz", m)
    code, out, err = invoke(capsys, "--home", str(base / "home"), "import", str(path))
    no_harm(code, out, err, (field, name))
    if re.fullmatch(NAME, name):
        return  # a name of the rule: imported, or refused for what it is (an unknown loader)
    assert code == 2 and f"run.json: {field}" in err, (field, name, err)
    shutil.rmtree(base, ignore_errors=True)


def test_every_json_dlscale_writes_is_strict():
    """json.dumps writes NaN and Infinity unless told not to, and no JSON reader takes them:
    every call in the engine says allow_nan=False (a value that is not finite is then a
    bug that fails loudly, never a file a reader cannot parse)."""
    loose = []
    for path in sorted((REPO / "engine").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("dump", "dumps")
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "json"
                and not any(
                    k.arg == "allow_nan" and getattr(k.value, "value", True) is False
                    for k in node.keywords
                )
            ):
                loose.append(f"{path.name}:{node.lineno}")
    assert loose == []


@pytest.mark.parametrize("home", ["a\nb", "x\n# y\r\x1b[2J", "sp\u2028lit"])
def test_an_error_naming_a_home_with_a_newline_is_one_line(capsys, monkeypatch, tmp_path, home):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("DLSCALE_HOME", str(blocker / home))
    code, out, err = invoke(capsys, "status")
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and err.startswith("dlscale: error: home "), err
    assert leaks(err) == [] and unseen(err) == []
