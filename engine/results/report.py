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
import tomllib

from ..errors import NotFoundError, UserError
from ..paths import RunPaths
from ..tracking.store import Store
from . import analysis, figures, mllog, tables
from .reference import LoadedReference, beside_spec, compare, load_reference
from .report_folder import ReportFolder
from .report_tables import Table, efficiency_table

FORMATS = ("md", "html")

_templates = jinja2.Environment(
    loader=jinja2.PackageLoader("dlscale.engine.results", "templates"),
    undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
    autoescape=jinja2.select_autoescape(["html.j2"]), trim_blocks=True, lstrip_blocks=True)
# A Markdown table cell: a pipe would end the cell, a newline the row.
_templates.filters["cell"] = lambda v: str(v).replace("|", "\\|").replace("\n", " ")
# Notes are written with Markdown `code`; HTML gets <code> (the text escaped first).
_templates.filters["code"] = lambda v: markupsafe.Markup(re.sub(
    r"`([^`]+)`", r"<code>\1</code>", str(markupsafe.escape(v))))


@dataclass
class Report:
    experiment: str
    path: Path                      # report.md or report.html
    tables: dict[str, Table]        # by section key: results, tta, loaders, noisy, ...
    figures: list[figures.Figure]
    rows: list[dict[str, Any]]      # analysis.results of the experiment, as used
    mllogs: list[Path]
    reference: LoadedReference | None = None
    removed: list[str] = field(default_factory=list)  # the earlier report's stale files


def pick_experiment(store: Store, name: str | None) -> dict[str, Any]:
    known = {e["name"]: e for e in store.experiments()}
    if name is None:
        if len(known) == 1:
            return next(iter(known.values()))
        if not known:
            raise NotFoundError(f"the store ({store.home}) has no experiments yet; "
                                "run one with `dlscale run SPEC`")
        raise UserError(f"the store holds {len(known)} experiments; name one with "
                        f"--experiment: {', '.join(sorted(known))}")
    if name not in known:
        raise NotFoundError(f"no experiment {name!r} in the store ({store.home}); it has: "
                            f"{', '.join(sorted(known)) or 'none'}")
    return known[name]


# --- the set-up: where and with what the numbers were measured --------------------------

def _profile_of(runs: list[dict[str, Any]]) -> str | None:
    """The cluster profile a Slurm run kept beside its job script (name and description)."""
    for r in runs:
        path = RunPaths(Path(r["run_dir"] or "")).profile
        if path.is_file():  # only a cluster's runs keep one
            try:
                data = tomllib.loads(path.read_text())
            except (OSError, tomllib.TOMLDecodeError):
                continue
            desc = data.get("description")
            return f"{data.get('name', '?')}" + (f" ({desc})" if desc else "")
    return None


def _shown(path: str | Path) -> str:
    """A path as a reader of the report wants it: relative when it lies under the folder
    the report is made in (a checkout), absolute otherwise."""
    p = Path(path)
    return str(p.relative_to(Path.cwd()) if p.is_absolute() and p.is_relative_to(Path.cwd())
               else p)


def setup(store: Store, exp: dict[str, Any], runs: list[dict[str, Any]]) -> list[tuple[str, str]]:
    envs = store.last_records("env", [r["run_id"] for r in runs])
    versions: dict[str, set[str]] = {}
    nodes, devices, launchers, dlscale_versions, jobs = set(), Counter(), set(), set(), set()
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
    out = [("experiment", exp["name"]),
           ("spec", f"{_shown(exp['spec_path'] or '-')} (sha256 {exp['spec_digest']})"),
           ("backend", ", ".join(backends) or "-")]
    profile = _profile_of(runs)
    if profile:
        out.append(("cluster profile", profile))
    out += [("nodes", ", ".join(sorted(nodes)) or "-"),
            ("devices", "; ".join(sorted(devices)) or "-"),
            ("software", "; ".join(f"{lib} {', '.join(sorted(v))}"
                                   for lib, v in sorted(versions.items())) or "-"),
            ("launchers", ", ".join(sorted(launchers)) or "-"),
            ("dlscale", ", ".join(sorted(dlscale_versions)) or "-"),
            ("runs", ", ".join(f"{n} {s.lower()}" for s, n in sorted(states.items()))
             + (f"; {len(jobs)} Slurm jobs" if jobs else ""))]
    return out


