"""GIM rules of the simulated kernel (docs/hardware.md §3). Each test fails if its rule breaks."""

from __future__ import annotations

import os

import pytest
from simhelp import place, bind_vfio, dev, driver, fresh_host, gim_pfs, group, read, vfs

from vgpu.errors import HostError
from vgpu.sim import SimHost

PF = "0000:85:00.0"


@pytest.fixture
def host(tmp_path):
    return fresh_host(tmp_path)


def modes(host, pf):
    return read(dev(host, pf) / "spatial_partition_mode"), read(dev(host, pf) / "memory_partition_mode")


def reload(host, **params):
    host.kernel.unload_module("gim")
    host.kernel.load_module("gim", {k: str(v) for k, v in params.items()})


def test_vf_num_creates_that_many_vfs_on_every_pf_at_offset_and_stride(host):
    reload(host, vf_num="4,4,4,4,4,4,4,4")
    for pf in gim_pfs(host):
        assert read(dev(host, pf) / "sriov_numvfs") == "4"
    assert vfs(host, PF) == ["0000:85:02.0", "0000:85:02.1", "0000:85:02.2", "0000:85:02.3"]
    for vf in vfs(host, PF):
        assert read(dev(host, vf) / "device") == "0x74b5"
        assert os.path.realpath(dev(host, vf) / "physfn") == os.path.realpath(dev(host, PF))
        assert read(dev(host, vf) / "uevent").count("PCI_ID=1002:74B5") == 1


def test_each_new_vf_gets_its_own_new_iommu_group(host):
    reload(host, vf_num="8,8,8,8,8,8,8,8")
    groups = [group(host, vf) for pf in gim_pfs(host) for vf in vfs(host, pf)]
    assert len(groups) == 64 and len(set(groups)) == 64
    assert not set(groups) & {group(host, pf) for pf in gim_pfs(host)}
    g = groups[0]
    assert os.listdir(host.sys_root / f"kernel/iommu_groups/{g}/devices") == [vfs(host, gim_pfs(host)[0])[0]]


def test_vf_num_values_apply_per_gpu_in_address_order_and_the_last_one_repeats(host):
    # gim_config.c set_array_value: GPUs past the end of the list take the last value
    reload(host, vf_num="2,4")
    counts = [read(dev(host, pf) / "sriov_numvfs") for pf in gim_pfs(host)]
    assert counts == ["2", "4", "4", "4", "4", "4", "4", "4"]
    reload(host, vf_num="8")
    assert [read(dev(host, pf) / "sriov_numvfs") for pf in gim_pfs(host)] == ["8"] * 8


def test_vf_num_outside_gims_range_becomes_the_default(host):
    reload(host, vf_num="0,abc,4")
    counts = [read(dev(host, pf) / "sriov_numvfs") for pf in gim_pfs(host)]
    assert counts[:3] == ["1", "1", "4"]
    assert "invalid token(vf_num) value: 0" in host.dmesg()


def test_modprobe_d_options_apply_and_command_line_params_override_them(host):
    (host.root / "etc/modprobe.d/gim.conf").write_text("options gim vf_num=2,2,2,2,2,2,2,2\n")
    reload(host)
    assert read(dev(host, PF) / "sriov_numvfs") == "2"
    reload(host, vf_num="4,4,4,4,4,4,4,4")
    assert read(dev(host, PF) / "sriov_numvfs") == "4"


def test_gim_config_file_sets_vf_num_and_module_params_override_it(host):
    (host.root / "etc/gim_config").write_text("vf_num=8,8,8,8,8,8,8,8\n")
    reload(host)
    assert read(dev(host, PF) / "sriov_numvfs") == "8"
    reload(host, vf_num="2,2,2,2,2,2,2,2")
    assert read(dev(host, PF) / "sriov_numvfs") == "2"


def test_unknown_key_in_gim_config_truncates_the_file_and_uses_defaults(host):
    path = host.root / "etc/gim_config"
    path.write_text("vf_num=4,4,4,4,4,4,4,4\nsched_interval=5\n")
    reload(host)
    assert path.read_text() == ""
    assert read(dev(host, PF) / "sriov_numvfs") == "1"
    assert "gim_config" in host.dmesg()


def test_vf_num_outside_allowed_set_leaves_that_pf_without_vfs(host):
    reload(host, vf_num="3,4,1")
    first, second = gim_pfs(host)[:2]
    assert read(dev(host, first) / "sriov_numvfs") == "0"
    assert vfs(host, first) == []
    assert driver(host, first) == "gim"
    assert read(dev(host, second) / "sriov_numvfs") == "4"
    assert "VF number 3 is not supported" in host.dmesg()


