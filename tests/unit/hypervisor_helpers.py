"""Builders for the hypervisor tests: node XML for libvirt's test driver, domain XML, validation."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from vgpu.hypervisor.xml import DomainSpec, PciHostdev
from vgpu.model.pci import PciAddress

VF0 = PciAddress.parse("0000:85:02.0")
VF1 = PciAddress.parse("0000:85:02.1")
VF2 = PciAddress.parse("0000:86:02.0")
OTHER = PciAddress.parse("0000:c1:00.0")
GIB = 1 << 30
RUNSTATE = {"running": 1, "paused": 3, "shutoff": 5}


def domain_xml(name: str, functions=(), *, machine: str = "q35", firmware: str | None = "efi",
               uuid: str | None = None) -> str:
    uuid = uuid or f"00000000-0000-4000-8000-{sum(map(ord, name)):012d}"
    return DomainSpec(name, uuid, machine=machine, firmware=firmware,
                      hostdevs=tuple(PciHostdev(a) for a in functions)).to_xml()


def node_file(tmp_path: Path, domains: dict[str, tuple[str, str]]) -> str:
    """A test:/// URI whose node XML holds ``{name: (domain xml, state)}``."""
    body = []
    for xml, state in domains.values():
        head, tail = xml.rsplit("</domain>", 1)
        head = head.replace("<domain ", "<domain xmlns:test='http://libvirt.org/schemas/domain/test/1.0' ", 1)
        body.append(f"{head}<test:runstate>{RUNSTATE[state]}</test:runstate></domain>{tail}")
    path = tmp_path / "node.xml"
    path.write_text("<node><cpu><nodes>1</nodes><sockets>1</sockets><cores>4</cores><threads>1</threads>"
                    "<active>4</active><mhz>2000</mhz><model>x86_64</model></cpu><memory>16777216</memory>"
                    + "".join(body) + "</node>")
    return f"test://{path}"


def virt_xml_validate(tmp_path: Path, xml: str) -> subprocess.CompletedProcess:
    """Run libvirt's own schema check (libxml2-utils + libvirt-clients) on ``xml``."""
    tool = shutil.which("virt-xml-validate")
    if tool is None:
        pytest.skip("virt-xml-validate is not installed (make deps-test installs libvirt-clients)")
    path = tmp_path / "dom.xml"
    path.write_text(xml)
    return subprocess.run([tool, str(path), "domain"], capture_output=True, text=True, timeout=600)
