"""Bad input in specs and cluster profiles, by class: every field (walked from their pydantic
models, so a new field is covered without a new test) refuses a wrong type, and every number
beyond what can run, at its line and with the limit's reason; nothing else is raised.
Command lines and the TUI: test_bad_input.py."""

from __future__ import annotations

import re
import types
import typing
from pathlib import Path

import pytest
from pydantic import BaseModel

from dlscale.engine.config.profile import Partition, Profile, load_profile
from dlscale.engine.config.software import Container, Environment
from dlscale.engine.config.spec import Experiment, Scale, Training, load_spec
from dlscale.engine.errors import SpecError

# --- specs: every field, by class -------------------------------------------------------

BASE = {
    "experiment": {
        "name": '"t"',
        "frameworks": '["pytorch-ddp"]',
        "models": '["resnet20"]',
        "datasets": '["synthetic-cifar"]',
        "scales": '["1x1"]',
        "per_device_batch": "[8]",
        "precisions": '["fp32"]',
        "repetitions": "1",
    },
    "training": {"steps": "4", "warmup_steps": "1"},
}
HUGE, HUGE_NEGATIVE, INT64_MAX = (
    "100000000000000000000",
    "-100000000000000000000",
    "9223372036854775807",
)


def render(tables: dict[str, dict[str, str]], root: str = "") -> tuple[str, dict[str, int]]:
    """TOML text with one key a line, and the line of every `table.key`."""
    lines, where = [root] if root else [], {}
    for table, keys in tables.items():
        lines.append(f"[{table}]")
        where[table] = len(lines)
        for key, value in keys.items():
            if value is not None:
                lines.append(f"{key} = {value}")
                where[f"{table}.{key}"] = len(lines)
    return "\n".join(lines) + "\n", where


def spec_with(tmp_path: Path, table: str, key: str, value: str) -> tuple[Path, int]:
    tables = {t: dict(keys) for t, keys in BASE.items()}
    tables.setdefault(table, {})[key] = value
    text, where = render(tables)
    path = tmp_path / f"{table}-{key}.toml"
    path.write_text(text)
    return path, where[f"{table}.{key}"]


def problems_of(path: Path, loader=load_spec) -> list[str]:
    """The problems a load reports; any exception but SpecError fails the test."""
    try:
        loader(path)
    except SpecError as exc:
        for problem in exc.problems:
            assert "\n" not in problem
        return exc.problems
    return []


def kind_of(annotation: typing.Any) -> str:
    """int, number, str, bool, choice, list, table or dict: what TOML type a field takes."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return kind_of(args[0])
    if origin is typing.Literal:
        return "choice"
    if origin is list:
        return "list"
    if origin is dict:
        return "dict"
    if origin in (typing.Union, types.UnionType):
        kinds = {kind_of(a) for a in args}
        return "number" if kinds == {"int", "number"} else kinds.pop()
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "table"
    return {int: "int", float: "number", str: "str", bool: "bool"}[annotation]


def item_kind(annotation: typing.Any) -> str:
    """The kind of a list's items (per_device_batch: int); "" for what is no list."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    origin = typing.get_origin(annotation)
    if origin is list:
        return kind_of(args[0])
    return item_kind(args[0]) if len(args) == 1 and origin is not typing.Literal else ""


# TOML values of a type the field does not take. Lists take no scalar here: a bare batch or
# scale is read as a list of one, so only tables and booleans are wrong for every list.
WRONG = {
    "int": ['"4"', "1.5", "true", "[4]"],
    "number": ['"0.1"', "true", "[0.1]"],
    "str": ["5", "true", '["a", "b"]', "{a = 1}"],
    "bool": ['"yes"', "1"],
    "choice": ["5", "true", '["a"]'],
    "list": ["{a = 1}", "true"],
    "dict": ["5", '"x"', "[1]"],
    "table": ["5", '"x"', "[1]"],
}
TOML_TYPES = ['"x"', "5", "-1", "0", "true", "1.5", "[1]", '["a"]', "{a = 1}", "[{a = 1}]"]


def model_fields(model: type[BaseModel]):
    return [(name, f.annotation) for name, f in model.model_fields.items()]


SPEC_FIELDS = [("experiment", n, a) for n, a in model_fields(Experiment)] + [
    ("training", n, a) for n, a in model_fields(Training)
]


