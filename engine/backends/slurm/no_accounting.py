"""Following jobs through Slurm's commands on a cluster without accounting (no slurmdbd:
sacct answers that accounting is disabled, or the profile says `accounting = false`).

The controller is asked instead, once per poll for every job: `scontrol --oneliner show
job` lists queued and running jobs with their pending reasons, and ended ones with their
state and exit code for as long as Slurm remembers them (MinJobAge). A job it has
forgotten is settled from the marker its job script wrote in the run folder as it ended
(common.last_word).
"""

from __future__ import annotations

from dataclasses import dataclass

from .common import Runner, said
from .parsing import ParseError, SlurmJob, parse_scontrol_jobs


@dataclass
class NoAccounting:
    """The commands watcher's way of asking when no database answers: the controller's
    jobs, all of them in one call."""

    runner: Runner

    def ask(self) -> tuple[dict[str, SlurmJob] | None, str | None]:
        """Every job the controller still knows, by id; or None and why it did not
        answer."""
        res = self.runner(["scontrol", "--oneliner", "show", "job"])
        if res.returncode != 0:
            return None, said(res)
        try:
            return parse_scontrol_jobs(res.stdout), None
        except ParseError as exc:
            return None, str(exc)
