"""The design's boundaries, checked in fresh interpreters and in the source."""

import ast
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FORBIDDEN_IN_TRAINERS = (
    "dlscale.engine",
    "dlscale.tui",
    "textual",
    "rich",
    "jinja2",
    "click",
    "pydantic",
)


def _type_only(tree: ast.AST) -> set[int]:
    """ids of the import nodes under `if TYPE_CHECKING:` (annotations only: never run)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            out |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    return out


def imported_modules(folder: Path, run_time_only: bool = False) -> set[tuple[str, str]]:
    found = set()
    for path in folder.rglob("*.py"):
        tree = ast.parse(path.read_text())
        skip = _type_only(tree) if run_time_only else set()
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            if isinstance(node, ast.Import):
                found |= {(str(path), a.name) for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: resolve against the package path
                    pkg = path.relative_to(REPO).parent.parts
                    pkg = ("dlscale",) + pkg
                    base = ".".join(pkg[: len(pkg) - node.level + 1] + ((base,) if base else ()))
                found.add((str(path), base))
                # `from ..engine import specfile` uses the module dlscale.engine.config.specfile
                found |= {(str(path), f"{base}.{a.name}") for a in node.names}
    return found


def test_trainers_import_no_engine_tui_or_ui_libraries():
    bad = [
        (f, m)
        for f, m in imported_modules(REPO / "trainers")
        if m.startswith(FORBIDDEN_IN_TRAINERS) or m.startswith("dlscale.jobscripts")
    ]
    assert bad == []


def test_engine_never_imports_textual():
    assert [
        (f, m)
        for f, m in imported_modules(REPO / "engine")
        if m.startswith(("textual", "dlscale.tui"))
    ] == []


@pytest.mark.framework  # imports the torch trainer
def test_loading_the_engine_loads_no_textual_and_the_trainer_no_engine():
    code = (
        "import sys, dlscale.engine.cli, dlscale.engine.tracking.monitor;"
        "assert 'textual' not in sys.modules, 'textual'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
    code = (
        "import sys, dlscale.trainers.torch_ddp.train;"
        "bad = [m for m in sys.modules if m.startswith(('dlscale.engine', 'rich', 'textual',"
        " 'jinja2', 'pydantic', 'click'))]; assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_command_line_starts_without_the_heavy_libraries():
    """`dlscale --help` and `dlscale status` load neither analysis (scipy), reports
    (matplotlib), the TUI (textual), a framework (torch) nor the spec's validation
    (pydantic) and job templates (jinja2): they are the commands typed most."""
    heavy = ("scipy", "matplotlib", "textual", "torch", "pydantic", "jinja2", "numpy")
    for module in ("dlscale.engine.cli", "dlscale.engine.cli.watch"):
        code = (
            f"import sys, {module}; bad = sorted({{m.split('.')[0] for m in sys.modules}}"
            f" & set({heavy!r})); assert not bad, bad"
        )
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        assert proc.returncode == 0, f"{module}: {proc.stderr.strip().splitlines()[-1]}"


def test_the_help_lists_every_command_with_its_own_short_help():
    """`dlscale --help` is written from a table, without importing the commands: it must
    say what each command's own help says."""
    import click

    from dlscale.engine.cli import COMMANDS, cli

    ctx = click.Context(cli)
    for name, (_, _, short) in COMMANDS.items():
        command = cli.get_command(ctx, name)
        assert command is not None, name
        assert short == " ".join((command.help or "").split("\n\n")[0].split()), name


