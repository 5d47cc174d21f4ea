"""Discovery on simulated machines (direct sysfs read): every model, filtering, groups, BARs."""

import pytest

from vgpu.catalog import DEFAULT
from vgpu.host.discovery import discover
from vgpu.host.paths import HostPaths
from vgpu.model.inventory import Severity
from vgpu.model.pci import PciAddress
from vgpu.sim import SimHost


@pytest.fixture(scope="module")
def hosts(tmp_path_factory):
    cache = {}

    def get(machine):
        if machine not in cache:
            cache[machine] = SimHost.create(tmp_path_factory.mktemp(machine), machine=machine)
        return cache[machine]
    return get


def inv_of(host):
    return discover(HostPaths.under(host.root), source="sysfs")


@pytest.mark.parametrize("machine,model,pf_id,vf_id", [
    ("8xmi300x", "MI300X", 0x74A1, 0x74B5), ("8xmi300x-fw1", "MI300X", 0x74A1, 0x74B5),
    ("8xmi325x", "MI325X", 0x74A5, 0x74B9), ("8xmi355x", "MI355X", 0x75A3, 0x75B3),
    ("8xmi350x", "MI350X", 0x75A0, 0x75B0)])
def test_each_model_is_discovered_on_its_machine(hosts, machine, model, pf_id, vf_id):
    inv = inv_of(hosts(machine))
    assert len(inv.gpus) == 8
    assert {g.model for g in inv.gpus} == {model} and {g.device_id for g in inv.gpus} == {pf_id}
    assert all(vf.device_id == vf_id for g in inv.gpus for vf in g.vfs)
    assert {g.numa_node for g in inv.gpus} == {0, 1}
    assert all(g.driver == "gim" and g.num_vfs == len(g.vfs) == 1 for g in inv.gpus)


def test_total_vfs_reflect_firmware(hosts):
    assert {g.total_vfs for g in inv_of(hosts("8xmi300x")).gpus} == {8}
    assert {g.total_vfs for g in inv_of(hosts("8xmi300x-fw1")).gpus} == {1}


def test_only_catalog_functions_are_reported(hosts):
    host = hosts("mixed")
    inv = inv_of(host)
    reported = {g.address for g in inv.gpus} | {vf.address for g in inv.gpus for vf in g.vfs}
    # the tree holds non-AMD devices and AMD devices the catalog does not know: none are reported
    all_functions = list((host.sys_root / "bus/pci/devices").iterdir())
    assert len(all_functions) > len(reported)
    for dev in all_functions:
        vendor = int((dev / "vendor").read_text(), 16)
        device = int((dev / "device").read_text(), 16)
        known = DEFAULT.match(vendor, device) is not None
        assert (PciAddress.parse(dev.name) in reported) == known, dev.name


def test_mixed_host_reports_several_models_and_amdgpu_finding(hosts):
    inv = inv_of(hosts("mixed"))
    assert len({g.model for g in inv.gpus}) >= 2
    amdgpu = [f for f in inv.findings if f.check.endswith(".driver") and "amdgpu" in f.message]
    assert amdgpu and amdgpu[0].severity is Severity.WARNING


def test_shared_iommu_group_lists_every_member(hosts):
    inv = inv_of(hosts("mixed"))
    shared = [g for g in inv.gpus if g.iommu_group and len(g.iommu_group.members) > 1]
    assert shared, "the mixed machine must have a GPU sharing its IOMMU group"
    gpu = shared[0]
    others = gpu.iommu_group.others(gpu.address)
    assert others and all(m.address != gpu.address for m in others)
    finding = next(f for f in inv.findings if f.check == f"gpu.{gpu.address}.iommu_group")
    assert all(str(m.address) in finding.message for m in others)


def test_bars_links_and_partitions_are_read(hosts):
    gpu = inv_of(hosts("8xmi300x")).gpus[0]
    assert gpu.bar64_bytes > 0 and any(b.prefetchable and b.is_64bit for b in gpu.bars)
    assert gpu.link.width == 16 and "GT/s" in (gpu.link.speed or "")
    assert gpu.partition.source == "gim" and gpu.partition.compute == "SPX" and gpu.partition.memory == "NPS1"
    assert gpu.iommu_group is not None and gpu.vfs[0].iommu_group is not None
    assert gpu.vfs[0].iommu_group.number != gpu.iommu_group.number


def test_default_machine_is_ready(hosts):
    inv = inv_of(hosts("8xmi300x"))
    assert inv.ready, [f for f in inv.findings if f.severity is Severity.ERROR]
