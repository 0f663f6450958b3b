"""A results bundle read back, trusting nothing in it: the archive `dlscale export bundle`
writes (bundles.py) and `dlscale import` and `dlscale check --baseline` read.

A bundle is a gzip-compressed tar of regular files with fixed names:

    manifest.json                  site, profile, dlscale version, experiment, sha256 of
                                   every other member
    experiment.json                the experiment's name and spec text
    runs/RUN/run.json              the run's row (what it is, how it ended)
    runs/RUN/metrics.jsonl         its records, one per line, as the store holds them
    runs/RUN/job.sh, profile.toml  what it was submitted with, where it had them
    runs/RUN/run.log               the tail of its log

Members are read into memory one at a time, never extracted: a bundle is refused whole,
with every problem named, if a member is anything but a regular file with one of those
names (absolute, `..`, links, devices), if the members, their total size or the
decompressed stream pass the bounds below, if a checksum fails, or if a record or a row is
malformed. Nothing is written before the whole bundle has been read and checked.
"""

from __future__ import annotations

import gzip
import hashlib
import re
import tarfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    StrictStr,
    ValidationError,
    field_validator,
)

from ....trainers.common.records import RecordError, abnormal, parse_record
from ...config.custom import NAME
from ...config.quantities import TIMESTAMP
from ...config.toml_text import parse_toml_text
from ...errors import SpecError, UserError, capped
from ...io.reading import NotRegularFile, load_json, open_regular
from ...runs import COUNT_MAX, TERMINAL, TEXT_MAX

FORMAT = "dlscale-bundle"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
EXPERIMENT = "experiment.json"
RUN_FILES = ("run.json", "metrics.jsonl", "job.sh", "profile.toml", "run.log")
# Bounds on what a bundle may unpack to: a 10,000-run study is about 50,000 members and a
# few hundred MB (log tails are cut to LOG_TAIL_BYTES on export).
MAX_MEMBERS = 100_000
MAX_BYTES = 1 << 30
MAX_MEMBER_BYTES = 64 << 20
LOG_TAIL_BYTES = 32 * 1024
_HEADER_ROOM = 64 << 20  # tar headers and padding beside the members' own bytes
SITE_RULE = NAME  # the spec's name rule, as the experiment's
_RUN_MEMBER = re.compile(r"runs/([0-9a-f]{12})/(" + "|".join(map(re.escape, RUN_FILES)) + ")")
_HEX12 = r"^[0-9a-f]{12}$"
_TEXT = TEXT_MAX


class BundleError(UserError):
    """A bundle refused whole: every problem found, one per line."""

    def __init__(self, path: str | Path, problems: list[str]) -> None:
        self.problems = problems
        self.lines = [
            f"{path}: bundle refused, nothing was imported:",
            *(f"  {p}" for p in capped(problems)),
        ]
        super().__init__("\n".join(self.lines))


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class Manifest(_Strict):
    format: Literal["dlscale-bundle"]
    format_version: Literal[1]
    site: StrictStr = Field(pattern=SITE_RULE)
    profile: StrictStr | None = Field(default=None, max_length=_TEXT)
    dlscale_version: StrictStr = Field(max_length=_TEXT)
    experiment: StrictStr = Field(pattern=NAME)
    created: StrictStr = Field(max_length=_TEXT)
    files: dict[str, StrictStr]


class ExperimentFile(_Strict):
    name: StrictStr
    spec_path: StrictStr = Field(max_length=4096)
    spec_text: StrictStr
    spec_digest: StrictStr = Field(max_length=_TEXT)


class RunFile(_Strict):
    """A run's row as exported: its identity, how it ended and where it ran."""

    run_id: StrictStr = Field(pattern=_HEX12)
    point_id: StrictStr = Field(pattern=_HEX12)
    experiment: StrictStr
    # What names a point follows the spec's name rule (a bundle made from a spec holds no
    # other), so it is shown as written in every format; free text (a reason, a host) is
    # escaped for each reader instead.
    framework: StrictStr = Field(pattern=NAME)
    model: StrictStr = Field(pattern=NAME)
    dataset: StrictStr = Field(pattern=NAME)
    nodes: StrictInt = Field(ge=1, le=1_000_000)
    ranks_per_node: StrictInt = Field(ge=1, le=1_000_000)
    per_device_batch: StrictInt = Field(ge=1, le=COUNT_MAX)
    global_batch: StrictInt = Field(ge=1, le=COUNT_MAX)
    scaling: Literal["weak", "strong"]
    precision: StrictStr = Field(pattern=NAME)
    loader: StrictStr = Field(pattern=NAME)
    repetition: StrictInt = Field(ge=0, le=COUNT_MAX)
    training: dict[str, Any]
    state: StrictStr
    reason: StrictStr | None = None
    backend: StrictStr | None = Field(default=None, max_length=_TEXT)
    job_id: StrictStr | None = Field(default=None, max_length=_TEXT)
    created: TIMESTAMP.field(optional=True) = None  # type: ignore[valid-type]
    rerun_of: StrictStr | None = Field(default=None, pattern=_HEX12)

    @field_validator("training")
    @classmethod
    def _recipe(cls, value: dict[str, Any]) -> dict[str, Any]:
        bad = abnormal(value)
        if bad is not None:
            raise ValueError(f"holds {bad!r}, not a finite number (a denormal is no setting)")
        return value


