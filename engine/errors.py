"""Errors the engine raises. The CLI and TUI show their message; none needs a traceback.

`UserError`s are bad input (exit status 2): the message names the file, the field and what
is allowed. Other `DlscaleError`s are failures of the world (exit status 1).
"""

from __future__ import annotations

# A list of problems shows this many, then "and N more": a spec with 2,000 bad scales is
# one screen, not 2,000 lines.
SHOWN_PROBLEMS = 12


def capped(lines: list[str], most: int = SHOWN_PROBLEMS, what: str = "problem(s)") -> list[str]:
    """The first `most` lines, and one saying how many more there are."""
    if len(lines) <= most:
        return list(lines)
    return [*lines[:most], f"and {len(lines) - most} more {what}"]


class DlscaleError(Exception):
    exit_code = 1
    lines: list[str] | None = None  # a list of problems: a line each (`listing`)

    @classmethod
    def listing(cls, problems: list[str], head: str | None = None) -> DlscaleError:
        """An error of several problems, a line each (a few, then how many more), under a
        `head` line when given."""
        lines = capped(problems) if head is None else [head, *(f"  {p}" for p in capped(problems))]
        exc = cls("\n".join(lines))
        exc.lines = lines
        return exc

    def shown(self) -> list[str]:
        """The lines a front end shows: one, unless the error lists problems. A newline in
        a name or a path the message holds (a DLSCALE_HOME's) is text the printer shows as
        its escape, not a break that splits the error in two."""
        return self.lines if self.lines is not None else [str(self)]


class UserError(DlscaleError):
    exit_code = 2


class SpecError(UserError):
    """A spec or profile that does not validate. `problems` holds one line per problem."""

    def __init__(self, path: str, problems: list[str]) -> None:
        self.path = path
        self.problems = problems
        super().__init__("\n".join(capped(problems)))

    def shown(self) -> list[str]:
        """The problems as a front end shows them: a few, then how many more."""
        return capped(self.problems)


class PlanError(UserError):
    """A valid spec that cannot run on the chosen backend (too many ranks for the cores...)."""


class NotFoundError(UserError):
    """A run, job or experiment the user named that the store does not know."""


class AlreadyMade(UserError):
    """A run made under an id the store already holds (a disturbed run's rerun, whose id
    is made from the run's alone: another front end made it a moment ago)."""


class SchedulerError(DlscaleError):
    """The scheduler refused or failed a request."""


class SubmitError(SchedulerError):
    """A job was not accepted; the message is the scheduler's own."""


class ControllerUnreachable(SchedulerError):
    """The scheduler did not answer (e.g. slurmctld down); jobs are not lost, just unseen."""


class StoreError(DlscaleError):
    """The results store cannot be opened or written."""