@pytest.mark.parametrize(
    "table,key,annotation", SPEC_FIELDS, ids=[f"{t}.{k}" for t, k, _ in SPEC_FIELDS]
)
def test_every_spec_field_refuses_a_wrong_type_at_its_line(tmp_path, table, key, annotation):
    for value in WRONG[kind_of(annotation)]:
        path, line = spec_with(tmp_path, table, key, value)
        problems = problems_of(path)
        assert any(p.startswith(f"{path}:{line}: {table}.{key}") for p in problems), (
            value,
            problems,
        )
    for value in TOML_TYPES:  # whatever is given: loads, or says where; never a crash
        path, line = spec_with(tmp_path, table, key, value)
        for problem in problems_of(path):
            assert problem.startswith(f"{path}:"), problem


NUMERIC = [
    (t, k, a)
    for t, k, a in SPEC_FIELDS
    if kind_of(a) in ("int", "number") or item_kind(a) in ("int", "number")
]


@pytest.mark.parametrize("table,key,annotation", NUMERIC, ids=[f"{t}.{k}" for t, k, _ in NUMERIC])
def test_every_numeric_spec_field_is_bounded_with_a_reason(tmp_path, table, key, annotation):
    """Beyond what can run is refused, the limit's reason said; nan and inf everywhere."""
    listed = kind_of(annotation) == "list"
    values = [HUGE, INT64_MAX, HUGE_NEGATIVE]
    if "number" in (kind_of(annotation), item_kind(annotation)):
        values += ["nan", "inf", "-inf", "1e300"]
    for value in values:
        path, line = spec_with(tmp_path, table, key, f"[{value}]" if listed else value)
        problems = problems_of(path)
        field = f"{table}.{key}" + ("[0]" if listed else "")
        mine = [p for p in problems if p.startswith(f"{path}:{line}: {field}: ")]
        assert mine, (value, problems)
        if value in (HUGE, INT64_MAX, "1e300"):  # the upper limit says why it is there
            assert re.search(r"less than (or equal to )?[\d.e+]+: \w", mine[0]), mine
        if value in ("nan", "inf", "-inf"):
            assert "finite number" in mine[0] and "nan and inf" in mine[0], mine


@pytest.mark.parametrize("key", list(Scale.model_fields))
def test_scales_are_bounded_with_a_reason(tmp_path, key):
    other = next(k for k in Scale.model_fields if k != key)
    for value in (HUGE, "0", "-1"):
        path, line = spec_with(
            tmp_path, "experiment", "scales", f"[{{{key} = {value}, {other} = 1}}]"
        )
        problems = problems_of(path)
        assert any(
            p.startswith(f"{path}:{line}: experiment.scales[0].{key}: ") for p in problems
        ), problems
    path, _ = spec_with(tmp_path, "experiment", "scales", f'["{HUGE}x1", "1x{HUGE}"]')
    assert len(problems_of(path)) == 2
    path, line = spec_with(tmp_path, "experiment", "scales", "[{nodes = 1, ranks = 2}]")
    assert sorted(problems_of(path)) == [
        f"{path}:{line}: experiment.scales[0].ranks: unknown key; allowed keys here: nodes, "
        "ranks_per_node",
        f"{path}:{line}: experiment.scales[0].ranks_per_node: required, but missing",
    ]


def test_strong_scaling_bounds_the_global_batch_and_each_devices_share(tmp_path):
    tables = {t: dict(keys) for t, keys in BASE.items()}
    tables["experiment"].update(
        per_device_batch=None, scaling='"strong"', global_batch="[131072]", scales='["1x1", "1x2"]'
    )
    text, where = render(tables)
    path = tmp_path / "strong.toml"
    path.write_text(text)
    problems = problems_of(path)
    assert (
        len(problems) == 1
        and "131072 images per device at scale 1x1" in problems[0]
        and "65536" in problems[0]
    ), problems


@pytest.mark.parametrize(
    "root,line",
    [
        ('experiment = "x"', 1),
        ("experiment = 5", 1),
        ('training = "x"', 1),
        ("options = 3", 1),
        ('bogus = "x"', 1),
    ],
)
def test_wrong_tables_are_named_at_their_line(tmp_path, root, line):
    tables = {t: dict(keys) for t, keys in BASE.items() if not root.startswith(t)}
    text, _ = render(tables, root)
    path = tmp_path / "s.toml"
    path.write_text(text)
    problems = problems_of(path)
    key = root.split(" ")[0]
    assert any(p.startswith(f"{path}:{line}: {key}: ") for p in problems), problems
    assert all("got" in p or "unknown key" in p or "missing" in p for p in problems), problems


def test_array_of_tables_is_named_as_such(tmp_path):
    text, _ = render(BASE)
    path = tmp_path / "s.toml"
    path.write_text(text.replace("[experiment]", "[[experiment]]"))
    assert problems_of(path) == [
        f"{path}:1: experiment: should be a table ([experiment]), not an array of tables"
    ]