def test_vf_num_above_total_vfs_leaves_pf_without_vfs_and_logs_the_limit(tmp_path):
    host = fresh_host(tmp_path, "8xmi300x-fw1")
    reload(host, vf_num="8,8,8,8,8,8,8,8")
    for pf in gim_pfs(host):
        assert read(dev(host, pf) / "sriov_numvfs") == "0"
    assert "VF number 8 to be enabled exceeds the vf limit 1" in host.dmesg()
    assert "gim error libgv: [0:85:0:0][" in host.dmesg()


@pytest.mark.parametrize("vf_num, compute", [(1, "SPX"), (2, "DPX"), (4, "QPX"), (8, "CPX")])
def test_vf_num_sets_the_compute_partition(host, vf_num, compute):
    reload(host, vf_num=",".join([str(vf_num)] * 8))
    assert read(dev(host, PF) / "spatial_partition_mode") == compute
    assert read(dev(host, PF) / "memory_partition_mode") == "NPS1"


def test_hive_wide_partition_modes_from_gim_config_apply_where_the_pair_is_valid(host):
    config = "vf_num=1,4\naccelerator_partition_mode=8\nmemory_partition_mode=4\n"
    (host.root / "etc/gim_config").write_text(config)
    reload(host)
    first, second = gim_pfs(host)[:2]
    assert modes(host, first) == ("CPX", "NPS4")  # 1 VF: CPX+NPS4 is a valid combination
    assert modes(host, second) == ("QPX", "NPS1")  # 4 VFs with CPX: invalid, falls back


def test_partition_modes_are_not_module_parameters(host):
    host.kernel.unload_module("gim")
    with pytest.raises(HostError, match="unknown parameter"):
        host.kernel.load_module("gim", {"memory_partition_mode": "4"})


def test_invalid_partition_pair_falls_back_silently_to_nps1_and_default_compute(host):
    (host.root / "etc/gim_config").write_text("accelerator_partition_mode=4\nmemory_partition_mode=4\n")
    reload(host, vf_num="2,1")
    first, second = gim_pfs(host)[:2]
    assert read(dev(host, first) / "sriov_numvfs") == "2"  # the VFs still come
    assert modes(host, first) == ("DPX", "NPS1")
    assert modes(host, second) == ("SPX", "NPS1")


def test_memory_partition_write_accepts_a_valid_pair(host):
    reload(host, vf_num="8,8,8,8,8,8,8,8")
    pf = gim_pfs(host)[0]
    host.kernel.write_attr(dev(host, pf) / "memory_partition_mode", "NPS4\n")
    assert read(dev(host, pf) / "memory_partition_mode") == "NPS4"


def test_memory_partition_write_rejects_an_invalid_pair_with_einval(host):
    reload(host, vf_num="2,2,2,2,2,2,2,2")
    pf = gim_pfs(host)[0]
    with pytest.raises(HostError, match="EINVAL"):
        host.kernel.write_attr(dev(host, pf) / "memory_partition_mode", "NPS4")
    assert read(dev(host, pf) / "memory_partition_mode") == "NPS1"


def test_saved_partition_survives_a_reload_with_the_same_vf_num_and_resets_on_a_new_one(host):
    reload(host, vf_num="8,8,8,8,8,8,8,8")
    pf = gim_pfs(host)[0]
    host.kernel.write_attr(dev(host, pf) / "memory_partition_mode", "NPS4")
    reload(host, vf_num="8,8,8,8,8,8,8,8")
    assert read(dev(host, pf) / "memory_partition_mode") == "NPS4"
    reload(host, vf_num="4,4,4,4,4,4,4,4")
    assert read(dev(host, pf) / "memory_partition_mode") == "NPS1"
    reload(host, vf_num="8,8,8,8,8,8,8,8")
    assert read(dev(host, pf) / "memory_partition_mode") == "NPS1"


def test_writing_sriov_numvfs_on_a_gim_pf_fails_with_enoent_and_logs_it(host):
    with pytest.raises(HostError, match="does not support SRIOV configuration"):
        host.kernel.write_attr(dev(host, PF) / "sriov_numvfs", "4")
    assert read(dev(host, PF) / "sriov_numvfs") == "1"
    assert "Driver does not support SRIOV configuration via sysfs" in host.dmesg()


def test_unloading_gim_removes_every_vf_and_unbinds_the_pfs(host):
    reload(host, vf_num="4,4,4,4,4,4,4,4")
    vf = vfs(host, PF)[1]
    bind_vfio(host, vf)
    g = group(host, vf)
    assert (host.root / f"dev/vfio/{g}").exists()
    host.kernel.unload_module("gim")
    for pf in gim_pfs(host):
        assert driver(host, pf) is None
        assert vfs(host, pf) == []
        assert read(dev(host, pf) / "sriov_numvfs") == "0"
    assert not dev(host, vf).exists()
    assert not (host.sys_root / f"kernel/iommu_groups/{g}").exists()
    assert not (host.root / f"dev/vfio/{g}").exists()
    assert not (host.sys_root / "bus/pci/drivers/gim").exists()
    assert not (host.sys_root / "module/gim").exists()
    assert not any(n.startswith("0000:85:02") for n in os.listdir(host.sys_root / "bus/pci/drivers/vfio-pci"))


