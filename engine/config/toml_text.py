"""TOML text read within the bounds every file dlscale reads is held to, without the spec's
validation (pydantic): a command that only needs a saved spec's value (`dlscale results`
reading what its experiment does with disturbed runs) starts without it. tomlfile.py reads
and validates files through it."""

from __future__ import annotations

import re
import sys
from typing import Any

from ...trainers.common.records import nesting
from ..errors import SpecError
from ..io.reading import TEXT_LIMIT, TOML_DEPTH

# One home for the TOML reader: the standard library's from 3.11, its PyPI original (the same
# code, a dependency only there) on 3.10.
if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib


def parse_toml_text(text: str, where: str) -> dict[str, Any]:
    """TOML text (of the file or the member named `where`) parsed within the same bounds
    as a file: at most files.TEXT_LIMIT, nested at most TOML_DEPTH; SpecError otherwise.
    A spec carried in a bundle is held to them too, so a run imported is a run that
    `store rebuild` can read back."""
    if len(text) > TEXT_LIMIT:
        raise SpecError(where, [f"{where}: larger than {TEXT_LIMIT >> 20} MiB"])
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        m = re.search(r"\(at line (\d+), column (\d+)\)", str(exc))
        at = f"{where}:{m[1]}:{m[2]}" if m else where
        reason = re.sub(r"\s*\(at line \d+, column \d+\)", "", str(exc))
        raise SpecError(where, [f"{at}: invalid TOML: {reason}"]) from None
    except RecursionError:  # tomllib recurses per level of nesting
        data = None
    if data is None or nesting(data) > TOML_DEPTH:
        raise SpecError(
            where, [f"{where}: invalid TOML: arrays or tables nested over {TOML_DEPTH} deep"]
        )
    return data