# --- tables ------------------------------------------------------------------------------

def _scale(r: dict[str, Any]) -> str:
    return f"{r['nodes']}x{r['ranks_per_node']}"


def _results_table(rows: list[dict[str, Any]], skipped: list[str]) -> Table:
    loaders = len({r["loader"] for r in rows}) > 1
    schedules = len({r.get("lr_schedule") for r in rows}) > 1
    devices = len({r.get("device") for r in rows}) > 1
    headers = ["model", "framework"] + (["device"] if devices else []) + (
        ["loader"] if loaders else []) + (
        ["lr schedule"] if schedules else []) + [
        "scale", "devices", "batch/dev", "precision", "n", "images/s", "CI95", "CV",
        "speedup", "efficiency", "speedup (own)", "images/J", "baseline", "state"]
    body = []
    for r in rows:
        body.append([r["model"], r["framework"]] + ([r.get("device") or "-"] if devices else [])
                    + ([r["loader"]] if loaders else []) + (
            [r.get("lr_schedule") or "-"] if schedules else []) + [
            _scale(r), str(r["ranks"]),
            str(r["per_device_batch"]) + ("" if r["scaling"] == "weak" else " (strong)"),
            r["precision"], f"{r['n']}/{r['repetitions']}", tables.fmt(r["throughput"], 1),
            tables.fmt(r["throughput_ci95"], 1),
            (tables.fmt(100 * r["throughput_cv"], 1, "%") if r["throughput_cv"] is not None
             else "-") + (" *" if r["noisy"] else ""),
            tables.fmt(r["speedup"]), tables.fmt(r["efficiency"]), tables.fmt(r["speedup_own"]),
            tables.fmt(r.get("images_per_joule"), 1), r["baseline"] or "-", r["state"]])
    first_num = headers.index("devices")
    right = set(range(first_num, headers.index("baseline"))) - {headers.index("precision")}
    scaling = sorted({r["scaling"] for r in rows})
    notes = [f"{' and '.join(scaling)} scaling; images/s is the mean over repetitions, CI95 "
             "the half-width of its Student-t 95% confidence interval, CV the coefficient "
             "of variation; * = noisy (CV > 5%)."]
    notes += [line for line in tables.baselines_note(rows).splitlines() if line]
    energy = {(r.get("unmeasured") or {}).get("images_per_joule") for r in rows} - {None}
    notes += ["images/J: images trained per joule of the devices' energy over the timed "
              "steps (NVML on GPUs, the CPU packages' RAPL counters)" + (
                  f"; not measured: {'; '.join(sorted(energy))}" if energy else "") + "."]
    notes += skipped  # metric lines left out on ingest, by run, file and line
    return Table("Throughput, speedup and efficiency", headers, body, notes, right)


def _tta_table(rows: list[dict[str, Any]]) -> Table | None:
    rows = [r for r in rows if r["best_top1"] is not None]
    if not rows:
        return None
    body = [[r["model"], r["framework"], _scale(r), str(r["ranks"]), str(r["per_device_batch"]),
             tables.fmt(r["time_to_accuracy_s"], 1), tables.fmt(r["time_to_accuracy_ci95"], 1),
             r["reached_target"] or "-", tables.fmt(r["best_top1"], 3),
             tables.fmt(r["runtime_s"], 1)] for r in rows]
    return Table("Time-to-accuracy",
                 ["model", "framework", "scale", "devices", "batch/dev", "TTA s", "CI95",
                  "reached target", "best top-1", "runtime s"], body,
                 ["TTA: wall time from the first training step to the first evaluation at "
                  "or above the target; 'reached target' counts the repetitions that got "
                  "there of those that evaluated."], set(range(3, 10)))


