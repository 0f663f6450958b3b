"""`dlscale report`: one experiment written up from the store, as Markdown (figures as PNG
files beside it) or as one self-contained HTML page (figures inlined as data URIs).

Every number comes from analysis.results / analysis.reruns, the one source of truth that
`dlscale results` prints too; this module only chooses, formats and lays them out. Next to
the page go the figures, results.csv and results.json (the same rows, unformatted; reruns.json
and reference.json for those tables) and one
MLPerf-style log per run (mllog/), so a reader can check any number against its run.
Which files of the --out folder a report may replace or remove is report_folder's.
"""

from __future__ import annotations

import base64
import datetime
import json
import re
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import jinja2
import markupsafe

from ...config.toml_text import tomllib
from ...errors import NotFoundError, UserError
from ...io.text import markdown_block, markdown_fence, markdown_inline, printable
from ...runs import RunRow, State
from ...tracking.store import Store
from .. import analysis, tables
from ..bundles import profile_of, profile_text
from ..projection import project
from ..projection.tables import projection_table
from ..reference import LoadedReference, beside_spec, compare, load_reference
from ..rows import Family, ResultRow
from ..table import Table
from ..tables import efficiency_table, results_table
from . import figures, mllog
from .folder import ReportFolder
from .sections import (
    loader_table,
    noisy_table,
    quiet_table,
    reference_table,
    rerun_table,
    shown_path,
    tta_table,
)
from .several import several

FORMATS = ("md", "html")


def _environment(fmt: str) -> jinja2.Environment:
    """The templates' environment for one format. Every value a template shows is written
    for its reader by default (`finalize`, before HTML's autoescape): printable in HTML,
    escaped for Markdown in Markdown; a filter that writes a value itself returns Markup."""
    html = fmt == "html"
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("dlscale.engine.results.report", "templates"),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=html,
        finalize=_html_value if html else _markdown_value,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    if html:
        # Notes are written with Markdown `code`; HTML gets <code> (the text escaped first).
        env.filters["code"] = lambda v: markupsafe.Markup(
            re.sub(r"`([^`]+)`", r"<code>\1</code>", str(markupsafe.escape(printable(str(v)))))
        )
        return env
    env.filters["cell"] = lambda v: markupsafe.Markup(markdown_inline(v))
    env.filters["row"] = lambda cells: markupsafe.Markup(
        "| " + " | ".join(markdown_inline(c) for c in cells) + " |"
    )
    env.filters["block"] = lambda v: markupsafe.Markup(markdown_block(v))
    env.filters["note"] = lambda v: markupsafe.Markup(_markdown_note(str(v)))
    env.filters["fence"] = lambda v: markupsafe.Markup(markdown_fence(str(v)))
    env.filters["verbatim"] = lambda v: markupsafe.Markup(printable(str(v), newlines=True))
    return env


def _html_value(v: Any) -> Any:
    return printable(v, newlines=True) if isinstance(v, str) and not hasattr(v, "__html__") else v


def _markdown_value(v: Any) -> Any:
    return v if hasattr(v, "__html__") else markdown_inline("" if v is None else v)


def _markdown_note(note: str) -> str:
    """A note dlscale wrote, with its `code` spans kept (their text is literal in Markdown)
    and the text between them escaped; unpaired backticks (a name's) are escaped text."""
    parts = note.split("`")
    if len(parts) % 2 == 0:
        return markdown_block(note)
    return "".join(
        f"`{printable(part)}`" if i % 2 else (markdown_block if i == 0 else markdown_inline)(part)
        for i, part in enumerate(parts)
    )


@dataclass
class Report:
    experiment: str
    path: Path  # report.md or report.html
    tables: dict[str, Table]  # by section key: results, tta, loaders, noisy, ...
    figures: list[figures.Figure]
    rows: list[ResultRow]  # analysis.results of the experiment, as used
    mllogs: list[Path]
    reference: LoadedReference | None = None
    removed: list[str] = field(default_factory=list)  # the earlier report's stale files


# --- the set-up: where and with what the numbers were measured --------------------------


def setup(store: Store, exp: dict[str, Any], runs: list[RunRow]) -> list[tuple[str, str]]:
    envs = store.records.last("env", [r["run_id"] for r in runs])
    versions: dict[str, set[str]] = {}
    nodes: set[str] = set()
    devices: Counter[str] = Counter()
    launchers: set[str] = set()
    dlscale_versions: set[str] = set()
    jobs: set[str] = set()
    for r in runs:
        env = envs.get(r["run_id"])
        if not env:
            continue
        for lib, v in sorted(env["framework_versions"].items()):
            if v is not None:
                versions.setdefault(lib, set()).add(str(v))
        nodes.update(env.get("nodes") or env["hostnames"])
        devices.update(set(env["devices"]))
        launchers.add(env.get("launcher") or "?")
        dlscale_versions.add(env["dlscale_version"])
        if env.get("job_id"):
            jobs.add(env["job_id"])
    backends = sorted({r["backend"] for r in runs if r["backend"]})
    states = Counter(r["state"] for r in runs)
    out = [
        ("experiment", exp["name"]),
        ("spec", f"{shown_path(exp['spec_path'] or '-')} (sha256 {exp['spec_digest']})"),
        ("backend", ", ".join(backends) or "-"),
    ]
    profile = profile_text(profile_of(runs))
    if profile:
        out.append(("cluster profile", profile))
    out += [
        ("nodes", ", ".join(sorted(nodes)) or "-"),
        ("devices", "; ".join(sorted(devices)) or "-"),
        (
            "software",
            "; ".join(f"{lib} {', '.join(sorted(v))}" for lib, v in sorted(versions.items()))
            or "-",
        ),
        ("launchers", ", ".join(sorted(launchers)) or "-"),
        ("dlscale", ", ".join(sorted(dlscale_versions)) or "-"),
        (
            "runs",
            ", ".join(f"{n} {s.lower()}" for s, n in sorted(states.items()))
            + (f"; {len(jobs)} Slurm jobs" if jobs else ""),
        ),
    ]
    return out


