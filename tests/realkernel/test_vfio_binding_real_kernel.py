"""vgpu's discovery and vfio binding against a real Linux kernel (docs/testing.md, tier 4).

One QEMU TCG guest per session (conftest.py) runs tools/realkernel/guest_driver.py: discovery with
a stand-in catalog entry for QEMU's SR-IOV NVMe controller, VFs from sriov_numvfs, then
vgpu.host.binding.bind/unbind through LinuxKernel. Each test checks one behaviour against what the
guest read from the kernel itself (``kernel`` observations), not against what vgpu claimed.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.realkernel

STANDIN_VENDOR, STANDIN_DEVICE = "0x1b36", "0x0010"
VFIO = "vfio-pci"


def test_discovery_finds_the_standin_pf_with_sriov_behind_an_iommu(guest_step):
    seen = guest_step("discover")
    assert (seen["kernel"]["vendor"], seen["kernel"]["device"]) == (STANDIN_VENDOR, STANDIN_DEVICE)
    assert seen["driver"] == seen["kernel"]["driver"] == "nvme"
    assert (seen["total_vfs"], seen["num_vfs"]) == (2, 0)
    assert seen["iommu_units"] >= 1 and seen["kernel"]["iommu_group"] is not None
    # The reason the stand-in catalog entry lists 0x0010 as a PF id only: QEMU's VFs share it.
    assert int(seen["sriov_vf_device"], 16) == int(STANDIN_DEVICE, 16)


def test_udev_discovery_equals_the_sysfs_walk_on_a_real_kernel(guest_step):
    seen = guest_step("discover")
    assert "unavailable" not in seen["inventory_udev"], seen["inventory_udev"]
    assert seen["inventory_udev"] == seen["inventory"]


def test_bind_moves_the_pf_from_nvme_to_vfio_pci_and_unbind_restores_nvme(guest_step):
    seen = guest_step("pf_roundtrip")
    assert seen["previous"] == "nvme"
    bound = seen["bound"]
    assert (bound["driver"], bound["driver_override"], bound["vfio_node"]) == (VFIO, VFIO, True)
    restored = seen["restored"]
    assert (restored["driver"], restored["driver_override"], restored["vfio_node"]) == ("nvme", None, False)


def test_sriov_numvfs_creates_vfs_that_discovery_links_to_their_pf(guest_step):
    pf = guest_step("discover")["pf"]
    seen = guest_step("enable_vfs")
    assert seen["num_vfs"] == 2
    assert seen["vfs"] == seen["kernel_virtfns"] and len(seen["vfs"]) == 2
    assert all(vf["physfn"] == pf for vf in seen["kernel"])
    groups = [vf["iommu_group"] for vf in seen["kernel"]]
    assert seen["vf_groups"] == groups and None not in groups and len(set(groups)) == 2
    # sriov_drivers_autoprobe=0 was written first, so nothing raced us for the new VFs.
    assert [vf["driver"] for vf in seen["kernel"]] == [None, None]


def test_bind_puts_each_vf_on_vfio_pci_and_its_dev_vfio_group_appears(guest_step):
    vfs = guest_step("enable_vfs")["vfs"]
    seen = guest_step("bind_vfs")
    assert seen["previous"] == {vf: None for vf in vfs}
    assert [vf["address"] for vf in seen["kernel"]] == vfs
    for vf in seen["kernel"]:
        assert (vf["driver"], vf["driver_override"], vf["vfio_node"]) == (VFIO, VFIO, True), vf


def test_rediscovery_reports_the_vfs_on_vfio_pci_and_their_vfio_groups(guest_step):
    enabled = guest_step("enable_vfs")
    seen = guest_step("rediscover_bound")
    assert seen["vf_drivers"] == {vf: VFIO for vf in enabled["vfs"]}
    assert set(enabled["vf_groups"]) <= set(seen["dev_vfio_groups"])


def test_unbind_restores_the_original_state_and_clears_driver_override(guest_step):
    previous = guest_step("bind_vfs")["previous"]
    seen = guest_step("unbind_vfs")
    for vf in seen["kernel"]:
        assert vf["driver"] == previous[vf["address"]], vf
        assert vf["driver_override"] is None and vf["vfio_node"] is False, vf


def test_bind_to_a_driver_that_never_claims_the_vf_raises_host_error(guest_step):
    vf = guest_step("enable_vfs")["vfs"][0]
    seen = guest_step("bind_missing_driver")
    assert seen["raised"] is not None, "bind returned although the kernel bound no driver"
    assert seen["raised"]["type"] == "HostError"
    assert vf in seen["raised"]["message"] and "vgpu-no-such-driver" in seen["raised"]["message"]
    assert (seen["during"]["driver"], seen["during"]["driver_override"]) == (None, "vgpu-no-such-driver")
    assert (seen["after"]["driver"], seen["after"]["driver_override"]) == (None, None)


def test_writing_zero_to_sriov_numvfs_removes_the_vfs(guest_step):
    seen = guest_step("disable_vfs")
    assert (seen["num_vfs"], seen["vfs"]) == (0, [])
    assert seen["gone"] == [True, True]


def test_the_guest_ran_every_step(guest_result):
    failed = [f"{s['name']}: {s['error']}" for s in guest_result["steps"] if not s["ok"]]
    assert guest_result["completed"] and not failed, failed
