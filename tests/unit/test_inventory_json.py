"""`vgpu discover --json` (schema vgpu.inventory/v2): every simulated machine's document passes the committed JSON
Schema, and PCI ids are written the way sysfs, lspci, amd-smi and libvirt write them ("0x74a1"), not as decimals."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import pytest

from vgpu.host.discovery import discover
from vgpu.host.paths import HostPaths
from vgpu.model.inventory import INVENTORY_SCHEMA, pci_id
from vgpu.sim import SimHost, list_machines

REPO = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((REPO / "vgpu" / "schemas" / "inventory-v2.json").read_text())
MACHINES = [name for name, _ in list_machines()]
HEX_ID = re.compile(r"^0x[0-9a-f]{4}$")


@pytest.fixture(scope="module")
def documents(tmp_path_factory):
    docs = {}
    for machine in MACHINES:
        host = SimHost.create(tmp_path_factory.mktemp(machine), machine=machine)
        docs[machine] = json.loads(json.dumps(discover(HostPaths.under(host.root), source="sysfs").to_dict()))
    return docs


@pytest.mark.parametrize("machine", MACHINES)
def test_document_passes_the_committed_schema(documents, machine):
    jsonschema.validate(documents[machine], SCHEMA)
    assert documents[machine]["schema"] == INVENTORY_SCHEMA == "vgpu.inventory/v2"


def _ids(doc):
    """Every PCI id in the document, with where it was found."""
    for gpu in doc["gpus"]:
        yield gpu["address"], gpu["device_id"]
        for value in gpu["subsystem"] or ():
            yield gpu["address"] + " subsystem", value
        for vf in gpu["vfs"]:
            yield vf["address"], vf["device_id"]
            for m in (vf["iommu_group"] or {"members": []})["members"]:
                yield m["address"], m["vendor"]
                yield m["address"], m["device"]
        for m in (gpu["iommu_group"] or {"members": []})["members"]:
            yield m["address"], m["vendor"]
            yield m["address"], m["device"]


@pytest.mark.parametrize("machine", MACHINES)
def test_every_pci_id_is_a_lower_case_hex_string(documents, machine):
    ids = list(_ids(documents[machine]))
    assert ids
    bad = [(where, value) for where, value in ids if not (isinstance(value, str) and HEX_ID.match(value))]
    assert not bad


@pytest.mark.parametrize("machine,pf,vf", [("8xmi300x", "0x74a1", "0x74b5"), ("8xmi325x", "0x74a5", "0x74b9"),
                                          ("8xmi355x", "0x75a3", "0x75b3")])
def test_ids_read_as_the_catalog_and_lspci_write_them(documents, machine, pf, vf):
    gpus = documents[machine]["gpus"]
    assert {g["device_id"] for g in gpus} == {pf}
    assert {v["device_id"] for g in gpus for v in g["vfs"]} == {vf}
    assert {m["vendor"] for g in gpus for m in g["iommu_group"]["members"] if m["address"] == g["address"]} == {"0x1002"}


def test_non_gpu_group_members_keep_their_own_vendor(documents):
    members = [m for g in documents["mixed"]["gpus"] if g["iommu_group"] for m in g["iommu_group"]["members"]]
    assert any(m["vendor"] != "0x1002" or m["is_bridge"] for m in members)


def test_module_parameters_named_like_ids_stay_strings():
    from vgpu.model.inventory import _jsonable
    assert _jsonable({"parameters": {"vendor": "x", "device": "7"}}) == {"parameters": {"vendor": "x", "device": "7"}}


@pytest.mark.parametrize("value,text", [(0x1002, "0x1002"), (0x74A1, "0x74a1"), (0x0001, "0x0001"), (0, "0x0000")])
def test_pci_id_format(value, text):
    assert pci_id(value) == text