def _loader_table(rows: list[dict[str, Any]]) -> Table | None:
    loaders = sorted({r["loader"] for r in rows}, key=lambda x: (x != "native", x))
    if len(loaders) < 2:
        return None
    groups: dict[tuple, dict[str, dict[str, Any]]] = {}
    for r in rows:
        key = (r["model"], r["framework"], r["nodes"], r["ranks_per_node"],
               r["per_device_batch"], r["precision"])
        groups.setdefault(key, {})[r["loader"]] = r
    body = []
    for (model, fw, n, rpn, batch, prec), by in sorted(groups.items()):
        base = by.get(loaders[0])
        cells = [model, fw, f"{n}x{rpn}", str(batch), prec]
        for ld in loaders:
            r = by.get(ld)
            cells.append(tables.throughput_text(r) if r else "-")
        for ld in loaders[1:]:
            r = by.get(ld)
            ratio = analysis.speedup(r["throughput"] if r else None,
                                     base["throughput"] if base else None)
            cells.append(tables.fmt(ratio))
        body.append(cells)
    headers = ["model", "framework", "scale", "batch/dev", "precision"] + [
        f"{ld} images/s" for ld in loaders] + [f"{ld} / {loaders[0]}" for ld in loaders[1:]]
    return Table("Data loaders", headers, body,
                 [f"throughput with each loader at the same point; the ratio is against "
                  f"{loaders[0]}."], set(range(5, len(headers))))


def _noisy_table(rows: list[dict[str, Any]]) -> Table | None:
    noisy = [r for r in rows if r["noisy"]]
    if not noisy:
        return None
    body = [[r["model"], r["framework"], _scale(r), f"{r['n']}",
             tables.fmt(r["throughput"], 1), tables.fmt(100 * r["throughput_cv"], 1, "%"),
             " ".join(r["run_ids"])] for r in noisy]
    return Table("Noisy points (CV > 5%)",
                 ["model", "framework", "scale", "n", "images/s", "CV", "runs"], body,
                 ["These points vary more than 5% between repetitions: trust their mean "
                  "less, look at the runs' nodes, or repeat them."], {3, 4, 5})


def _rerun_table(reruns: list[dict[str, Any]]) -> Table | None:
    if not reruns:
        return None
    body = [[r["framework"], r["model"], f"{r['nodes']}x{r['ranks_per_node']}",
             r["rerun_of"], r["run_id"], tables.fmt(r["original_throughput"], 1),
             tables.fmt(r["rerun_throughput"], 1), tables.fmt(r["ratio"], 3), r["state"]]
            for r in reruns]
    return Table("Reruns (original against its exact repeat)",
                 ["framework", "model", "scale", "original run", "rerun", "original images/s",
                  "rerun images/s", "rerun / original", "state"], body,
                 ["A rerun repeats one run from its record (`dlscale rerun`); it is not "
                  "pooled into the point's statistics above."], {5, 6, 7})


def _reference_table(ref: LoadedReference, rows: list[dict[str, Any]]) -> Table:
    p = ref.reference.paper
    body = []
    for c in compare(ref.reference, rows):
        digits = 1 if c["metric"].endswith("_s") else 2
        paper = {"=": "", "<": "< ", ">": "> "}[c["bound"]] + tables.fmt(c["paper_value"], digits)
        yours = tables.fmt(c["yours"], digits) if c["yours"] is not None else "not measured"
        where = "-"
        if c["your_devices"]:
            differs = [what for what, same in (("scale", c["same_scale"]),
                                               ("loader", c["same_loader"])) if not same]
            where = f"{c['your_devices']} devices, {c['your_loader']} loader" + (
                f" (not the paper's {' or '.join(differs)})" if differs else "")
        body.append([c["metric"], c["unit"], c["framework"], c["model"],
                     f"{c['paper_devices']} x {c['hardware']}", paper, yours, where,
                     c["note"] or "-"])
    return Table(f"Against the paper: {p.authors}, {p.venue}",
                 ["metric", "unit", "framework", "model", "paper's scale", "paper", "yours",
                  "your point", "note"], body,
                 [f"{p.title}" + (f" ({p.url})" if p.url else ""),
                  f"published numbers from {_shown(Path(ref.path).resolve())}"], {5, 6})


