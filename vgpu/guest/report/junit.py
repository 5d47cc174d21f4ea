"""The JUnit XML report: a testsuite per guest, a testcase per agent check.

The layout Jenkins, GitLab, AWX and junitparser read: ``<testsuites>`` holding one
``<testsuite>`` per guest (its properties say how it was reached and what it was validated
against), one ``<testcase>`` per check with ``<failure>``, ``<error>`` or ``<skipped>`` and a
message, and per-testcase properties with measured / expected / unit (the JUnit 5 / Jenkins
"properties in testcase" extension; readers that do not know it ignore it). A guest that was
never validated gets one testcase named after the step that failed, carrying an ``<error>``.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from vgpu.guest.agent.result import CheckResult
from vgpu.guest.report.model import GuestReport, Outcome, ValidationReport

_RESULT_TAG = {"fail": "failure", "error": "error", "skip": "skipped"}
_STEP = {Outcome.UNREACHABLE: "connect", Outcome.TIMEOUT: "connect", Outcome.AUTH_FAILED: "authenticate",
         Outcome.HOST_KEY_REFUSED: "host-key", Outcome.AGENT_ERROR: "agent"}


def render(report: ValidationReport) -> bytes:
    root = ET.Element("testsuites", name="vgpu validate")
    totals = dict(tests=0, failures=0, errors=0, skipped=0)
    seconds = 0.0
    for guest in report.guests:
        suite = _suite(guest, report.generated)
        root.append(suite)
        for k in totals:
            totals[k] += int(suite.get(k))
        seconds += guest.seconds
    root.attrib.update({k: str(v) for k, v in totals.items()}, time=f"{seconds:.3f}",
                       timestamp=report.generated)
    _clean_tree(root)
    ET.indent(root)
    return ET.tostring(root, encoding="utf-8", xml_declaration=True) + b"\n"


# XML 1.0 forbids most control characters; a guest printing garbage must not make the file unreadable.
_BAD_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _clean_tree(root: ET.Element) -> None:
    for el in root.iter():
        if el.text:
            el.text = _BAD_XML.sub("?", el.text)
        for k, v in el.attrib.items():
            el.attrib[k] = _BAD_XML.sub("?", v)


def _suite(guest: GuestReport, timestamp: str) -> ET.Element:
    suite = ET.Element("testsuite", name=guest.name, hostname=guest.address, timestamp=timestamp,
                       time=f"{guest.seconds:.3f}")
    props = ET.SubElement(suite, "properties")
    exp = guest.expectation
    meta = {"outcome": guest.outcome.value, "verdict": guest.verdict, "model": exp.model,
            "compute_partition": exp.compute, "memory_partition": exp.memory,
            "is_vf": None if exp.is_vf is None else str(exp.is_vf).lower(), "profile": exp.profile}
    if guest.agent:
        meta.update(agent_version=guest.agent.agent_version, agent_hostname=guest.agent.hostname)
    for k, v in meta.items():
        if v is not None:
            ET.SubElement(props, "property", name=k, value=str(v))
    cases = [_case(guest.name, c) for c in guest.checks]
    if guest.outcome is not Outcome.OK:
        case = ET.Element("testcase", classname=_classname(guest.name), name=_STEP[guest.outcome],
                          time=f"{guest.seconds:.3f}")
        ET.SubElement(case, "error", message=guest.detail, type=guest.outcome.value).text = guest.detail
        cases = [case]
    for case in cases:
        suite.append(case)
    suite.attrib.update(
        tests=str(len(cases)),
        failures=str(sum(c.find("failure") is not None for c in cases)),
        errors=str(sum(c.find("error") is not None for c in cases)),
        skipped=str(sum(c.find("skipped") is not None for c in cases)))
    return suite


def _classname(guest: str) -> str:
    return "vgpu.validate." + guest.replace(".", "_")


def _case(guest: str, check: CheckResult) -> ET.Element:
    case = ET.Element("testcase", classname=_classname(guest), name=check.name, time=f"{check.seconds:.3f}")
    values = {"measured": check.measured, "expected": check.expected, "unit": check.unit}
    if any(v is not None for v in values.values()):
        props = ET.SubElement(case, "properties")
        for k, v in values.items():
            if v is not None:
                ET.SubElement(props, "property", name=k, value=str(v))
    tag = _RESULT_TAG.get(check.status)
    if tag:
        message = check.detail or _default_message(check)
        if tag == "skipped" and not message.startswith(("not judged", "not applicable")):
            message = "not judged: " + message
        el = ET.SubElement(case, tag, message=message)
        if tag != "skipped":
            el.set("type", check.status)
            el.text = _body(check)
    elif check.detail:
        ET.SubElement(case, "system-out").text = check.detail
    return case


def _default_message(check: CheckResult) -> str:
    unit = f" {check.unit}" if check.unit else ""
    return f"measured {check.measured}{unit}, expected {check.expected}{unit}"


def _body(check: CheckResult) -> str:
    unit = f" {check.unit}" if check.unit else ""
    lines = [check.detail] if check.detail else []
    lines.append(f"measured: {check.measured}{unit}")
    lines.append(f"expected: {check.expected}{unit}")
    return "\n".join(lines)
