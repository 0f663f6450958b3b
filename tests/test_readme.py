"""The README is the front door (issue 37, item 6): short enough to read at one sitting,
the details a link away, and every link to this repository's files leading somewhere."""

from __future__ import annotations

import re

from conftest import REPO

FRONT_DOOR = 12_000  # characters


def test_the_readme_is_short_and_its_links_lead_somewhere():
    text = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(text) < FRONT_DOOR, f"README.md is {len(text)} characters"
    for command in ("scripts/quickstart", "scripts/test"):
        assert f"\n{command} " in text  # the two commands, shown as typed
    targets = re.findall(r"\]\(((?!https?:)[^)#]+)(?:#[^)]*)?\)", text)
    assert "docs/development.md" in targets
    missing = [t for t in targets if not (REPO / t).exists()]
    assert not missing, missing
