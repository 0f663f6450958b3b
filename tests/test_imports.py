"""Every module of dlscale imports: a wrong number of dots after a file moved into a
package shows here, not only when that code path runs. mypy (scripts/lint) resolves the
engine's and the TUI's imports too; this also covers the trainers and what imports only
at run time."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from conftest import REPO

# Modules that need a framework this environment may lack: an ImportError naming it is
# an absent extra, not a broken import.
OPTIONAL = ("tensorflow", "mxnet", "horovod", "deepspeed", "nvidia", "pyslurm", "torch")


def modules() -> list[str]:
    names = []
    for top in ("engine", "tui", "trainers"):
        for path in sorted((REPO / top).rglob("*.py")):
            parts = list(path.relative_to(REPO).with_suffix("").parts)
            if parts[-1] == "__main__":
                continue  # runs the program
            if parts[-1] == "__init__":
                parts.pop()
            names.append("dlscale." + ".".join(parts))
    return names


@pytest.mark.parametrize("name", modules())
def test_every_module_imports(name):
    try:
        importlib.import_module(name)
    except ImportError as exc:
        missing = getattr(exc, "name", None) or ""
        if missing.split(".")[0] in OPTIONAL and not missing.startswith("dlscale"):
            pytest.skip(f"needs {missing}")
        raise


def test_the_list_is_the_package():
    assert "dlscale.engine.backends.slurm.parsing" in modules()
    assert not any(Path(n).suffix == ".py" for n in modules())