def test_unloading_gim_fails_while_a_process_holds_a_vf_and_changes_nothing(host):
    vf = vfs(host, PF)[0]
    bind_vfio(host, vf)
    pid = host.add_holder(group(host, vf), "qemu-system-x86")
    with pytest.raises(HostError, match=f"process {pid} \\(qemu-system-x86\\)"):
        host.kernel.unload_module("gim")
    assert driver(host, PF) == "gim" and driver(host, vf) == "vfio-pci"
    assert (host.sys_root / "module/gim").exists()
    host.remove_holder(pid)
    host.kernel.unload_module("gim")
    assert not dev(host, vf).exists()


def test_enabled_devices_limits_which_pfs_gim_takes(host):
    reload(host, enabled_devices="0000:05:00.0;0000:85:00.0")
    bound = [pf for pf in gim_pfs(host) if driver(host, pf) == "gim"]
    assert bound == ["0000:05:00.0", PF]


def test_loading_gim_again_keeps_its_parameters_as_modprobe_does(host):
    host.kernel.load_module("gim", {"vf_num": "8"})
    assert read(dev(host, PF) / "sriov_numvfs") == "1"
    assert read(host.sys_root / "module/gim/parameters/vf_num") == "1"


def test_vf_num_parameter_shows_in_sysfs(host):
    reload(host, vf_num="4,4,4,4,4,4,4,4")
    assert read(host.sys_root / "module/gim/parameters/vf_num") == "4,4,4,4,4,4,4,4"


def test_unknown_gim_parameter_fails_like_modprobe(host):
    host.kernel.unload_module("gim")
    with pytest.raises(HostError, match="unknown parameter"):
        host.kernel.load_module("gim", {"vfnum": "4"})
    assert not (host.sys_root / "module/gim").exists()


def test_mi355x_accepts_8_vfs_with_gim_9_1(tmp_path):
    host = fresh_host(tmp_path, "8xmi355x")
    reload(host, vf_num="8,2")
    first, second = sorted(a for a in os.listdir(host.sys_root / "bus/pci/devices")
                           if read(dev(host, a) / "device") == "0x75a3")[:2]
    assert read(dev(host, first) / "sriov_numvfs") == "8"
    assert read(dev(host, first) / "spatial_partition_mode") == "CPX"
    assert read(dev(host, vfs(host, first)[0]) / "device") == "0x75b3"
    assert read(dev(host, second) / "sriov_numvfs") == "2"
    # MI355X has no 4-VF mode (catalog gim_vf_counts 1, 2, 8)
    reload(host, vf_num="4")
    assert read(dev(host, first) / "sriov_numvfs") == "0"


def test_gim_older_than_a_models_minimum_enables_no_vfs(tmp_path):
    spec = tmp_path / "one.yaml"
    spec.write_text("""version: v1
name: one-mi355x
description: one MI355X, TotalVFs 8, gim 8.5.0.K
functions:
  - {address: "0000:85:00.0", kind: gpu, model: MI355X, sriov: {total_vfs: 8}, path: ["0000:80:01.1"]}
state:
  modules: {gim: {vf_num: "8"}}
  module_versions: {gim: "8.5.0.K"}
""")
    host = SimHost.create(place(tmp_path), spec)  # release notes: MI355X 2 and 8 VFs need GIM 9.1
    assert read(dev(host, PF) / "sriov_numvfs") == "0"
    assert "needs 9.1" in host.dmesg()
    reload(host, vf_num="1")
    assert read(dev(host, PF) / "sriov_numvfs") == "1"


def test_group_numbers_freed_by_removed_vfs_are_reused_lowest_first(host):
    before = {vf: group(host, vf) for pf in gim_pfs(host) for vf in vfs(host, pf)}
    reload(host)
    assert {vf: group(host, vf) for pf in gim_pfs(host) for vf in vfs(host, pf)} == before
    reload(host, vf_num="2,2,2,2,2,2,2,2")
    groups = sorted(group(host, vf) for pf in gim_pfs(host) for vf in vfs(host, pf))
    taken = {int(g) for g in os.listdir(host.sys_root / "kernel/iommu_groups")} - set(groups)
    assert groups == sorted(set(range(max(groups) + 1)) - taken)  # no hole left below the highest
