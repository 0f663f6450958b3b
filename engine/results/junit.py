"""`dlscale check`'s verdicts as JUnit XML, the file CI systems (GitLab, Jenkins, GitHub
Actions' reporters) read: one testcase per point, a failure for each regression, skipped for
each point not judged, with why. Written by xml.etree, so no text of a user's is markup."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from ..outputs import write_file
from .check import REGRESSED, SKIPPED, Verdict


def junit_xml(
    experiment: str, baseline: str, verdicts: list[Verdict], properties: dict[str, str]
) -> bytes:
    failures = sum(v.outcome == REGRESSED for v in verdicts)
    skipped = sum(v.outcome == SKIPPED for v in verdicts)
    counts = {
        "tests": str(len(verdicts)),
        "failures": str(failures),
        "errors": "0",
        "skipped": str(skipped),
    }
    suites = ET.Element("testsuites", {"name": "dlscale check", **counts})
    suite = ET.SubElement(
        suites, "testsuite", {"name": f"dlscale check {experiment} against {baseline}", **counts}
    )
    props = ET.SubElement(suite, "properties")
    for key, value in properties.items():
        ET.SubElement(props, "property", {"name": key, "value": value})
    for v in verdicts:
        case = ET.SubElement(
            suite, "testcase", {"classname": f"dlscale.{experiment}", "name": v.name}
        )
        if v.outcome == REGRESSED:
            ET.SubElement(case, "failure", {"message": v.why, "type": "regression"}).text = v.why
        elif v.outcome == SKIPPED:
            ET.SubElement(case, "skipped", {"message": v.why})
        else:
            ET.SubElement(case, "system-out").text = v.why
    ET.indent(suites)
    return ET.tostring(suites, encoding="utf-8", xml_declaration=True) + b"\n"


def write_junit(path: str | Path, data: bytes) -> None:
    """Whole or not at all (the one writer): a CI job never reads half a file."""
    write_file(path, data, "--junit")