def test_no_generic_top_level_packages_installed(tmp_path):
    """From a neutral folder only `dlscale.*` is importable, not `engine` or `tui`."""
    code = (
        "import importlib.util as u;"
        "print([n for n in ('engine', 'trainers', 'tui', 'jobscripts') if u.find_spec(n)])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"


# The TUI calls the engine through its facade, `session` (a Session, what it returns, and the
# engine's words it names for front ends), and shows its errors; besides those it imports
# renderers only: text as users and jobs wrote it, the results' charts, the table model and
# its tables, the numbers' formatting, and the typed rows they all read.
TUI_MAY_USE = (
    "dlscale.engine.session",
    "dlscale.engine.errors",
    "dlscale.engine.io.text",
    "dlscale.engine.results.charts",
    "dlscale.engine.results.table",
    "dlscale.engine.results.tables",
    "dlscale.engine.results.compare_table",
    "dlscale.engine.results.formatting",
    "dlscale.engine.results.rows",
    # the words and mark of a disturbed run (the TUI shows them; it judges nothing)
    "dlscale.engine.results.disturbed",
)


def _module_file(name: str) -> bool:
    """A module of its own (a .py file, not a package and not a name inside a module)."""
    try:
        spec = importlib.util.find_spec(name)
    except (ModuleNotFoundError, ValueError):
        return False
    return spec is not None and spec.submodule_search_locations is None


def _tui_may_import(name: str) -> bool:
    """An allowed module, a name inside one, or a package on the way to one (`from ..engine
    import errors` reads `dlscale.engine`, then `dlscale.engine.errors`)."""
    return (
        name in TUI_MAY_USE
        or name.rpartition(".")[0] in TUI_MAY_USE
        or any(allowed.startswith(name + ".") for allowed in TUI_MAY_USE)
    )


def test_tui_uses_only_the_engines_front_end_modules():
    engine = sorted(
        {
            (Path(f).name, m)
            for f, m in imported_modules(REPO / "tui")
            if m.startswith("dlscale.engine.") and _module_file(m)
        }
    )
    assert engine and [(f, m) for f, m in engine if m not in TUI_MAY_USE] == []
    # every engine import, packages and names in them included, not only modules' files
    assert [
        (Path(f).name, m)
        for f, m in imported_modules(REPO / "tui")
        if m.startswith("dlscale.engine") and not _tui_may_import(m)
    ] == []
    assert not [
        (f, m)
        for f, m in imported_modules(REPO / "tui")
        if m.startswith(("subprocess", "sqlite3", "dlscale.trainers", "dlscale.engine.backends"))
    ]


def test_the_engine_has_no_import_cycle():
    """Every import that runs counts, those inside functions too (a lazy import hides a
    cycle rather than removing it; only annotations under TYPE_CHECKING may look back): the
    engine's modules form a DAG, so each can be read bottom-up."""
    engine = REPO / "engine"

    def module(path: Path) -> str:
        parts = ("dlscale",) + path.relative_to(REPO).with_suffix("").parts
        return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)

    mods = {module(p): p for p in engine.rglob("*.py")}
    graph = {m: set() for m in mods}
    for path, name in imported_modules(engine, run_time_only=True):
        src = module(Path(path))
        # `from . import envs` names a module; `from .envs import resolve` names its module
        target = name if name in mods else name.rpartition(".")[0]
        if target in mods and target != src and not mods[src].name == "__init__.py":
            graph[src].add(target)
    cycles, state = [], {}

    def visit(m: str, trail: list[str]) -> None:
        state[m] = "open"
        for d in sorted(graph[m]):
            if state.get(d) == "open":
                cycles.append(trail[trail.index(d) :] + [d] if d in trail else [m, d])
            elif d not in state:
                visit(d, trail + [d])
        state[m] = "done"

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])
    assert not cycles, "import cycles in engine/: " + "; ".join(" -> ".join(c) for c in cycles)


def test_no_module_imports_another_modules_private_names():
    """A seam between modules is real when neither reaches into the other: a name with a
    leading underscore stays in its module."""
    found = set()
    for folder in ("engine", "tui", "trainers"):
        for path in (REPO / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ImportFrom):
                    found |= {
                        (str(path.relative_to(REPO)), a.name)
                        for a in node.names
                        if a.name.startswith("_") and not a.name.startswith("__")
                    }
    assert sorted(found) == []


def test_no_import_renames_a_project_name():
    """A module or a function is read by its own name wherever it is imported
    (`follow.refresh`, not `following.refresh`; `plan(...)`, not `make_plan(...)`): a rename
    hides where a name comes from, and two names for one thing drift. (The trainers keep
    `common.data as common_data` beside a framework's own module of the same name.)"""
    found = []
    for folder in ("engine", "tui"):
        for path in (REPO / folder).rglob("*.py"):
            pkg = ("dlscale",) + path.relative_to(REPO).parent.parts
            for node in ast.walk(ast.parse(path.read_text())):
                if not isinstance(node, ast.ImportFrom):
                    continue
                base = node.module or ""
                if node.level:
                    base = ".".join(pkg[: len(pkg) - node.level + 1] + ((base,) if base else ()))
                if not base.startswith("dlscale"):
                    continue
                found += [
                    f"{path.relative_to(REPO)}:{node.lineno}: {a.name} as {a.asname}"
                    for a in node.names
                    if a.asname not in (None, a.name)
                ]
    assert found == []


def test_no_module_is_over_600_lines():
    """Past that a module holds more than one concept: split it along one, not by lines."""
    long = {
        str(p.relative_to(REPO)): n
        for folder in ("engine", "tui", "trainers")
        for p in (REPO / folder).rglob("*.py")
        if (n := len(p.read_text().splitlines())) > 600
    }
    assert long == {}


def test_a_submission_goes_down_from_the_backend_and_never_back_up():
    """arrays (shapes, limits, the array script) and tags (tokens, reading the queue's list)
    only compute: they import no backend, not even for annotations (base's value types,
    JobRequest and NotYet, are no backend), so a submission's path from the backend through
    them to sbatch never calls back into the backend."""
    slurm = REPO / "engine" / "backends" / "slurm"
    backends = ("slurm.jobs", "slurm.commands", "slurm.pyslurm", "registry", "backends.local")
    for leaf in ("arrays.py", "tags.py"):
        names = {name for path, name in imported_modules(slurm) if path.endswith(f"/{leaf}")}
        looked_back = sorted(n for n in names if any(b in n for b in backends))
        assert looked_back == [], f"{leaf} imports {looked_back}"


def test_the_python_the_scripts_run_still_imports():
    """scripts/ hold small `python -c '...'` programs the module moves cannot see: one that
    imported a moved module stopped CI's framework environments from building."""
    snippets = [
        (path.name, m.group(1))
        for path in sorted((REPO / "scripts").iterdir())
        if path.is_file()
        for m in re.finditer(r"python3? -c '([^']*)'", path.read_text())
    ]
    assert len(snippets) >= 3
    for name, code in snippets:
        proc = subprocess.run(
            [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60
        )
        assert proc.returncode == 0, (name, code, proc.stderr[-2000:])
