"""A GPU architecture (compute capability) as people write it in a profile or on the
command line: parsed and named without asking any machine."""

from __future__ import annotations

import re


def parse_arch(value: object) -> tuple[int, int]:
    """A compute capability from how people write it: "sm_90", "compute_86", "9.0", 8.6,
    "80". ValueError otherwise."""
    text = str(value).strip().lower()
    m = re.fullmatch(r"(?:sm_?|compute_?)?(\d{1,2})(\d)[af]?", text) or re.fullmatch(
        r"(\d{1,2})\.(\d)", text
    )
    if not m or int(m[1]) < 1:  # compute capabilities start at 1.0 (Tesla, 2006)
        raise ValueError(
            f'{value!r} is not a GPU architecture: write it as "sm_90" or '
            '"9.0" (the compute capability)'
        )
    return int(m[1]), int(m[2])


def arch_name(arch: tuple[int, int]) -> str:
    return f"sm_{arch[0]}{arch[1]}"
