"""A job script's #SBATCH lines as pyslurm's JobSubmitDescription attributes.

sbatch reads those lines itself; Slurm's API (and so pyslurm) does not, so the pyslurm
backend passes them. pyslurm's own reader (`load_sbatch_options`) sets attributes its class
lacks (`partition`), drops options it does not know without a word and splits values at
every `=`, so dlscale reads them here: the options its job scripts and profiles write,
each one mapped explicitly, anything else refused with its name rather than lost.
"""

from __future__ import annotations

import re
import shlex

# sbatch option -> JobSubmitDescription attribute (values passed as written)
VALUED = {
    "job-name": "name",
    "partition": "partitions",
    "nodes": "nodes",
    "ntasks": "ntasks",
    "ntasks-per-node": "ntasks_per_node",
    "cpus-per-task": "cpus_per_task",
    "time": "time_limit",
    "output": "standard_output",
    "error": "standard_error",
    "open-mode": "log_files_open_mode",
    "account": "account",
    "qos": "qos",
    "gres": "gres_per_node",
    "dependency": "dependencies",
    "mem": "memory_per_node",
    "mem-per-cpu": "memory_per_cpu",
    "constraint": "constraints",
    "reservation": "reservations",
    "exclude": "excluded_nodes",
    "nodelist": "required_nodes",
    "comment": "comment",
    "wckey": "wckey",
    "chdir": "working_directory",
    "begin": "begin_time",
    "nice": "nice",
}
# sbatch flag -> (attribute, value)
FLAGS = {
    "no-requeue": ("is_requeueable", False),
    "requeue": ("is_requeueable", True),
    "exclusive": ("resource_sharing", "no"),
    "overcommit": ("overcommit", True),
    "contiguous": ("requires_contiguous_nodes", True),
}
# numbers pyslurm passes to C unconverted (a "1" minute time limit would be a str there)
NUMERIC = {"nodes", "ntasks", "ntasks_per_node", "cpus_per_task", "time_limit", "nice"}


def _sbatch_lines(text: str):
    """sbatch's own rule: #SBATCH lines count until the first command."""
    for n, line in enumerate(text.splitlines()[1:], start=2):
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            return
        if stripped.startswith("#SBATCH"):
            yield n, stripped[len("#SBATCH") :]


def job_description(text: str, path: str = "job.sh") -> dict:
    """The attributes for `pyslurm.JobSubmitDescription(**attrs)`. Raises ValueError naming
    the file, line and option when a line cannot be passed on as sbatch would read it."""
    if not text.startswith("#!"):
        raise ValueError(f"{path}:1: a batch script starts with #! and its interpreter")
    attrs: dict = {}
    for n, rest in _sbatch_lines(text):
        try:
            words = shlex.split(rest, comments=True)
        except ValueError as exc:
            raise ValueError(f"{path}:{n}: #SBATCH line does not parse: {exc}") from None
        i = 0
        while i < len(words):
            word = words[i]
            m = re.fullmatch(r"--([a-z][a-z-]*)(?:=(.*))?", word, re.S)
            if not m:
                raise ValueError(
                    f"{path}:{n}: #SBATCH {word}: the pyslurm backend passes "
                    "long options (--name=value) only; use --backend slurm"
                )
            name, value = m[1], m[2]
            if name in FLAGS and value is None:
                attr, value = FLAGS[name]
            elif name == "gpus-per-node":
                attr, value = "gres_per_node", None if value is None else f"gpu:{value}"
            elif name in VALUED:
                attr = VALUED[name]
                if value is None and i + 1 < len(words):
                    i, value = i + 1, words[i + 1]
            else:
                raise ValueError(
                    f"{path}:{n}: #SBATCH --{name}: not an option the pyslurm "
                    f"backend passes ({', '.join(sorted({*VALUED, *FLAGS}))}, "
                    "gpus-per-node); use --backend slurm"
                )
            if value is None:
                raise ValueError(f"{path}:{n}: #SBATCH --{name} needs a value")
            if attr in NUMERIC and isinstance(value, str) and value.isdigit():
                value = int(value)
            if attr == "gres_per_node" and attr in attrs:  # --gpus-per-node and --gres
                value = f"{attrs[attr]},{value}"
            attrs[attr] = value
            i += 1
    # sbatch: with --ntasks-per-node and no --ntasks, the job has nodes x that many tasks
    if "ntasks" not in attrs and isinstance(attrs.get("ntasks_per_node"), int):
        nodes = attrs.get("nodes", 1)
        attrs["ntasks"] = (nodes if isinstance(nodes, int) else 1) * attrs["ntasks_per_node"]
    return attrs
