"""One rule for the first word of what dlscale prints (issue 49, item 4): a heading (the title
of a table or of a report's section) starts with a capital; every other line (a note under a
table, a status, a summary, a chart's label) starts lowercase, as a log line does, unless its
first word is a name with a case of its own (ResNet-20, CI95, JUnit, B/A, an experiment's
name). Scanned over the outputs of several commands and the report on a recorded store."""

import re
from pathlib import Path

import pytest

from conftest import dlscale
from tui_text import recorded_study

REPO = Path(__file__).resolve().parent.parent
SPEC = REPO / "tests" / "fixtures" / "tui-quickstart" / "spec.toml"
TABLE_TOP = ("┏", "┌", "─", "|")  # a rich table's or a chart's box, a plain table's rule


def _is_name(word: str, names: set[str]) -> bool:
    """A word whose case is its own: not a plain word in title or lower case."""
    bare = word.rstrip(":,;.")
    return bare in names or not re.fullmatch(r"[A-Za-z][a-z]*", bare)


def _lines(text: str) -> list[tuple[str, bool]]:
    """(line, is a heading) for the lines that start with a word: a heading is a Markdown
    heading or a line just above a table (its box, or a plain table's header and rule).
    Table bodies, chart plots and a report's fenced spec are left out."""
    rows = text.splitlines()
    out, fenced = [], False
    for i, line in enumerate(rows):
        if line.startswith("```"):
            fenced = not fenced
            continue
        bare = line.strip()
        if fenced or not bare.lstrip("# ")[:1].isalpha():
            continue
        after = [r.strip() for r in rows[i + 1 : i + 3]]
        if after[:1] and after[0].startswith("─"):
            continue  # a plain table's column names: labels
        above_table = bool(after) and (
            after[0].startswith(TABLE_TOP) or (len(after) > 1 and after[1].startswith("─"))
        )
        heading = line.startswith("#") or above_table
        out.append((bare, heading))
    return out


def _wrong(text: str, names: set[str]) -> list[str]:
    wrong = []
    for line, heading in _lines(text):
        words = line.lstrip("#").split()
        if not words or _is_name(words[0], names):
            continue
        if heading and not words[0][0].isupper():
            if line.startswith("#") or not _chart_label(line):
                wrong.append(f"heading not capitalised: {line[:90]}")
        elif not heading and words[0][0].isupper():
            wrong.append(f"line capitalised: {line[:90]}")
    return wrong


def _chart_label(line: str) -> bool:
    """A terminal chart's title names its metric, as its axis does: a label, lowercase."""
    return line.split()[0].rstrip(":") in ("speedup", "efficiency", "throughput")


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("capitals")
    here, there = tmp / "here", tmp / "there"
    recorded_study(there)
    bundle = tmp / "there.tar.gz"
    exported = dlscale("export", "bundle", "--site", "s2", "--out", str(bundle), home=there)
    recorded_study(here, comm=True)
    report = tmp / "report"
    runs = [
        ("plan", str(SPEC)),
        ("status", "--all"),
        ("status",),
        ("results",),
        ("chart",),
        ("project", "--to", "4"),
        ("import", str(bundle)),
        ("compare", "quickstart", "quickstart@s2"),
        ("check", str(SPEC), "--baseline", "quickstart@s2"),
        ("report", "-e", "quickstart", "--out", str(report)),
    ]
    shown = {"export bundle": exported.stdout + exported.stderr}
    for args in runs:
        proc = dlscale(*args, home=here)
        assert "Traceback" not in proc.stderr, (args, proc.stderr)
        shown[" ".join(args[:1])] = proc.stdout + proc.stderr
    shown["report.md"] = (report / "report.md").read_text(encoding="utf-8")
    return shown


NAMES = {"quickstart", "quickstart@s2", "resnet20", "pytorch-ddp"}


def test_headings_start_with_a_capital_and_every_other_line_lowercase(outputs):
    wrong = [f"{cmd}: {w}" for cmd, text in outputs.items() for w in _wrong(text, NAMES)]
    assert wrong == [], "\n".join(wrong)


def test_the_scan_sees_both_kinds_of_line(outputs):
    """The rule is checked on something: headings and lines both found, in each output."""
    for cmd in ("results", "project", "report.md"):
        kinds = {heading for _, heading in _lines(outputs[cmd])}
        assert kinds == {True, False}, cmd
    assert _wrong("Runs\nrun  job\n───\nA capitalised note\n", set()) == [
        "line capitalised: A capitalised note"
    ]
    assert _wrong("a title\n┏━━┓\n", set()) == ["heading not capitalised: a title"]
