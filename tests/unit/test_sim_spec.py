"""Machine specs: shipped machines, the loader's one-line errors, and spec-driven variants."""

from __future__ import annotations

import os
import textwrap

import pytest
from simhelp import place, dev, driver, read, vfs

from vgpu.catalog import DEFAULT as CATALOG
from vgpu.errors import InputError
from vgpu.sim import SimHost, list_machines, load_spec

SHIPPED = {"8xmi300x", "8xmi300x-fw1", "8xmi325x", "8xmi350x", "8xmi355x", "mixed"}
MINIMAL = """version: v1
name: tiny
description: one MI300X
functions:
  - {address: "0000:85:00.0", kind: gpu, model: MI300X, path: ["0000:80:01.1"]}
"""


def spec_file(tmp_path, text: str):
    path = tmp_path / "spec.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def test_list_machines_names_every_shipped_machine_with_a_one_line_description():
    machines = dict(list_machines())
    assert set(machines) == SHIPPED
    assert all(desc and "\n" not in desc for desc in machines.values())


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_every_shipped_machine_builds_and_its_gpus_match_the_catalog(tmp_path, name):
    host = SimHost.create(place(tmp_path), name)
    assert host.machine.name == name
    gpus = [a for a in os.listdir(host.sys_root / "bus/pci/devices")
            if read(dev(host, a) / "vendor") == "0x1002"
            and (m := CATALOG.match(0x1002, int(read(dev(host, a) / "device"), 16))) and not m.is_vf]
    assert len(gpus) >= 5


def test_mixed_machine_has_amdgpu_bound_gpu_and_a_shared_iommu_group(tmp_path):
    host = SimHost.create(place(tmp_path), "mixed")
    assert driver(host, "0000:05:00.0") == "amdgpu"
    assert read(dev(host, "0000:05:00.0") / "current_compute_partition") == "SPX"
    group = os.readlink(dev(host, "0000:26:00.0") / "iommu_group").rsplit("/", 1)[1]
    members = sorted(os.listdir(host.sys_root / f"kernel/iommu_groups/{group}/devices"))
    assert members == ["0000:22:00.0", "0000:26:00.0"]
    assert driver(host, "0000:26:00.0") == "gim" and len(vfs(host, "0000:26:00.0")) == 1
    assert read(dev(host, "0000:c6:00.0") / "device") == "0x740f"
    assert read(host.sys_root / "module/gim/version") == "8.5.0.K"


def test_building_default_machine_and_loading_gim_with_8_vfs(tmp_path):
    # how long this takes is measured in benchmarks/bench_plan.py, not asserted here (a busy machine is slow)
    host = SimHost.create(place(tmp_path))
    host.kernel.unload_module("gim")
    host.kernel.load_module("gim", {"vf_num": ",".join(["8"] * 8)})
    assert len(vfs(host, "0000:85:00.0")) == 8


def test_a_spec_file_builds_a_custom_machine_with_its_initial_state(tmp_path):
    text = MINIMAL.replace('path: ["0000:80:01.1"]', 'sriov: {total_vfs: 8}, path: ["0000:80:01.1"]')
    path = spec_file(tmp_path, text + """
state:
  cmdline: "ro intel_iommu=on iommu=pt"
  cpu_vendor: GenuineIntel
  modules: {gim: {vf_num: "4"}, vfio_pci: {ids: "1002:74b5"}}
  hugepages: {1048576: 16}
  modprobe_d: {gim.conf: "options gim vf_num=4"}
  gim_config: "vf_num=4\\n"
""")
    host = SimHost.create(place(tmp_path), path)
    assert [driver(host, vf) for vf in vfs(host, "0000:85:00.0")] == ["vfio-pci"] * 4
    assert read(host.root / "proc/cmdline") == "ro intel_iommu=on iommu=pt"
    assert "GenuineIntel" in read(host.root / "proc/cpuinfo")
    assert read(host.sys_root / "kernel/mm/hugepages/hugepages-1048576kB/nr_hugepages") == "16"
    assert read(host.root / "etc/modprobe.d/gim.conf") == "options gim vf_num=4"
    assert read(host.root / "etc/gim_config") == "vf_num=4"
    assert host.is_machine(path) and not host.is_machine("8xmi300x")


def test_unknown_machine_name_is_one_clear_line():
    with pytest.raises(InputError) as err:
        load_spec("16xmi999")
    assert "unknown simulated machine '16xmi999'" in str(err.value)
    assert "8xmi300x" in str(err.value) and "\n" not in str(err.value)