@dataclass
class BundleRun:
    row: dict[str, Any]  # RunFile's fields
    records: list[dict[str, Any]]
    files: dict[str, bytes] = field(default_factory=dict)  # job.sh, profile.toml, run.log


@dataclass
class Bundle:
    path: Path
    manifest: Manifest
    experiment: ExperimentFile
    runs: list[BundleRun]

    @property
    def site(self) -> str:
        return self.manifest.site


class _Bounded:
    """A stream that refuses to give more than `limit` bytes: a gzip bomb, or a tar whose
    headers claim more than the members, stops here instead of filling memory."""

    def __init__(self, raw: Any, limit: int) -> None:
        self.raw, self.left = raw, limit

    def read(self, n: int = -1) -> bytes:
        want = self.left + 1 if n is None or n < 0 else min(n, self.left + 1)
        data = self.raw.read(want)
        self.left -= len(data)
        if self.left < 0:
            raise _TooBig(f"it unpacks to more than {MAX_BYTES >> 20} MiB")
        return data


class _TooBig(Exception):
    pass


def _member_problem(m: tarfile.TarInfo) -> str | None:
    name = m.name
    if name.startswith("/") or re.match(r"^[A-Za-z]:", name):
        return f"{name!r}: an absolute path"
    if ".." in PurePosixPath(name).parts or "\\" in name:
        return f"{name!r}: a path that leaves the bundle"
    if m.issym() or m.islnk():
        return f"{name!r}: a link (to {m.linkname!r}); a bundle holds only files"
    if not m.isreg():
        return f"{name!r}: not a regular file (a folder, device or fifo)"
    if name not in (MANIFEST, EXPERIMENT) and not _RUN_MEMBER.fullmatch(name):
        return f"{name!r}: not a member a bundle has ({MANIFEST}, {EXPERIMENT}, runs/RUN/FILE)"
    if m.size > MAX_MEMBER_BYTES:
        return f"{name!r}: {m.size} bytes, over the {MAX_MEMBER_BYTES >> 20} MiB a member may hold"
    return None


def _members(path: Path) -> tuple[dict[str, bytes], list[str]]:
    """Every member's bytes, by name, read within the bounds; and the problems found."""
    problems: list[str] = []
    data: dict[str, bytes] = {}
    total = 0
    try:
        # a FIFO, a device, a folder: refused before it is opened (engine/io/reading.py)
        with open_regular(path) as raw, gzip.GzipFile(fileobj=raw) as unzipped:
            stream = _Bounded(unzipped, MAX_BYTES + _HEADER_ROOM)
            with tarfile.open(fileobj=stream, mode="r|") as tar:  # type: ignore[call-overload]
                for count, m in enumerate(tar, 1):
                    if count > MAX_MEMBERS:
                        return data, [*problems, f"more than {MAX_MEMBERS} members"]
                    problem = _member_problem(m)
                    if problem is None and m.name in data:
                        problem = f"{m.name!r}: in the bundle twice"
                    if problem is not None:
                        problems.append(problem)
                        continue
                    total += m.size
                    if total > MAX_BYTES:
                        return data, [*problems, f"its members hold over {MAX_BYTES >> 20} MiB"]
                    fh = tar.extractfile(m)
                    data[m.name] = fh.read() if fh is not None else b""
    except _TooBig as exc:
        return data, [*problems, str(exc)]
    except FileNotFoundError:
        raise UserError(f"{path}: no such file") from None
    except NotRegularFile as exc:
        raise UserError(f"{exc}; a bundle is a .tar.gz file") from None
    except (tarfile.TarError, gzip.BadGzipFile, EOFError, zlib.error, OSError) as exc:
        return data, [*problems, f"not a dlscale bundle (a tar.gz archive): {exc}"]
    return data, problems


def _model(model: type[_Strict], name: str, raw: bytes, problems: list[str]) -> Any:
    try:  # bounded as every JSON dlscale reads (engine/io/reading.py): no RecursionError
        return model.model_validate(load_json(raw, MAX_MEMBER_BYTES))
    except (ValueError, UnicodeDecodeError) as exc:
        if isinstance(exc, ValidationError):
            for e in exc.errors():
                where = ".".join(str(x) for x in e["loc"]) or "(the whole file)"
                problems.append(f"{name}: {where}: {_said(e)}")
        else:
            problems.append(f"{name}: {exc}")
        return None