# --- tables ------------------------------------------------------------------------------


# --- the page ----------------------------------------------------------------------------


def build(
    store: Store,
    experiment: str | list[str] | None,
    out_dir: str | Path,
    fmt: str = "md",
    reference_path: str | Path | None = None,
    force: bool = False,
    profile: str | Path | None = None,
) -> Report:
    """Write the report into out_dir (of several experiments side by side when given a
    list of more than one: report_many). A folder that is not empty must hold an earlier
    report of dlscale's (its manifest) unless `force`; only that report's own files are
    ever removed or overwritten (report_folder). `profile`: the cluster profile whose
    links and partition the projection uses (default: the one the runs kept)."""
    if fmt not in FORMATS:
        raise UserError(f"--format {fmt!r}: allowed: {', '.join(FORMATS)}")
    if isinstance(experiment, list) and len(experiment) > 1:  # side by side: report_many
        exp, runs, rows = several(
            store, [store.experiment(store.pick_experiment(e)) for e in experiment]
        )
        name = exp["name"]
    else:
        one = experiment[0] if isinstance(experiment, list) else experiment
        exp = store.experiment(store.pick_experiment(one))
        name = exp["name"]
        runs = store.runs(name)
        rows = analysis.results(store, name)
    if not any(r["throughput"] is not None for r in rows):
        raise NotFoundError(
            f"experiment {name} has no completed run yet; "
            "`dlscale status -e " + name + "` shows where it is"
        )
    ref_file = reference_path or beside_spec(exp["spec_path"])
    ref = load_reference(ref_file) if ref_file else None

    folder = ReportFolder.open(Path(out_dir), force)
    try:
        return _write(store, exp, runs, rows, ref, fmt, folder, profile)
    finally:
        folder.discard()


def _write(
    store: Store,
    exp: dict[str, Any],
    runs: list[RunRow],
    rows: list[ResultRow],
    ref: LoadedReference | None,
    fmt: str,
    folder: ReportFolder,
    profile: str | Path | None = None,
) -> Report:
    """Everything into the folder's stage, then into place (see report_folder)."""
    name = exp["name"]
    families, beyond = _projection(store, name, profile)
    with folder.subfolder("figures") as into:
        figs = figures.draw_all(
            rows,
            into,
            name,
            analysis.accuracy_curves(store, name),
            project.chart_series(families),
            project.chart_series(families, "throughput"),
        )
    folder.write("results.csv", tables.results_csv(rows))
    folder.write("results.json", tables.results_json(rows) + "\n")
    reruns = analysis.reruns(store, name)
    extra: dict[str, Any] = {"reruns.json": reruns, "projection.json": families}
    if ref:
        extra["reference.json"] = compare(ref.reference, rows)
    for file, data in extra.items():
        if data:
            folder.write(file, json.dumps(data, indent=2, allow_nan=False) + "\n")
    with folder.subfolder("mllog") as into:
        logs = mllog.write(
            store, [r["run_id"] for r in runs if r["state"] == State.COMPLETED], into
        )

    made = {
        "results": results_table(rows, analysis.notes(store, name)),
        "efficiency": efficiency_table(rows),
        "tta": tta_table(rows),
        "loaders": loader_table(rows),
        "noisy": noisy_table(rows),
        "quiet": quiet_table(store.records.last("interference", [r["run_id"] for r in runs]), rows),
        "reruns": rerun_table(reruns),
        "reference": reference_table(ref, rows) if ref else None,
        "projection": beyond,
    }
    sections = {k: t for k, t in made.items() if t is not None}

    def image(f: figures.Figure) -> str:
        if fmt == "md":
            return f"figures/{f.file}"
        return "data:image/png;base64," + base64.b64encode(f.png).decode()

    page = (
        _environment(fmt)
        .get_template(f"report.{fmt}.j2")
        .render(
            name=name,
            description=_description(exp),
            generated=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            setup=setup(store, exp, runs),
            spec_text=exp["spec_text"],
            tables=sections,
            figures=[(f, image(f)) for f in figs],
            mllog_count=len(logs),
            data_files=["results.json", "results.csv"] + [f for f, d in extra.items() if d],
        )
    )
    folder.write(f"report.{fmt}", page if page.endswith("\n") else page + "\n")
    folder.commit()
    out = folder.out
    return Report(
        name,
        out / f"report.{fmt}",
        sections,
        [replace(f, path=out / "figures" / f.file) for f in figs],
        rows,
        [out / "mllog" / p.name for p in logs],
        ref,
        folder.removed,
    )


def _projection(
    store: Store, name: str, profile: str | Path | None
) -> tuple[list[Family], Table | None]:
    shown = project.of_study(store, name, profile=profile)
    return shown.families, projection_table(shown.families, shown.to, shown.to_from)


def _description(exp: dict[str, Any]) -> str:
    try:
        return tomllib.loads(exp["spec_text"]).get("experiment", {}).get("description", "")
    except (tomllib.TOMLDecodeError, RecursionError, AttributeError):
        return ""
