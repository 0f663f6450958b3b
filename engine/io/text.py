"""Text a job or a user wrote, made safe to show on a terminal or in a widget.

A log line may hold escape sequences (`ESC ] 0 ; title BEL` sets the window's title,
`ESC ] 52` the clipboard), a carriage return that overwrites what was shown, or bidi
overrides that reorder it. `printable` turns every such character into its visible escape
(`\\x1b`, `\\u202e`), so what is shown is what was written, and nothing acts on the
terminal. A name that is not UTF-8 (Python holds its bytes as lone surrogates) is shown by
its bytes (`\\xff`) instead of failing to print.

This is the one home of that rule: the CLI's printer (engine/cli/console.py) passes every
text it prints through it, and the TUI's widgets every text they show.
"""

from __future__ import annotations

import re

# C0 controls but tab, DEL and C1 controls; the bidi embeddings, overrides, isolates and
# marks; the line and paragraph separators (U+2028/9, line breaks to some terminals).
_UNSAFE = [
    *(c for c in range(0x20) if c != 0x09),
    *range(0x7F, 0xA0),
    0x061C,
    0x200E,
    0x200F,
    *range(0x202A, 0x202F),
    *range(0x2066, 0x206A),
    0x2028,
    0x2029,
    *range(0xD800, 0xE000),  # lone surrogates: a non-UTF-8 byte under surrogateescape
]
_ESCAPES = {
    c: (
        f"\\x{c:02x}"
        if c < 0x100
        else f"\\x{c - 0xDC00:02x}"
        if 0xDC80 <= c < 0xDD00
        else f"\\u{c:04x}"
    )
    for c in _UNSAFE
}
_ESCAPES_BUT_NEWLINE = {c: e for c, e in _ESCAPES.items() if c != 0x0A}


def printable(text: str, newlines: bool = False) -> str:
    """`text` with every control character (and bidi control) shown as its escape;
    newlines=True keeps line breaks (`\\n`) for text of several lines."""
    return text.translate(_ESCAPES_BUT_NEWLINE if newlines else _ESCAPES)


def is_utf8(text: str) -> bool:
    """Whether `text` came from UTF-8 bytes. One that did not (an argument, a file name)
    holds lone surrogates, which SQLite and a UTF-8 terminal cannot take."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def quoted(text: str) -> str:
    """A user's text (a log pattern) shown as a TOML literal string holds it: in single
    quotes, backslashes as written (repr would double them), controls made visible."""
    return printable(f"'{text}'" if "'" not in text else f'"{text}"')


# The terminal app shows a C0 control character or DEL as its one-cell control picture
# (ESC as ␛, BEL as ␇, CR as ␍): visible at a glance where `\x1b` takes four cells.
_ESCAPED_C0 = re.compile(r"\\x(1[0-9a-f]|0[0-9a-f]|7f)")


def _picture(m: re.Match[str]) -> str:
    code = int(m[1], 16)
    return "\u2421" if code == 0x7F else chr(0x2400 + code)


def signs(text: str, newlines: bool = False) -> str:
    """`text` as printable shows it, with each C0 control character and DEL as its control
    picture instead of its escape. Text the engine made printable before (a failure reason
    in the store, a log line) reads the same: its `\\x1b` is shown as ␛ too."""
    shown = printable(text, newlines)
    return _ESCAPED_C0.sub(_picture, shown) if "\\x" in shown else shown
