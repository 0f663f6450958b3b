"""The code a declared framework's run ran, kept by content so that it can be run again.

A declaration names its script by path, and the path's content is what users change in
place (`sed -i`, a branch checked out). A run's identity already hashes the script
(plan.identity_of_declaration); its declaration also carries that hash (`script_sha256`),
and each submission keeps the script's bytes in the store's home, once per content
(code/SHA256/NAME). A repeat of the run (`dlscale rerun`, the baseline side of `dlscale
check --interleave`) then runs what the run ran: the kept copy where the file has changed
since, or is refused, naming the change, where no copy was kept.

Only the script file is kept: modules it imports from its own folder are today's.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SHA_FIELD = "script_sha256"


def sha256_of(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def with_script_hash(decl: dict[str, Any]) -> dict[str, Any]:
    """The declaration (its script absolute) with the hash of the script as it is now."""
    script = decl.get("script")
    sha = sha256_of(Path(script)) if isinstance(script, str) else None
    return {**decl, SHA_FIELD: sha} if sha else decl


def kept_path(home: Path, sha: str, name: str) -> Path:
    return home / "code" / sha / name


def keep(home: Path, decl: dict[str, Any]) -> None:
    """Keep the declaration's script in the store's home, if it is still the content its
    runs name (a file edited since the plan is not theirs); once per content."""
    script, sha = decl.get("script"), decl.get(SHA_FIELD)
    if not (isinstance(script, str) and isinstance(sha, str)):
        return
    target = kept_path(home, sha, Path(script).name)
    if sha256_of(target) == sha:
        return
    try:
        data = Path(script).read_bytes()
    except OSError:
        return  # gone: a repeat says so when it needs it
    if hashlib.sha256(data).hexdigest() != sha:
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    part = target.with_name(f".{target.name}.{os.getpid()}")
    part.write_bytes(data)
    os.replace(part, target)  # whole or not at all, whoever keeps it at the same time


@dataclass(frozen=True)
class CodeChange:
    """A declared run's script as it is now against what the run ran."""

    script: Path  # where the declaration names it
    measured: str | None  # the hash the run ran; None: recorded before code was kept
    now: str | None  # None: the file is gone or unreadable
    kept: Path | None  # the kept copy of what the run ran, where there is one

    @property
    def name(self) -> str:
        return self.script.name

    def said(self) -> str:
        """One clause: what changed, with the hashes' first 12 digits."""
        if self.measured is None:
            return (
                f"{self.script}: the run was measured before dlscale kept a run's code, so "
                "whether it has changed since cannot be told"
            )
        now = f"sha256 {self.now[:12]}" if self.now else "gone or unreadable"
        return f"{self.script} changed since it was measured (sha256 {self.measured[:12]} -> {now})"


def change_of(home: Path, decl: dict[str, Any] | None) -> CodeChange | None:
    """How a run's declared script (runs.declaration) differs from what the run ran; None
    for a built-in framework's run, a declaration without a script, or an unchanged one."""
    if not isinstance(decl, dict) or not isinstance(decl.get("script"), str):
        return None
    script = Path(decl["script"])
    measured, now = decl.get(SHA_FIELD), sha256_of(script)
    if isinstance(measured, str) and measured == now:
        return None
    kept = None
    if isinstance(measured, str):
        path = kept_path(home, measured, script.name)
        kept = path if sha256_of(path) == measured else None
    return CodeChange(script, measured if isinstance(measured, str) else None, now, kept)
