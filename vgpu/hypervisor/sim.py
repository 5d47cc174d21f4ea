"""The simulated hypervisor for ``--simulate``: libvirt's real ``test:///`` driver, persisted.

The test driver keeps its state inside one connection, so each process regenerates the driver's
node XML from files in the state dir (one domain XML per VM plus ``states.json``) and writes every
change back atomically. The saved domain XML is vgpu's own text: the test
driver drops ``<qemu:commandline>``, which attach writes and tests read back.
"""

from __future__ import annotations

import errno
import fcntl
import json
import uuid as uuidlib
import xml.etree.ElementTree as ET
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from vgpu.fsutil import atomic_write
from typing import Any

from vgpu.errors import InputError
from vgpu.inputs import InputFileError, load_json, read_text
from vgpu.hypervisor.base import DomainInfo, state_name
from vgpu.hypervisor.domain import DomainXml
from vgpu.hypervisor.libvirt import LibvirtHypervisor, import_libvirt
from vgpu.hypervisor.xml import TEST_NS, DomainSpec, check_domain_name, parse, serialize
from vgpu.model.pci import PciAddress

SUBDIR = "hypervisor"
STATES = "states.json"
# virDomainState numbers the test driver's <test:runstate> takes (libvirt-domain.h).
RUNSTATES = {"running": 1, "paused": 3, "shutoff": 5}
# A host big enough for the simulated 8-GPU machines' VMs; the test driver only counts it.
_NODE = """<node><cpu><nodes>2</nodes><sockets>2</sockets><cores>48</cores><threads>2</threads>
<active>192</active><mhz>2400</mhz><model>x86_64</model></cpu><memory>2147483648</memory></node>"""


write_atomic = atomic_write


class SimHypervisor(LibvirtHypervisor):
    """``Hypervisor`` over ``test:///<state>/hypervisor/node.xml``, shared by every process that
    opens the same state dir."""

    def __init__(self, state_dir: Path):
        self.dir = Path(state_dir).resolve() / SUBDIR
        (self.dir / "domains").mkdir(parents=True, exist_ok=True, mode=0o755)
        self._lv = import_libvirt()
        self._conn = None
        self._generation = -1
        self._lock_depth = 0
        self.uri = f"test://{self.dir / 'node.xml'}"
        self._connection()

    # -- state on disk ---------------------------------------------------------------------

    @contextmanager
    def _locked(self) -> Iterator[None]:
        """Exclusive across processes; re-entrant within this object (flock would deadlock on a
        second open file description of the same lock file)."""
        if self._lock_depth:
            self._lock_depth += 1
            try:
                yield
            finally:
                self._lock_depth -= 1
            return
        with open(self.dir / ".lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            self._lock_depth = 1
            try:
                yield
            finally:
                self._lock_depth = 0

    def _read_states(self) -> dict:
        hint = "delete the simulation's state dir and start again"
        try:
            data = load_json(self.dir / STATES, "simulator state")
        except InputFileError as exc:
            if exc.errno == errno.ENOENT:
                return {"generation": 0, "states": {}}
            raise InputError(f"simulated hypervisor state {self.dir / STATES} is corrupt: {exc.problem}",
                             hint=hint) from None
        if not (isinstance(data, dict) and isinstance(data.get("generation"), int)
                and isinstance(data.get("states"), dict)):
            raise InputError(f"simulated hypervisor state {self.dir / STATES} is corrupt: not a "
                             "{generation, states} object", hint=hint)
        return data

    def _write_states(self, states: dict[str, str]) -> None:
        generation = self._read_states()["generation"] + 1
        write_atomic(self.dir / STATES, json.dumps({"generation": generation, "states": states}, indent=1))
        self._generation = generation

    def _domain_file(self, uuid: str) -> Path:
        return self.dir / "domains" / f"{uuid}.xml"

    def _node_xml(self, states: dict[str, str]) -> str:
        node = ET.fromstring(_NODE)
        for path in sorted((self.dir / "domains").glob("*.xml")):
            domain = parse(read_text(path, "simulator state"), f"simulated VM file {path}")
            state = states.get(path.stem, "shutoff")
            ET.SubElement(domain, f"{{{TEST_NS}}}runstate").text = str(RUNSTATES.get(state, 5))
            node.append(domain)
        return serialize(node)

    def _connection(self) -> Any:
        """The test-driver connection, rebuilt from disk when another process changed the state."""
        data = self._read_states()
        if self._conn is None or data["generation"] != self._generation:
            with self._locked():
                data = self._read_states()
                write_atomic(self.dir / "node.xml", self._node_xml(data["states"]))
                if self._conn is not None:
                    self._conn.close()
                self._conn = self._open(self.uri)
                self._generation = data["generation"]
        return self._conn

    # -- hooks -----------------------------------------------------------------------------

    def _persistent_xml(self, dom: Any) -> str:
        saved = self._domain_file(dom.UUIDString())
        return read_text(saved, "simulator state") if saved.is_file() else super()._persistent_xml(dom)

    def _define(self, xml: str, domain: str) -> Any:
        with self._locked():
            dom = super()._define(xml, domain)  # the test driver validates it against libvirt's schema
            uuid = dom.UUIDString()
            root = parse(xml, f"VM {domain}'s XML")
            if root.find("uuid") is None:
                ET.SubElement(root, "uuid").text = uuid
            write_atomic(self._domain_file(uuid), serialize(root))
            states = self._read_states()["states"]
            states.setdefault(uuid, "shutoff")
            self._write_states(states)
        return dom

    # -- helpers for tests and demos -------------------------------------------------------

    def define_domain(self, name: str, vf_addresses: Sequence[PciAddress] = (), running: bool = True, *,
                      machine: str = "q35", firmware: str | None = "efi") -> DomainInfo:
        """Define a VM (q35/OVMF by default) holding ``vf_addresses``, each behind its own root port."""
        check_domain_name(name)
        uuid = str(uuidlib.uuid5(uuidlib.NAMESPACE_URL, f"vgpu-sim-domain:{name}"))
        doc = DomainXml(DomainSpec(name, uuid, machine=machine, firmware=firmware).to_element())
        for address in vf_addresses:
            doc.add_hostdev(address)
        self._define(doc.to_xml(), name)
        if running:
            self.set_state(name, "running")
        return self._info(self._lookup(name))

    def set_state(self, name: str, state: str) -> None:
        """Move a VM to "running", "paused" or "shutoff", as a user with virsh would."""
        if state not in RUNSTATES:
            raise InputError(f"simulated VM state must be one of {', '.join(RUNSTATES)}, not {state!r}")
        dom = self._lookup(name)
        current = state_name(dom.state()[0])
        with self._locked():
            if current == "shutoff" and state != "shutoff":
                dom.create()
            if state == "paused" and current != "paused":
                dom.suspend()
            elif state == "running" and current == "paused":
                dom.resume()
            elif state == "shutoff" and current != "shutoff":
                dom.destroy()
            states = self._read_states()["states"]
            states[dom.UUIDString()] = state
            self._write_states(states)

    def undefine(self, name: str) -> None:
        dom = self._lookup(name)
        with self._locked():
            if dom.isActive():
                dom.destroy()
            dom.undefine()
            self._domain_file(dom.UUIDString()).unlink(missing_ok=True)
            states = self._read_states()["states"]
            states.pop(dom.UUIDString(), None)
            self._write_states(states)
