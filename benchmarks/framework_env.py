"""One home for a benchmark that measures inside a framework's environment: the one
`dlscale env create FRAMEWORK` recorded (DLSCALE_HOME, or --home), and the variables its
python runs with."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def framework_env(
    framework: str, home: str | None, script: str, **resolve: Any
) -> tuple[Any, dict[str, str]]:
    """(the environment's status, the variables to run its python with); exits naming the
    problem where no usable environment is recorded."""
    sys.path.insert(0, str(HERE.parent))
    from dlscale.engine.launching import envs
    from dlscale.engine.tracking.store import default_home

    where = Path(home) if home else default_home()
    status = envs.resolve(framework, where, **resolve)
    if not status.ok or status.python is None:
        sys.exit(f"{script}: {status.problem}")
    return status, {**os.environ, **envs.launch_env(status, where)}