def test_every_table_names_an_unknown_key_and_what_it_allows(tmp_path):
    from dlscale.engine.config.frameworks import FRAMEWORKS

    for table, allowed in [
        ("experiment", "name"),
        ("training", "steps"),
        ("options", ", ".join(f for f in FRAMEWORKS if FRAMEWORKS[f].options)),
        ("options.deepspeed", "zero_stage"),
    ]:
        path, line = spec_with(tmp_path, table, "bogus", "1")
        problems = problems_of(path)
        assert any(
            p.startswith(f"{path}:{line}: {table}.bogus: unknown key; allowed keys here: ")
            and allowed in p
            for p in problems
        ), problems


def test_framework_options_refuse_wrong_types_and_values(tmp_path):
    from dlscale.engine.config.frameworks import FRAMEWORKS

    for fw in FRAMEWORKS.values():
        for opt in fw.options:
            wrong = (
                ["1", '"true"']
                if isinstance(opt.default, bool)
                else ["true", '"1"', "1.5", HUGE, "-1"]
            )
            for value in wrong:
                path, line = spec_with(tmp_path, f"options.{fw.name}", opt.name, value)
                problems = problems_of(path)
                assert any(
                    p.startswith(f"{path}:{line}: options.{fw.name}.{opt.name}: ") for p in problems
                ), (value, problems)


# --- the cluster profile: every field, by class -------------------------------------------

PROFILE = {
    "": {"name": '"c"', "time_limit": '"00:10:00"'},
    "partitions": {"name": '"debug"', "nodes": "2", "cpus_per_node": "2"},
    "environments.pytorch-ddp": {"modules": '["PyTorch"]'},
    "environments.mxnet.container": {"image": '"/images/mxnet.sif"'},
}


def profile_with(tmp_path: Path, table: str, key: str, value: str) -> tuple[Path, int]:
    tables = {
        t: dict(keys) for t, keys in PROFILE.items() if not (table == "" and t.split(".")[0] == key)
    }  # a key, not also a table
    tables[table][key] = value
    lines, where = [], {}
    for t, keys in tables.items():
        if t:
            lines.append(f"[[{t}]]" if t == "partitions" else f"[{t}]")
        for k, v in keys.items():
            lines.append(f"{k} = {v}")
            where[f"{t}.{k}"] = len(lines)
    path = tmp_path / f"profile-{table or 'top'}-{key}.toml"
    path.write_text("\n".join(lines) + "\n")
    return path, where[f"{table}.{key}"]


PROFILE_FIELDS = (
    [("", n, a) for n, a in model_fields(Profile)]
    + [("partitions", n, a) for n, a in model_fields(Partition)]
    + [("environments.pytorch-ddp", n, a) for n, a in model_fields(Environment)]
    + [("environments.mxnet.container", n, a) for n, a in model_fields(Container)]
)


def _profile_field(table: str, key: str) -> str:
    return {"": key, "partitions": f"partitions[0].{key}"}.get(table, f"{table}.{key}")


@pytest.mark.parametrize(
    "table,key,annotation",
    PROFILE_FIELDS,
    ids=[f"{t or 'profile'}.{k}" for t, k, _ in PROFILE_FIELDS],
)
def test_every_profile_field_refuses_a_wrong_type_and_what_cannot_run(
    tmp_path, table, key, annotation
):
    field = _profile_field(table, key)
    kind = kind_of(annotation)
    for value in WRONG[kind]:
        path, line = profile_with(tmp_path, table, key, value)
        problems = problems_of(path, load_profile)
        assert any(p.startswith(f"{path}:{line}: {field}") for p in problems), (value, problems)
    if kind == "int":
        for value in (HUGE, INT64_MAX, HUGE_NEGATIVE):
            path, line = profile_with(tmp_path, table, key, value)
            problems = problems_of(path, load_profile)
            assert any(p.startswith(f"{path}:{line}: {field}: ") for p in problems), problems
            if value != HUGE_NEGATIVE:
                assert any(re.search(r"less than or equal to \d+: \w", p) for p in problems), (
                    problems
                )
    for value in TOML_TYPES:
        path, _ = profile_with(tmp_path, table, key, value)
        for problem in problems_of(path, load_profile):
            assert problem.startswith(f"{path}:"), problem


def test_profile_times_beyond_a_year_are_refused(tmp_path):
    for value in ('"99999999999"', '"400-00:00:00"'):
        path, line = profile_with(tmp_path, "", "time_limit", value)
        assert any(
            p.startswith(f"{path}:{line}: time_limit: ") and "365 days" in p
            for p in problems_of(path, load_profile)
        )
