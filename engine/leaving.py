"""Leaving the process at once, the prompt given back now: after ctrl+c in the CLI and after
the TUI closed. Every `with` on the way out has run (partial outputs removed, Slurm commands
ended) and the store commits as it goes, so only the streams are left to flush; tearing the
interpreter's modules down took a second or two more on a loaded login node."""

from __future__ import annotations

import os
import sys
from typing import NoReturn


def leave_now(code: int) -> NoReturn:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe, or a stream already closed
            pass
    os._exit(code)
