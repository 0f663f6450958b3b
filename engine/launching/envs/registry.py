"""The registry of the frameworks' environments that `dlscale env create` built (envs.json in
DLSCALE_HOME): what is recorded where, and the command that builds one."""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path

from ...errors import DlscaleError
from ...io.reading import read_json

REGISTRY = "envs.json"


def _dlscale_command(home: Path, *words: str) -> str:
    """The exact command line for the user, naming --home only where it is not implied."""
    implied = Path(os.environ.get("DLSCALE_HOME") or Path.home() / ".dlscale")
    head = ["dlscale"] + ([] if Path(home) == implied else ["--home", str(home)])
    return " ".join(shlex.quote(w) for w in head + list(words))


def create_command(
    framework: str,
    home: Path,
    extras: tuple[str, ...] = (),
    device: str = "cpu",
    profile: str | None = None,
) -> str:
    """`dlscale env create ...` for this framework, device and extras; a GPU one names the
    profile whose modules (CUDA, NCCL) its build loads, where there is one."""
    gpu = ["--gpu"] + (["--profile", profile] if profile else []) if device == "cuda" else []
    return _dlscale_command(
        home, "env", "create", framework, *gpu, *[w for e in sorted(extras) for w in ("--with", e)]
    )


def registry_key(framework: str, device: str = "cpu") -> str:
    """CPU environments keep the framework's name (as before GPU ones existed)."""
    return framework if device == "cpu" else f"{framework}@{device}"


def _registry_path(home: Path) -> Path:
    return Path(home) / REGISTRY


def registered(home: Path) -> dict[str, dict]:
    path = _registry_path(home)
    try:
        data = read_json(path)
    except FileNotFoundError:
        return {}
    except (OSError, ValueError, RecursionError) as exc:  # a FIFO, too large, not JSON
        raise DlscaleError(
            f"{path}: unreadable environment registry ({exc}); remove it and "
            "run `dlscale env create` again"
        ) from None
    return data if isinstance(data, dict) else {}


def _write_registry(home: Path, data: dict) -> None:
    path = _registry_path(home)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True, allow_nan=False) + "\n")
    tmp.replace(path)  # atomic: a planner reading it never sees half a file


def register(home: Path, key: str, entry: dict) -> None:
    _write_registry(home, {**registered(home), key: entry})


def remove(framework: str, home: Path, device: str = "cpu") -> str | None:
    """Forget a framework's environment (the folder stays: it may be a shared cache)."""
    data = registered(home)
    entry = data.pop(registry_key(framework, device), None)
    if entry is None:
        return None
    _write_registry(home, data)
    return entry["prefix"]