def _said(e: Any) -> str:
    """pydantic's words for a problem; a name against the spec's rule in the rule's words,
    with the name given (shown escaped by the printer)."""
    msg = str(e["msg"]).removeprefix("Value error, ")
    if e["type"] == "string_pattern_mismatch" and (e.get("ctx") or {}).get("pattern") == NAME:
        msg = (
            f"{e['input']!r} is not a name a spec can hold: 1 to 64 letters, digits, '.', "
            "'_' or '-', starting with a letter or a digit"
        )
    return msg


def _records(name: str, raw: bytes, row: dict[str, Any], problems: list[str]) -> list[dict]:
    out = []
    for number, line in enumerate(raw.decode("utf-8", errors="replace").splitlines(), 1):
        try:
            out.append(parse_record(line))
        except RecordError as exc:
            problems.append(f"{name} line {number}: {exc}")
    params = next((r for r in out if r["kind"] == "params"), None)
    if params is None:
        problems.append(f"{name}: no params record (every run's records begin with one)")
    else:
        for key in ("framework", "model", "dataset"):
            if params[key] != row[key]:
                problems.append(
                    f"{name}: the params record's {key} {params[key]!r} is not the "
                    f"run's ({row[key]!r})"
                )
    return out


def read_bundle(path: str | Path) -> Bundle:
    """The bundle, checked whole; BundleError (exit 2) naming every problem otherwise."""
    path = Path(path)
    data, problems = _members(path)
    if problems:
        raise BundleError(path, problems)
    if MANIFEST not in data:
        raise BundleError(path, [f"no {MANIFEST}: not a dlscale bundle"])
    manifest = _model(Manifest, MANIFEST, data[MANIFEST], problems)
    if manifest is None:
        raise BundleError(path, problems)
    listed = set(manifest.files)
    present = set(data) - {MANIFEST}
    problems += [f"{n!r}: listed in {MANIFEST} but not in the bundle" for n in listed - present]
    problems += [f"{n!r}: in the bundle but not listed in {MANIFEST}" for n in present - listed]
    for name in sorted(listed & present):
        got = hashlib.sha256(data[name]).hexdigest()
        if got != manifest.files[name]:
            problems.append(
                f"{name!r}: checksum fails (sha256 {got}, the manifest says {manifest.files[name]})"
            )
    if problems:
        raise BundleError(path, sorted(problems))
    experiment = None
    if EXPERIMENT in data:
        experiment = _model(ExperimentFile, EXPERIMENT, data[EXPERIMENT], problems)
    else:
        problems.append(f"no {EXPERIMENT}")
    if experiment is not None:
        try:  # the bounds `store rebuild` reads it back with (spec.toml in each run folder)
            parse_toml_text(experiment.spec_text, f"{EXPERIMENT}: spec_text")
        except SpecError as exc:
            problems += exc.problems
    if experiment is not None and experiment.name != manifest.experiment:
        problems.append(
            f"{EXPERIMENT}: name {experiment.name!r} is not the manifest's "
            f"experiment {manifest.experiment!r}"
        )
    runs = _runs(data, manifest, problems)
    if problems or experiment is None:
        raise BundleError(path, problems)
    return Bundle(path, manifest, experiment, runs)


def _runs(data: dict[str, bytes], manifest: Manifest, problems: list[str]) -> list[BundleRun]:
    by_run: dict[str, dict[str, bytes]] = {}
    for name, raw in data.items():
        if m := _RUN_MEMBER.fullmatch(name):
            by_run.setdefault(m[1], {})[m[2]] = raw
    runs = []
    for run_id, files in sorted(by_run.items()):
        where = f"runs/{run_id}"
        if "run.json" not in files or "metrics.jsonl" not in files:
            problems.append(f"{where}: needs run.json and metrics.jsonl")
            continue
        row = _model(RunFile, f"{where}/run.json", files.pop("run.json"), problems)
        if row is None:
            continue
        if row.run_id != run_id:
            problems.append(f"{where}/run.json: run_id {row.run_id!r} is not its folder's")
        if row.experiment != manifest.experiment:
            problems.append(f"{where}/run.json: experiment {row.experiment!r} is not the bundle's")
        if row.state not in TERMINAL:
            problems.append(
                f"{where}/run.json: state {row.state!r}: a bundle holds finished runs "
                f"({', '.join(TERMINAL)})"
            )
        records = _records(
            f"{where}/metrics.jsonl", files.pop("metrics.jsonl"), row.model_dump(), problems
        )
        runs.append(BundleRun(row.model_dump(), records, files))
    if not runs:
        problems.append("no runs")
    known = {r.row["run_id"] for r in runs}
    for r in runs:
        if r.row["rerun_of"] is not None and r.row["rerun_of"] not in known:
            problems.append(
                f"runs/{r.row['run_id']}/run.json: rerun_of {r.row['rerun_of']!r} is not "
                "a run of the bundle"
            )
    return runs
