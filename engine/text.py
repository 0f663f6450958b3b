"""Text from users, files and jobs made safe to show on a terminal.

A job's log or a failure reason may hold escape sequences (`ESC ] 0 ; title BEL` sets the
window title, `ESC ] 52` writes the clipboard) or bidirectional overrides that reorder what
is read. Shown through `printable`, each is a visible stand-in instead of an instruction to
the terminal; newlines and tabs are kept."""

from __future__ import annotations

import re

# C0 controls but tab and newline, DEL, the C1 controls, and the bidirectional embeddings,
# overrides and isolates.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _stand_in(match: re.Match[str]) -> str:
    code = ord(match.group())
    if code < 0x20:
        return chr(0x2400 + code)  # Unicode's control pictures: ESC shows as ␛
    if code == 0x7F:
        return "\u2421"  # ␡
    return f"<U+{code:04X}>"


def printable(text: str) -> str:
    """`text` with every control character but tab and newline shown as a visible sign."""
    return _CONTROL.sub(_stand_in, text)
