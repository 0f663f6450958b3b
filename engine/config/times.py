"""A run's time limit as Slurm writes it (MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS or
UNLIMITED): a profile's `time_limit` and a partition's `max_time`, and a spec's
`experiment.time_limit`, which the local backend holds every run to."""

from __future__ import annotations

import re

# Slurm's time formats: MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS, or UNLIMITED.
# ASCII digits, the whole text (no space, no trailing newline: it becomes an #SBATCH line)
_TIME = re.compile(
    r"(?:([0-9]+)-([0-9]{1,2})(?::([0-9]{1,2})(?::([0-9]{1,2}))?)?|"
    r"([0-9]+)(?::([0-9]{1,2}))?(?::([0-9]{1,2}))?)"
)


def time_to_seconds(text: str) -> int | None:
    """Slurm time limit -> seconds (None for UNLIMITED); ValueError when malformed."""
    if text.upper() in ("UNLIMITED", "INFINITE"):
        return None
    m = _TIME.fullmatch(text)
    if not m:
        raise ValueError(
            f"time {text!r} is not a Slurm time (MM, MM:SS, HH:MM:SS, "
            "D-HH, D-HH:MM, D-HH:MM:SS or UNLIMITED)"
        )
    if m[1] is not None:  # with days: D-HH[:MM[:SS]]
        d, h, mi, s = (int(x) if x else 0 for x in m.group(1, 2, 3, 4))
        return ((d * 24 + h) * 60 + mi) * 60 + s
    parts = [int(x) for x in m.group(5, 6, 7) if x is not None]
    if len(parts) == 1:
        return parts[0] * 60  # minutes
    if len(parts) == 2:
        return parts[0] * 60 + parts[1]  # MM:SS
    return (parts[0] * 60 + parts[1]) * 60 + parts[2]


MAX_TIME_DAYS = 365


def check_time(value: str | None) -> str | None:
    """A time as a validator takes it: a Slurm time, neither zero (Slurm's "no limit") nor
    past MAX_TIME_DAYS."""
    if value is not None and time_to_seconds(value) == 0:
        raise ValueError(
            f"time {value!r} is zero, which Slurm reads as no limit at all; write "
            "UNLIMITED if that is meant, else a time such as 00:30:00"
        )
    if value is not None and (time_to_seconds(value) or 0) > MAX_TIME_DAYS * 86400:
        raise ValueError(
            f"time {value!r} is more than {MAX_TIME_DAYS} days: no site runs a "
            "job that long; write UNLIMITED for no limit"
        )
    return value
