"""Results that travel: an experiment's finished runs written to one bundle (a tar.gz, its
layout in bundle_read.py) and a bundle added to another store, its site of origin kept as
part of each point's identity (tracking/store_imports.py).

The site a bundle names is `--site`, else the cluster profile's name its runs were
submitted with (Slurm runs keep profile.toml in their folder), else this machine's host
name (the local backend).
"""

from __future__ import annotations

import datetime
import hashlib
import io
import json
import os
import re
import socket
import tarfile
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, cast

from ...config.tomlfile import parse_toml
from ...errors import NotFoundError, SpecError, UserError
from ...io.outputs import check_file, writing
from ...launching.plan import digest
from ...paths import RunPaths, own_folder, write_run_file
from ...runs import TERMINAL, RunRow
from ...tracking.store import Store, locks, staging
from ...tracking.store.imports import Imported
from .read import (
    EXPERIMENT,
    FORMAT,
    FORMAT_VERSION,
    LOG_TAIL_BYTES,
    MANIFEST,
    SITE_RULE,
    Bundle,
    RunFile,
    read_bundle,
)

_ROW_FIELDS = tuple(RunFile.model_fields)


def dlscale_version() -> str:
    try:
        return version("dlscale")
    except PackageNotFoundError:
        return "unknown"


def profile_of(runs: list[RunRow]) -> dict[str, Any] | None:
    """The cluster profile a Slurm run kept beside its job script, parsed; None for runs
    that had none (the local backend)."""
    for r in runs:
        path = RunPaths(Path(r["run_dir"] or "")).profile
        if path.is_file():
            try:  # bounded and checked like any profile (engine.io.reading); unreadable: skipped
                return parse_toml(path)[1]
            except SpecError:
                continue
    return None


def site_measured_at(runs: list[RunRow]) -> str:
    """Where these runs were measured: the cluster profile's name, else this host."""
    profile = profile_of(runs) or {}
    name = profile.get("name")
    if isinstance(name, str) and re.match(SITE_RULE, name):
        return name
    host = socket.gethostname().split(".")[0] or "localhost"
    return re.sub(r"[^A-Za-z0-9._-]", "-", host)[:64]


def imported_name(experiment: str, site: str) -> str:
    return f"{experiment}@{site}"


# --- export ------------------------------------------------------------------------------


def export(
    store: Store, experiment: str, out: str | Path, site: str | None = None
) -> tuple[Path, int, int]:
    """Write the experiment's finished runs to `out` (a new file). Returns the path, the
    runs written and the runs left out (queued or running: a bundle holds finished ones)."""
    out = Path(out)
    known = {e["name"]: e for e in store.experiments()}
    if experiment not in known:
        raise NotFoundError(f"no experiment {experiment!r} in the store ({store.home})")
    exp = known[experiment]
    if exp.get("site"):
        raise UserError(
            f"experiment {experiment} was imported from {exp['site']}: pass its bundle on "
            "instead (a bundle holds the runs of the site that measured them)"
        )
    if site is not None and not re.match(SITE_RULE, site):
        raise UserError(
            f"--site {site!r}: a site is 1 to 64 letters, digits, '.', '_' or '-', "
            "beginning with a letter or digit"
        )
    check_file(out, "--out", replace=False)  # before the work: a link, a FIFO, a file there
    every = store.runs(experiment)
    runs = [r for r in every if r["state"] in TERMINAL]
    if not runs:
        raise NotFoundError(f"experiment {experiment} has no finished run to export yet")
    profile = profile_of(runs)
    members: dict[str, bytes] = {
        EXPERIMENT: _json(
            {
                "name": experiment,
                "spec_path": Path(exp["spec_path"] or "spec.toml").name,
                "spec_text": exp["spec_text"] or "",
                "spec_digest": exp["spec_digest"] or "",
            }
        )
    }
    for r in runs:
        members.update(_run_members(store, r))
    manifest = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "site": site or site_measured_at(runs),
        "profile": profile_text(profile),
        "dlscale_version": dlscale_version(),
        "experiment": experiment,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "files": {n: hashlib.sha256(b).hexdigest() for n, b in sorted(members.items())},
    }
    with writing(out, "--out", replace=False) as fh, tarfile.open(fileobj=fh, mode="w:gz") as tar:
        for name, data in [(MANIFEST, _json(manifest)), *sorted(members.items())]:
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    return out, len(runs), len(every) - len(runs)


def _json(data: Any) -> bytes:
    return (json.dumps(data, sort_keys=True, indent=1, allow_nan=False) + "\n").encode()


def profile_text(profile: dict[str, Any] | None) -> str | None:
    """A profile as the report's set-up and a bundle's manifest name it."""
    if not profile:
        return None
    desc = profile.get("description")
    return f"{profile.get('name', '?')}" + (f" ({desc})" if desc else "")


def _run_members(store: Store, r: RunRow) -> dict[str, bytes]:
    where = f"runs/{r['run_id']}"
    row = {k: r.get(k) for k in _ROW_FIELDS}
    row["training"] = json.loads(r["training"] or "{}")
    records = store.records.of(r["run_id"])
    out = {
        f"{where}/run.json": _json(row),
        f"{where}/metrics.jsonl": "".join(
            json.dumps(rec, allow_nan=False) + "\n" for rec in records
        ).encode(),
    }
    paths = RunPaths.of(r)
    for name, path in (("job.sh", paths.job_script), ("profile.toml", paths.profile)):
        if path.is_file():
            out[f"{where}/{name}"] = path.read_bytes()
    try:
        with open(paths.log, "rb") as fh:
            fh.seek(max(0, fh.seek(0, os.SEEK_END) - LOG_TAIL_BYTES))
            out[f"{where}/run.log"] = fh.read(LOG_TAIL_BYTES)
    except OSError:
        pass
    return out