# --- the page ----------------------------------------------------------------------------

def build(store: Store, experiment: str | None, out_dir: str | Path, fmt: str = "md",
          reference_path: str | Path | None = None, force: bool = False) -> Report:
    """Write the report into out_dir. A folder that is not empty must hold an earlier
    report of dlscale's (its manifest) unless `force`; only that report's own files are
    ever removed or overwritten (report_folder)."""
    if fmt not in FORMATS:
        raise UserError(f"--format {fmt!r}: allowed: {', '.join(FORMATS)}")
    exp = pick_experiment(store, experiment)
    name = exp["name"]
    runs = store.runs(name)
    rows = analysis.results(store, name)
    if not any(r["throughput"] is not None for r in rows):
        raise NotFoundError(f"experiment {name} has no completed run yet; "
                            "`dlscale status -e " + name + "` shows where it is")
    ref_file = reference_path or beside_spec(exp["spec_path"])
    ref = load_reference(ref_file) if ref_file else None

    folder = ReportFolder.open(Path(out_dir), force)
    try:
        return _write(store, exp, runs, rows, ref, fmt, folder)
    finally:
        folder.discard()


def _write(store: Store, exp: dict[str, Any], runs: list[dict[str, Any]],
           rows: list[dict[str, Any]], ref: LoadedReference | None, fmt: str,
           folder: ReportFolder) -> Report:
    """Everything into the folder's stage, then into place (see report_folder)."""
    name = exp["name"]
    figs = figures.draw_all(rows, folder.subfolder("figures"), name,
                            analysis.accuracy_curves(store, name))
    folder.write("results.csv", tables.results_csv(rows))
    folder.write("results.json", tables.results_json(rows) + "\n")
    reruns = analysis.reruns(store, name)
    extra = {"reruns.json": reruns}
    if ref:
        extra["reference.json"] = compare(ref.reference, rows)
    for file, data in extra.items():
        if data:
            folder.write(file, json.dumps(data, indent=2) + "\n")
    logs = mllog.write(store, [r["run_id"] for r in runs if r["state"] == "COMPLETED"],
                       folder.subfolder("mllog"))

    made = {"results": _results_table(rows, analysis.notes(store, name)),
            "efficiency": efficiency_table(rows), "tta": _tta_table(rows),
            "loaders": _loader_table(rows), "noisy": _noisy_table(rows),
            "reruns": _rerun_table(reruns),
            "reference": _reference_table(ref, rows) if ref else None}
    sections = {k: t for k, t in made.items() if t is not None}

    def image(f: figures.Figure) -> str:
        if fmt == "md":
            return f"figures/{f.file}"
        return "data:image/png;base64," + base64.b64encode(f.path.read_bytes()).decode()

    page = _templates.get_template(f"report.{fmt}.j2").render(
        name=name, description=_description(exp), generated=datetime.datetime.now(
            datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        setup=setup(store, exp, runs), spec_text=exp["spec_text"], tables=sections,
        figures=[(f, image(f)) for f in figs], mllog_count=len(logs),
        data_files=["results.json", "results.csv"] + [f for f, d in extra.items() if d])
    folder.write(f"report.{fmt}", page if page.endswith("\n") else page + "\n")
    folder.commit()
    out = folder.out
    return Report(name, out / f"report.{fmt}", sections,
                  [replace(f, path=out / "figures" / f.file) for f in figs], rows,
                  [out / "mllog" / p.name for p in logs], ref, folder.removed)


def _description(exp: dict[str, Any]) -> str:
    try:
        return tomllib.loads(exp["spec_text"]).get("experiment", {}).get("description", "")
    except tomllib.TOMLDecodeError:
        return ""