def test_missing_spec_file_is_reported(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        load_spec(tmp_path / "nope.yaml")


@pytest.mark.parametrize("text, message", [
    ("version: v1\nname: [unclosed\n", "line 3, column 1: not valid YAML"),
    ("- just\n- a list\n", "must be a YAML mapping"),
    (MINIMAL.replace("version: v1", "version: v2"), "version"),
    (MINIMAL + "colour: blue\n", "colour: Extra inputs are not permitted"),
    (MINIMAL.replace("0000:85:00.0", "0000:zz:00.0"), "not a PCI address"),
    (MINIMAL.replace("MI300X", "MI999X"), "unknown GPU model 'MI999X'"),
    (MINIMAL.replace("name: tiny", "name: Tiny Box"), "name"),
    (MINIMAL.replace("description: one MI300X", "description: ''"), "description"),
    (MINIMAL.replace('path: ["0000:80:01.1"]', 'path: ["0000:80:01.1"], bars: [{index: 5, size: 1G}]'),
     "index 5 cannot hold"),
    (MINIMAL.replace('path: ["0000:80:01.1"]', 'path: ["0000:80:01.1"], bars: [{index: 0, size: 3M}]'),
     "not a power of two"),
    (MINIMAL.replace('path: ["0000:80:01.1"]', 'path: ["0000:80:01.1"], vendor: "1002"'), "hex number"),
    (MINIMAL.replace('path: ["0000:80:01.1"]',
                     'path: ["0000:80:01.1"], sriov: {total_vfs: 2, initial_vfs: 3}'),
     "initial_vfs 3 is above total_vfs 2"),
    (MINIMAL + '  - {address: "0000:85:00.0", kind: nvme}\n', "declared twice"),
    (MINIMAL + '  - {address: "0000:86:00.0", kind: other, vendor: 0x8086, device: 0x1}\n',
     "needs class_code"),
    (MINIMAL + '  - {address: "0000:86:00.0", kind: nvme, iommu_group_with: "0000:99:00.0"}\n',
     "is not a function here"),
    (MINIMAL + "state: {modprobe_d: {'../evil': x}}\n", "must be a plain name ending in .conf"),
    (MINIMAL + "state: {hugepages: {4096: 1}}\n", "hugepage size 4096"),
    (MINIMAL + "state: {bind: {'0000:01:00.0': vfio-pci}}\n", "state.bind: 0000:01:00.0"),
])
def test_malformed_spec_gives_one_line_input_error(tmp_path, text, message):
    with pytest.raises(InputError) as err:
        load_spec(spec_file(tmp_path, text))
    assert message in str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("extra, message", [
    ('  - {address: "0000:85:02.0", kind: nvme, path: ["0000:80:01.1"]}\n', "would sit at 0000:85:02.0"),
    ("state: {modules: {gim: {vfnum: '4'}}}\n", "unknown parameter"),
    ("state: {modules: {vfio_pci: {}}, bind: {'0000:85:00.0': nvidia}}\n", "driver nvidia"),
])
def test_specs_the_kernel_could_not_boot_are_refused_at_build(tmp_path, extra, message):
    text = MINIMAL.replace('path: ["0000:80:01.1"]', 'sriov: {total_vfs: 8}, path: ["0000:80:01.1"]') + extra
    with pytest.raises(InputError, match=message):
        SimHost.create(place(tmp_path), spec_file(tmp_path, text))


def test_a_spec_that_cannot_boot_leaves_the_existing_host_alone(tmp_path):
    where = place(tmp_path)
    SimHost.create(where, spec_file(tmp_path, MINIMAL))
    bad = MINIMAL.replace("name: tiny", "name: bad") + "state: {modules: {gim: {vfnum: '4'}}}\n"
    (tmp_path / "bad.yaml").write_text(bad)
    with pytest.raises(InputError, match="unknown parameter"):
        SimHost.create(where, tmp_path / "bad.yaml")
    assert SimHost.open(where).machine.name == "tiny"
    assert [p.name for p in where.parent.iterdir()] == ["h"]  # no staging directory left


def test_iommu_group_sharing_follows_chains_and_refuses_cycles(tmp_path):
    extra = '  - {address: "0000:85:00.%d", kind: other, vendor: 0x1002, device: 0x%d, class_code: 0x040300, ' \
            'iommu_group_with: "%s", path: ["0000:80:01.1"]}\n'
    chain = MINIMAL + extra % (1, 1, "0000:85:00.2") + extra % (2, 2, "0000:85:00.0")
    host = SimHost.create(place(tmp_path), spec_file(tmp_path, chain))
    functions = ("0000:85:00.0", "0000:85:00.1", "0000:85:00.2")
    groups = {os.readlink(dev(host, a) / "iommu_group") for a in functions}
    assert len(groups) == 1
    cycle = chain.replace('iommu_group_with: "0000:85:00.0"', 'iommu_group_with: "0000:85:00.1"')
    with pytest.raises(InputError, match="cycle"):
        SimHost.create(place(tmp_path), spec_file(tmp_path, cycle))


@pytest.mark.parametrize("name, os_id, version, kernel", [
    ("8xmi300x", "ubuntu", "22.04", "6.8.0-79-generic"), ("8xmi355x", "ubuntu", "24.04", "6.14.0-27-generic")])
def test_a_machine_has_its_os_release_and_kernel_release(tmp_path, name, os_id, version, kernel):
    host = SimHost.create(place(tmp_path), name)
    text = (host.root / "etc/os-release").read_text()
    assert f"ID={os_id}\n" in text and f'VERSION_ID="{version}"\n' in text
    assert read(host.root / "proc/sys/kernel/osrelease") == kernel
    assert f"Linux version {kernel} " in host.dmesg()


def test_every_shipped_machine_states_its_os_and_kernel():
    """Realistic defaults for every shipped machine (docs/sim-machine-spec.md): none relies on the default."""
    from vgpu.sim.spec import MACHINES_DIR
    for path in MACHINES_DIR.glob("*.yaml"):
        text = path.read_text()
        assert "os_release:" in text and "kernel_release:" in text, path.name
