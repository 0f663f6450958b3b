"""`dlscale check`'s verdicts as JUnit XML, the file CI systems (GitLab, Jenkins, GitHub
Actions' reporters) read: one testcase per point with the seconds its runs took, a
failure for each regression, an error for each point of the study that was not decided
(the check exits non-zero for it too), skipped for a baseline's point the study does not
measure; bad input is one testcase in error, so a CI job shows why nothing was checked.
Written by xml.etree, so no text of a user's is markup, and every text through
text.xml_text, so a control character (in a file's name, a bundle's) is shown, not written
raw where XML 1.0 takes none: the file always parses."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from ...io.outputs import write_file
from ...io.text import xml_text
from .check import PASSED, REGRESSED, Verdict


def _suite(name: str, cases: list[tuple[ET.Element, float]], properties: dict[str, str]) -> bytes:
    counts = {
        "tests": str(len(cases)),
        "failures": str(sum(c.find("failure") is not None for c, _ in cases)),
        "errors": str(sum(c.find("error") is not None for c, _ in cases)),
        "skipped": str(sum(c.find("skipped") is not None for c, _ in cases)),
        "time": f"{sum(t for _, t in cases):.3f}",
    }
    suites = ET.Element("testsuites", {"name": "dlscale check", **counts})
    suite = ET.SubElement(suites, "testsuite", {"name": name, **counts})
    props = ET.SubElement(suite, "properties")
    for key, value in properties.items():
        ET.SubElement(props, "property", {"name": key, "value": value})
    suite.extend(c for c, _ in cases)
    for element in suites.iter():  # every text of a user's or a site's, as XML takes it
        element.attrib = {k: xml_text(v) for k, v in element.attrib.items()}
        if element.text is not None:
            element.text = xml_text(element.text)
    ET.indent(suites)
    return ET.tostring(suites, encoding="utf-8", xml_declaration=True) + b"\n"


def junit_xml(
    experiment: str, baseline: str, verdicts: list[Verdict], properties: dict[str, str]
) -> bytes:
    cases = []
    for v in verdicts:
        case = ET.Element(
            "testcase",
            {"classname": f"dlscale.{experiment}", "name": v.name, "time": f"{v.seconds:.3f}"},
        )
        if v.measure is not None:  # what judged it (`auto` chooses point by point)
            props = ET.SubElement(case, "properties")
            ET.SubElement(props, "property", {"name": "statistic", "value": v.measure.statistic})
        if v.outcome == REGRESSED:
            ET.SubElement(case, "failure", {"message": v.why, "type": "regression"}).text = v.why
        elif v.outcome == PASSED:
            ET.SubElement(case, "system-out").text = v.why
        elif v.in_study:  # undecided or not judged: the check did not judge it
            kind = v.outcome.replace(" ", "-")
            ET.SubElement(case, "error", {"message": v.why, "type": kind}).text = v.why
        else:
            ET.SubElement(case, "skipped", {"message": v.why})
        cases.append((case, v.seconds))
    return _suite(f"dlscale check {experiment} against {baseline}", cases, properties)


BAD_INPUT_TYPE = "bad input"  # exit 2: refused before anything was judged
NOT_JUDGED_TYPE = "not judged"  # exit 3: nothing to judge against (no shared configuration)


def error_xml(what: str, message: str, seconds: float = 0.0, kind: str = BAD_INPUT_TYPE) -> bytes:
    """The check could not be made: one testcase in error saying why, its type the exit
    status's meaning (bad input, 2; not judged, 3)."""
    case = ET.Element(
        "testcase", {"classname": "dlscale.check", "name": what, "time": f"{seconds:.3f}"}
    )
    ET.SubElement(case, "error", {"message": message, "type": kind}).text = message
    return _suite(f"dlscale check {what}", [(case, seconds)], {})


def write_junit(path: str | Path, data: bytes) -> None:
    """Whole or not at all (the one writer): a CI job never reads half a file."""
    write_file(path, data, "--junit")
