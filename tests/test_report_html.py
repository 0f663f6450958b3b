"""The HTML report's tables fit the page (issue 49, item 4): a table wider than the page
(the results table's baseline and state columns were clipped at 1,200 px) scrolls in its own
box, so every table sits in a wrapper the CSS gives `overflow-x: auto`. Checked on the page
a report of a recorded store renders, for every table in it."""

import re
from html.parser import HTMLParser

from conftest import dlscale
from tui_text import recorded_study


class _Tables(HTMLParser):
    """Each <table>'s enclosing element's classes, and the page's CSS."""

    def __init__(self) -> None:
        super().__init__()
        self.open: list[tuple[str, set[str]]] = []
        self.wrappers: list[set[str]] = []
        self.css = ""
        self._in_style = False

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self.wrappers.append(self.open[-1][1] if self.open else set())
        classes = set((dict(attrs).get("class") or "").split())
        self.open.append((tag, classes))
        self._in_style = tag == "style"

    def handle_endtag(self, tag):
        while self.open and self.open.pop()[0] != tag:
            pass
        self._in_style = False

    def handle_data(self, data):
        if self._in_style:
            self.css += data


def test_every_table_of_the_html_report_scrolls_in_its_own_box(tmp_path):
    recorded_study(tmp_path / "h", comm=True)
    out = tmp_path / "report"
    dlscale("report", "--format", "html", "--out", str(out), home=tmp_path / "h", check=0)
    page = (out / "report.html").read_text(encoding="utf-8")
    parsed = _Tables()
    parsed.feed(page)
    assert len(parsed.wrappers) >= 4  # set-up, results, efficiency, projection at least
    rules = {
        sel.strip(): body
        for sel, body in re.findall(r"([^{}]+)\{([^{}]*)\}", re.sub(r"/\*.*?\*/", "", parsed.css))
    }
    scrolling = {
        sel.split(".", 1)[1]
        for sel, body in rules.items()
        if sel.startswith("div.") and re.search(r"overflow-x:\s*auto", body)
    }
    assert scrolling, parsed.css
    unwrapped = [i for i, classes in enumerate(parsed.wrappers) if not classes & scrolling]
    assert unwrapped == [], f"tables {unwrapped} of {len(parsed.wrappers)} not in a scrolling box"
    # the page itself never scrolls sideways for a table: nothing forces the body wider
    assert "min-width" not in rules.get("body", "")
