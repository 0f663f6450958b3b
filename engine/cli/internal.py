"""An internal error (a bug: an exception no part of dlscale expected) as the command line
reports it: exit status 70 (EX_SOFTWARE), never one a command gives an answer (0-3: `check`
exits 1 for a regression, and a crash must not read as one in CI), one line on stderr, and
the traceback saved in a file of its own, which that line names."""

from __future__ import annotations

import os
import tempfile
import time
import traceback
from pathlib import Path

EXIT = 70  # sysexits.h's EX_SOFTWARE


def save_traceback(exc: BaseException, home: Path | None) -> Path | None:
    """The traceback written to a new file in the home's `errors/` folder (else the system's
    temporary folder); None where neither can be written."""
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    stamp = time.strftime("%Y%m%d-%H%M%S")
    places = [home / "errors"] if home is not None and home.is_dir() else []
    for folder in [*places, Path(tempfile.gettempdir())]:
        try:
            folder.mkdir(exist_ok=True)
            # a new file of its own (O_EXCL, never through a link), as mkstemp makes it
            fd, name = tempfile.mkstemp(
                prefix=f"dlscale-internal-error-{stamp}-", suffix=".txt", dir=folder
            )
        except OSError:
            continue
        with os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace") as fh:
            fh.write(text)
        return Path(name)
    return None