# --- import ------------------------------------------------------------------------------


def local_ids(bundle: Bundle) -> dict[str, str]:
    """Each bundled run's id in this store: hashed with its site, so a run measured there
    never takes the id of one measured here (the same spec plans the same ids)."""
    return {
        r.row["run_id"]: digest({"site": bundle.site, "run_id": r.row["run_id"]})
        for r in bundle.runs
    }


def import_bundle(store: Store, path: str | Path) -> Imported:
    """Add the bundle to the store, all of it or (BundleError, exit 2) none of it."""
    bundle = read_bundle(path)
    return add(store, bundle)


def add(store: Store, bundle: Bundle) -> Imported:
    """The bundle's runs added whole or not at all, whatever ends the process meanwhile:
    their folders staged, then published with their rows (tracking/staging.py); one
    import at a time per home (tracking/locks.py)."""
    site = bundle.site
    name = imported_name(bundle.experiment.name, site)
    _refuse_own(store, bundle, name)
    ids = local_ids(bundle)
    rows, records, files = [], {}, {}
    for run in bundle.runs:
        rid = ids[run.row["run_id"]]
        metrics = "".join(json.dumps(rec, allow_nan=False) + "\n" for rec in run.records).encode()
        # the bundle's row (RunFile's fields, checked by bundle_read), made this store's
        row = cast(
            RunRow,
            {
                **run.row,
                "run_id": rid,
                "point_id": digest({"site": site, "point_id": run.row["point_id"]}),
                "experiment": name,
                "devices": run.row["nodes"] * run.row["ranks_per_node"],
                "training": json.dumps(run.row["training"], sort_keys=True, allow_nan=False),
                "rerun_of": ids.get(run.row["rerun_of"] or ""),
                "site": site,
                "run_dir": str(store.runs_dir / rid),
                "ingest_offset": len(metrics),
                "ingest_lines": len(run.records),
                "attempts": 1,
            },
        )
        rows.append(row)
        records[rid] = run.records
        spec = bundle.experiment.spec_text.encode()
        files[rid] = {**run.files, "metrics.jsonl": metrics, "spec.toml": spec}
    there = {local: orig for orig, local in ids.items()}
    experiment = {
        "name": name,
        "spec_path": bundle.experiment.spec_path,
        "spec_text": bundle.experiment.spec_text,
        "spec_digest": bundle.experiment.spec_digest,
        "site": site,
    }
    with locks.changing(store.home, "import"):
        staging.settle(store.runs_dir, lambda plan: _apply(store, plan))
        plan = store.imports.diff(experiment, rows, records)
        changed = set(plan.added + plan.updated)
        if not changed:
            return plan
        for rid in changed:  # a link or a file where a run's folder goes: refused, named
            own_folder(store.runs_dir / rid)
        staged = staging.Staged.begin(store.runs_dir, "import")
        try:
            for row in rows:
                if row["run_id"] in changed:
                    _write_folder(staged.folder(row["run_id"]), row, files, site, there)
        except BaseException:
            staged.abandon()
            raise
        done = Imported(name)
        with staging.whole():  # from here on, only SIGKILL stops it, and settle finishes it
            try:
                staged.decide(
                    {
                        "experiment": experiment,
                        "rows": [r for r in rows if r["run_id"] in changed],
                        "records": {rid: records[rid] for rid in changed},
                    }
                )
                staged.finish(lambda plan: _apply(store, plan, done))
            except Exception:
                if not done.added and not done.updated and not done.unchanged:
                    staged.abandon()  # its rows were not written: it did not happen
                raise
    done.unchanged += plan.unchanged
    return done


def _refuse_own(store: Store, bundle: Bundle, name: str) -> None:
    """A bundle of this store's own runs (exported from it) is refused: imported, it would
    only copy them as NAME@SITE, a second site that never measured anything."""
    own = store.imports.measured_here(
        {
            r.row["run_id"]: (r.row["created"], r.records[0])
            for r in bundle.runs
            if r.records and r.row.get("created") is not None
        }
    )
    if own:
        raise UserError(
            f"{len(own)} of the bundle's {len(bundle.runs)} run(s) are this store's own runs "
            f"of {bundle.experiment.name} (the same ids and records, measured here): it was "
            f"exported from this store, and importing it would only copy them as {name}; "
            "nothing was imported (compare or report the experiment itself, or import the "
            "bundle into another store)"
        )


def _apply(store: Store, plan: dict[str, Any], done: Imported | None = None) -> None:
    """A staged import's rows written (again), in one transaction."""
    result = store.imports.add(plan["experiment"], plan["rows"], plan["records"])
    if done is not None:
        done.added, done.updated, done.unchanged = result.added, result.updated, result.unchanged


def _write_folder(
    folder: Path, row: RunRow, files: dict[str, dict[str, bytes]], site: str, there: dict
) -> None:
    rid = row["run_id"]
    folder.mkdir()
    for fname, data in files[rid].items():
        (folder / fname).write_bytes(data)
    write_run_file(row, folder, row["backend"] or "", "", "")
    _add_site(folder, site, there[rid])


def _add_site(folder: Path, site: str, origin: str) -> None:
    """run.json also says where the run was measured and its id there, so a store rebuilt
    from the folders keeps it apart from this site's runs."""
    record = RunPaths(folder).record
    data = json.loads(record.read_text())
    data.update(site=site, run_id_at_site=origin)
    record.write_text(json.dumps(data, sort_keys=True, allow_nan=False) + "\n")
