"""Text a job or a user wrote, made safe to show on a terminal or in a widget, and written
so each file's reader reads it as text: the one rule, and its siblings per format.

A log line may hold escape sequences (`ESC ] 0 ; title BEL` sets the window's title,
`ESC ] 52` the clipboard), a carriage return that overwrites what was shown, bidi overrides
that reorder it, or invisible format characters (a zero-width space makes `resnet\u200b20`
look like `resnet20`). `printable` turns every such character into its visible escape
(`\x1b`, `\u202e`, `\u200b`), so what is shown is what was written, and nothing acts on the
terminal. A name that is not UTF-8 (Python holds its bytes as lone surrogates) is shown by
its bytes (`\xff`) instead of failing to print.

This is the one home of that rule: the CLI's printer (engine/cli/console.py) passes every
text it prints through it, and the TUI's widgets every text they show. Its siblings write
the same text for a file's reader, each after `printable`: `xml_text` (JUnit: only what
XML 1.0 allows), `markdown_inline` and `markdown_block` (report.md: no structure, no HTML),
`csv_cell` (results.csv: no formula).
"""

from __future__ import annotations

import re
import unicodedata

# C0 controls but tab, DEL and C1 controls; the line and paragraph separators (U+2028/9,
# line breaks to some terminals); lone surrogates (a non-UTF-8 byte under surrogateescape).
# Format characters (category Cf: the bidi controls, zero-width spaces and joiners, the soft
# hyphen, the byte-order mark, tags) are found by their category as they are met.
_UNSAFE = [
    *(c for c in range(0x20) if c != 0x09),
    *range(0x7F, 0xA0),
    0x2028,
    0x2029,
    *range(0xD800, 0xE000),
]


def _escape(c: int) -> str:
    if c < 0x100:
        return f"\\x{c:02x}"
    if 0xDC80 <= c < 0xDD00:  # the byte surrogateescape held
        return f"\\x{c - 0xDC00:02x}"
    return f"\\u{c:04x}" if c <= 0xFFFF else f"\\U{c:08x}"


class _Table(dict):
    """str.translate's table: the characters above by their escape, and any other met
    looked up once by its category (a format character by its escape, the rest as itself)."""

    def __missing__(self, c: int) -> str:
        shown = _escape(c) if unicodedata.category(chr(c)) == "Cf" else chr(c)
        self[c] = shown
        return shown


_ESCAPES = _Table({c: _escape(c) for c in _UNSAFE})
_ESCAPES_BUT_NEWLINE = _Table({c: e for c, e in _ESCAPES.items() if c != 0x0A})


def printable(text: str, newlines: bool = False) -> str:
    """`text` with every control and format character shown as its escape; newlines=True
    keeps line breaks (`\\n`) for text of several lines."""
    return text.translate(_ESCAPES_BUT_NEWLINE if newlines else _ESCAPES)


# --- its siblings: the same text written for a file's reader -----------------------------

_NOT_XML = {0xFFFE: "\\ufffe", 0xFFFF: "\\uffff"}  # XML 1.0 takes no such character


def xml_text(text: str) -> str:
    """Text for an XML attribute or element (JUnit): printable, lines kept, and none of the
    characters XML 1.0 refuses even escaped, so the file always parses."""
    return printable(text, newlines=True).translate(_NOT_XML)


# Inline Markdown: what opens code, emphasis, HTML, an entity, a table's cell or a
# strikethrough, and a backslash; a `]` before `(` or `[` (a link or an image: `[` alone
# is text, as in dlscale's own "2,470 [2,300, 2,600]"); `#`s closing a heading's line; `_`
# only at a word's edge (within a word it opens nothing, and names hold it).
_MD_INLINE = re.compile(r"[\\`*<&|~]|\](?=[(\[])|#+(?=\s*$)|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")
# What starts a block at a line's start: a heading, a quote, a list, a setext underline, a
# link's definition (`[x]: url`).
_MD_START = re.compile(r"^([-+=>#\[]|[0-9]+(?=[.)]))")


def markdown_inline(value: object) -> str:
    """A value as Markdown text inside a line (a table cell, a heading): printable, on one
    line, every character that would make structure or HTML escaped with a backslash."""
    return _MD_INLINE.sub(lambda m: "\\" + m[0], printable(str(value)))


def markdown_block(value: object) -> str:
    """A value as a Markdown paragraph of its own: as `markdown_inline`, and what would open
    a block at its start (a list's `-`, a heading's `#`, `1.`, an indented code block)
    escaped too."""
    text = markdown_inline(str(value).lstrip())
    m = _MD_START.match(text)
    if m is None:
        return text
    if m[1][0].isdigit():  # 1. or 1): the mark after the number
        return text[: m.end()] + "\\" + text[m.end() :]
    return "\\" + text


def markdown_fence(text: str) -> str:
    """The fence for a code block holding `text`: longer than any run of backticks in it."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    return "`" * max(3, longest + 1)


# OWASP's CSV injection rule: a cell a spreadsheet would read as a formula starts with one
# of these; a quote before it makes it text.
_FORMULA = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value: object) -> object:
    """A value for a CSV cell: a number as itself (a negative number stays a number); text
    printable (on one line) and, where it starts as a formula would, behind a single quote."""
    if not isinstance(value, str):
        return value
    if value.startswith(_FORMULA):
        value = "'" + value
    return printable(value)


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
