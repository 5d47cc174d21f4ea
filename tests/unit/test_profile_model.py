"""Profile schema rules: one valid and one invalid case per rule, each with its operator-facing message."""

from __future__ import annotations

import pytest
from profile_helpers import DROP, doc, load, problem

from vgpu.catalog import ComputePartition as C, Hypervisor, MemoryPartition as M, Mode, Support
from vgpu.model.pci import PciAddress

# (rule, changes that satisfy it, changes that break it, the error line the break gives)
RULES = [
    ("model is a catalog target", {"gpu.model": "mi300x"}, {"gpu.model": "MI400X"},
     "t.yaml: gpu.model: unknown GPU model 'MI400X'; known: MI300X, MI300X-HF, MI308X, MI325X, MI350X, MI355X"),
    ("non-target models are refused", {"gpu.model": "MI325X"}, {"gpu.model": "MI300A"},
     "t.yaml: gpu.model: MI300A is in the catalog but vgpu does not provision it"),
    ("vf count in GIM's list", {"gpu.vfs_per_gpu": 2}, {"gpu.vfs_per_gpu": 3},
     "t.yaml: gpu.vfs_per_gpu: 3 VFs per GPU is not allowed for MI300X (GIM accepts 1, 2, 4, 8)"),
    ("vf count per model", {"gpu.model": "MI355X", "gpu.vfs_per_gpu": 8},
     {"gpu.model": "MI355X", "gpu.vfs_per_gpu": 4},
     "t.yaml: gpu.vfs_per_gpu: 4 VFs per GPU is not allowed for MI355X (GIM accepts 1, 2, 8)"),
    ("memory partition pairs with the vf count",
     {"gpu.vfs_per_gpu": 4, "gpu.compute_partition": "QPX", "gpu.memory_partition": "NPS4"},
     {"gpu.vfs_per_gpu": 2, "gpu.compute_partition": "DPX", "gpu.memory_partition": "NPS4"},
     "t.yaml: gpu.memory_partition: DPX/NPS4 with 2 VFs per GPU is not a combination GIM accepts for MI300X "
     "(it would silently fall back to NPS1 and the default compute mode); valid with 2 VFs: DPX/NPS1"),
    ("compute partition pairs with the vf count", {"gpu.vfs_per_gpu": 8, "gpu.compute_partition": "CPX"},
     {"gpu.vfs_per_gpu": 4, "gpu.compute_partition": "SPX"},
     "t.yaml: gpu.compute_partition: SPX with 4 VFs per GPU is not a combination GIM accepts for MI300X"),
    ("compute partition exists on the model", {"gpu.compute_partition": "CPX"}, {"gpu.compute_partition": "TPX"},
     "t.yaml: gpu.compute_partition: TPX is not a compute partition of MI300X (SPX, DPX, QPX, CPX)"),
    ("memory partition exists on the model", {"gpu.memory_partition": "NPS4", "gpu.compute_partition": "CPX"},
     {"gpu.memory_partition": "NPS2"},
     "t.yaml: gpu.memory_partition: NPS2 is not a memory partition of MI300X (NPS1, NPS4)"),
    ("combinations AMD rejects are refused", {"gpu.model": "MI325X", "gpu.vfs_per_gpu": 1},
     {"gpu.model": "MI325X", "gpu.vfs_per_gpu": 4},
     "t.yaml: gpu.vfs_per_gpu: 4 VFs per GPU (QPX/NPS1) is unsupported for MI325X in AMD's support matrix"),
    ("passthrough sets no VFs", {"gpu.mode": "passthrough", "gpu.vfs_per_gpu": DROP},
     {"gpu.mode": "passthrough"},
     "t.yaml: gpu.vfs_per_gpu: mode passthrough assigns whole GPUs without GIM, so vfs_per_gpu cannot be set"),
    ("passthrough sets no partitions", {"gpu.mode": "passthrough", "gpu.vfs_per_gpu": DROP},
     {"gpu.mode": "passthrough", "gpu.vfs_per_gpu": DROP, "gpu.memory_partition": "NPS4"},
     "t.yaml: gpu.memory_partition: mode passthrough assigns whole GPUs without GIM, so memory_partition cannot"),
    ("esxi only with passthrough", {"hypervisor": "esxi", "gpu.mode": "passthrough", "gpu.vfs_per_gpu": DROP},
     {"hypervisor": "esxi"},
     "t.yaml: hypervisor: esxi takes GPUs only whole (gpu.mode: passthrough); GIM SR-IOV is Linux/KVM only"),
    ("mode and hypervisor supported for the model",
     {"gpu.model": "MI325X", "gpu.mode": "passthrough", "gpu.vfs_per_gpu": DROP},
     {"gpu.model": "MI325X", "gpu.mode": "passthrough", "gpu.vfs_per_gpu": DROP, "hypervisor": "esxi"},
     "t.yaml: gpu.mode: passthrough on esxi is not supported for MI325X: not known to work"),
    ("vfs_per_vm divides the VFs of a GPU", {"gpu.vfs_per_gpu": 4, "vms.vfs_per_vm": 2},
     {"gpu.vfs_per_gpu": 4, "vms.vfs_per_vm": 3},
     "t.yaml: vms.vfs_per_vm: 3 VFs per VM does not split 4 VFs per GPU evenly; use one of 1, 2, 4 or a multiple"),
    ("vfs_per_vm may span whole GPUs", {"gpu.vfs_per_gpu": 4, "vms.vfs_per_vm": 8},
     {"gpu.vfs_per_gpu": 4, "vms.vfs_per_vm": 6}, "t.yaml: vms.vfs_per_vm: 6 VFs per VM does not split 4 VFs"),
    ("a fixed GPU count splits into VMs", {"gpu.select": {"count": 4}, "vms.vfs_per_vm": 2},
     {"gpu.select": {"count": 3}, "vms.vfs_per_vm": 2},
     "t.yaml: vms.vfs_per_vm: 3 VFs (3 GPUs selected) do not split into VMs of 2"),
    ("one way to select GPUs", {"gpu.select": {"count": 2, "numa_nodes": [0]}},
     {"gpu.select": {"all": True, "count": 2}},
     "t.yaml: gpu.select: choose one way to select GPUs, not all and count"),
    ("all: false selects nothing", {"gpu.select": {"all": True}}, {"gpu.select": {"all": False}},
     "t.yaml: gpu.select.all: all: false selects nothing"),
    ("addresses are PCI addresses", {"gpu.select": {"addresses": ["0000:85:00.0", "c5:00.0"]}},
     {"gpu.select": {"addresses": ["0000:85:00.0", "0000:85:00.8"]}},
     "t.yaml: gpu.select.addresses[1]: not a PCI address: '0000:85:00.8'; use domain:bus:device.function"),
    ("addresses are listed once", {"gpu.select": {"addresses": ["85:00.0"]}},
     {"gpu.select": {"addresses": ["85:00.0", "0000:85:00.0"]}},
     "t.yaml: gpu.select.addresses: listed more than once: 0000:85:00.0"),
    ("NUMA nodes are listed once", {"gpu.select": {"numa_nodes": [0, 1]}}, {"gpu.select": {"numa_nodes": [1, 1]}},
     "t.yaml: gpu.select.numa_nodes: listed more than once: 1"),
    ("assign lists each address once", {"vms.assign": {"a": ["85:02.0"], "b": ["85:02.1"]}},
     {"vms.assign": {"a": ["85:02.0"], "b": ["0000:85:02.0"]}},
     "t.yaml: vms.assign.b: 0000:85:02.0 is already assigned to a"),
    ("assign excludes name_pattern", {"vms.assign": {"a": ["85:02.0"]}},
     {"vms.assign": {"a": ["85:02.0"]}, "vms.name_pattern": "x{index}"},
     "t.yaml: vms.name_pattern: name_pattern cannot be combined with assign"),
    ("assign gives each VM an address", {"vms.assign": {"a": ["85:02.0"]}}, {"vms.assign": {"a": []}},
     "t.yaml: vms.assign.a: a VM needs at least one address"),
    ("VM names are safe", {"vms.assign": {"vm.a_1-b": ["85:02.0"]}}, {"vms.assign": {"../etc": ["85:02.0"]}},
     "t.yaml: vms.assign.'../etc': VM name '../etc' is not allowed"),
    ("name pattern uses {index} once", {"vms.name_pattern": "vm{index:03d}"}, {"vms.name_pattern": "vm"},
     "t.yaml: vms.name_pattern: name pattern 'vm' must contain {index} exactly once"),
    ("name pattern reaches no attributes", {"vms.name_pattern": "vm-{index:d}"},
     {"vms.name_pattern": "vm-{index.__class__}"}, "t.yaml: vms.name_pattern: name pattern 'vm-{index.__class__}'"),
    ("name pattern has an integer format", {"vms.name_pattern": "vm-{index}"}, {"vms.name_pattern": "vm-{index!r}"},
     "t.yaml: vms.name_pattern: name pattern 'vm-{index!r}': only {index}, {index:d} or {index:0Nd} are allowed"),
    ("name pattern makes safe names", {"vms.name_pattern": "gpu_vm.{index}"},
     {"vms.name_pattern": "vm;reboot-{index}"}, "t.yaml: vms.name_pattern: VM name from the pattern 'vm;reboot-0'"),
    ("profile name is safe", {"name": "my-Profile_2.0"}, {"name": "x;rm -rf /"},
     "t.yaml: name: profile name 'x;rm -rf /' is not allowed"),
    ("description is one line", {"description": "one line"}, {"description": "two\nlines"},
     "t.yaml: description: the description must be one line of text without control characters"),
    ("description has no U+2028", {"description": "caf\u00e9 \u65e5\u672c"}, {"description": "two\u2028lines"},
     "t.yaml: description: the description must be one line of text without control characters"),
    ("description has no U+2029", {"description": "caf\u00e9 \u65e5\u672c"}, {"description": "two\u2029lines"},
     "t.yaml: description: the description must be one line of text without control characters"),
    ("description has no U+0085", {"description": "caf\u00e9 \u65e5\u672c"}, {"description": "two\x85lines"},
     "t.yaml: description: the description must be one line of text without control characters"),
    ("description has no C1 CSI", {"description": "caf\u00e9 \u65e5\u672c"}, {"description": "two\x9blines"},
     "t.yaml: description: the description must be one line of text without control characters"),
    ("guest OS from the list", {"guest.os": "rocky-9"}, {"guest.os": "windows-11"},
     "t.yaml: guest.os: should be 'ubuntu-24.04', 'ubuntu-22.04', 'rhel-9.6', 'rhel-9.4' or 'rocky-9'"),
    ("ROCm 7.0", {"guest.rocm": "7.0.1"}, {"guest.rocm": "6.4"},
     "t.yaml: guest.rocm: ROCm version '6.4' is not supported; use 7.0"),
    ("ROCm version quoted", {"guest.rocm": "7.0.x"}, {"guest.rocm": 7.0},
     "t.yaml: guest.rocm: write the ROCm version as a quoted string, e.g. \"7.0\" (YAML reads 7.0 as a number)"),
    ("amdgpu driver 30.10", {"guest.amdgpu_driver": "30.10.1"}, {"guest.amdgpu_driver": "30.20"},
     "t.yaml: guest.amdgpu_driver: amdgpu driver version '30.20' is not supported; use 30.10.x"),
    ("tolerance is a fraction", {"validation.tolerance": 0.8}, {"validation.tolerance": 1.5},
     "t.yaml: validation.tolerance: should be less than or equal to 1 (got 1.5)"),
    ("FP8 threshold below the partition's peak", {"gpu.vfs_per_gpu": 4, "validation.fp8_tflops_min": 500},
     {"gpu.vfs_per_gpu": 4, "validation.fp8_tflops_min": 1000},
     "t.yaml: validation.fp8_tflops_min: 1000 TFLOPS can never pass: MI300X peak dense FP8 is 653.725 TFLOPS per "
     "QPX partition"),
    ("HBM threshold below the GPU's bandwidth", {"validation.hbm_bandwidth_gbps_min": 3000},
     {"validation.hbm_bandwidth_gbps_min": 6000},
     "t.yaml: validation.hbm_bandwidth_gbps_min: 6000 GB/s can never pass: MI300X peak HBM bandwidth is 5300 GB/s"),
    ("compute units match the partition", {"gpu.vfs_per_gpu": 8, "validation.compute_units": 38},
     {"gpu.vfs_per_gpu": 8, "validation.compute_units": 76},
     "t.yaml: validation.compute_units: 76 can never pass: each function of this profile has 38 compute units"),
    ("format version v1", {"version": "v1"}, {"version": "v2"},
     "t.yaml: version: 'v2'; this vgpu reads profile format v1 (add 'version: v1')"),
    ("NUMA policy from the list", {"vms.numa_policy": "required"}, {"vms.numa_policy": "strict"},
     "t.yaml: vms.numa_policy: should be 'required', 'preferred' or 'none' (got 'strict')"),
]


@pytest.mark.parametrize("rule,good,bad,message", RULES, ids=[r[0] for r in RULES])
def test_rule_accepts_valid_and_refuses_invalid(rule, good, bad, message):
    assert load(doc(good)).version == "v1"
    assert problem(doc(bad)).startswith(message)


@pytest.mark.parametrize("vfs,compute,memory,expected", [
    (1, None, None, (C.SPX, M.NPS1)), (2, None, None, (C.DPX, M.NPS1)), (4, None, None, (C.QPX, M.NPS1)),
    (8, None, None, (C.CPX, M.NPS4)), (1, "CPX", None, (C.CPX, M.NPS1)), (1, None, "NPS4", (C.CPX, M.NPS4)),
    (4, None, "NPS4", (C.QPX, M.NPS4)), (None, None, None, (C.SPX, M.NPS1))])
def test_partitions_default_from_the_catalog_combination(vfs, compute, memory, expected):
    changes = {"gpu.vfs_per_gpu": DROP if vfs is None else vfs}
    changes.update({k: v for k, v in (("gpu.compute_partition", compute), ("gpu.memory_partition", memory)) if v})
    gpu = load(doc(changes)).gpu
    assert (gpu.compute_partition, gpu.memory_partition) == expected
    assert gpu.vfs_per_gpu == (vfs or 1)


def test_passthrough_profile_has_no_vfs_or_partitions():
    profile = load(doc({"gpu.mode": "passthrough", "gpu.vfs_per_gpu": DROP}))
    assert profile.gpu.mode is Mode.PASSTHROUGH and profile.combo is None
    assert (profile.gpu.vfs_per_gpu, profile.gpu.compute_partition, profile.gpu.memory_partition) == (None,) * 3


@pytest.mark.parametrize("changes,level,fragment", [
    ({}, Support.SUPPORTED, None),
    ({"gpu.vfs_per_gpu": 4}, Support.UNVALIDATED, "accepted by GIM but not in AMD's validated matrix"),
    ({"gpu.vfs_per_gpu": 2}, Support.UNVALIDATED, "the standard firmware reports 1"),
    ({"gpu.vfs_per_gpu": 8}, Support.PREVIEW, "needs AMD's multi-VF firmware bundle"),
    ({"gpu.mode": "passthrough", "gpu.vfs_per_gpu": DROP}, Support.UNVALIDATED, "issue #25"),
    ({"gpu.model": "MI355X"}, Support.SUPPORTED, "needs GIM 8.5 or later"),
])
def test_warnings_follow_support_levels(changes, level, fragment):
    profile = load(doc(changes))
    assert profile.support is level
    if fragment is None:
        assert profile.warnings() == []
    else:
        assert any(fragment in w for w in profile.warnings()), profile.warnings()


def test_eight_vfs_warn_preview_and_firmware():
    warnings = load(doc({"gpu.vfs_per_gpu": 8})).warnings()
    assert warnings[0] == "8 VFs per GPU (CPX/NPS4) on MI300X is a preview in AMD's support matrix"
    assert "multi-VF firmware" in warnings[1]


def test_select_shorthand_all_and_default_are_all():
    assert load(doc({"gpu.select": "all"})).gpu.select.kind == "all"
    assert load(doc()).gpu.select.all is True


def test_addresses_are_parsed_once_into_values():
    profile = load(doc({"gpu.select": {"addresses": ["c5:00.0", "0000:85:00.0"]}}))
    assert profile.gpu.select.addresses == [PciAddress.parse("0000:c5:00.0"), PciAddress.parse("0000:85:00.0")]
    assert profile.to_dict()["gpu"]["select"]["addresses"] == ["0000:c5:00.0", "0000:85:00.0"]


def test_vm_defaults_are_filled_and_assign_keeps_none():
    vms = load(doc()).vms
    assert (vms.vfs_per_vm, vms.name_pattern, vms.numa_policy.value) == (1, "gpu-vm-{index:02d}", "preferred")
    assigned = load(doc({"vms.assign": {"a": ["85:02.0"]}})).vms
    assert assigned.vfs_per_vm is None and assigned.name_pattern is None


def test_threshold_overrides_use_the_validation_metric_names():
    profile = load(doc({"validation.fp8_tflops_min": 900, "validation.tolerance": 0.6,
                        "validation.hbm_bandwidth_gbps_min": 2000}))
    assert profile.validation.threshold_overrides() == {"fp8_tflops": 900.0, "hbm_gbps": 2000.0, "tolerance": 0.6}


def test_profile_is_immutable_and_knows_its_catalog_model():
    profile = load(doc({"hypervisor": "kvm"}))
    assert profile.gpu.catalog_model.name == "MI300X" and profile.hypervisor is Hypervisor.KVM
    with pytest.raises(Exception, match="frozen"):
        profile.name = "other"


def test_a_test_catalog_can_stand_in_for_the_default():
    from dataclasses import replace

    from vgpu.catalog import DEFAULT, Catalog
    from vgpu.profiles import load_profile_text
    standin = replace(DEFAULT.by_name("MI300X"), name="NVME-STANDIN", pf_ids=(0x0010,), vf_ids=())
    text = "version: v1\nname: t\ngpu: {model: nvme-standin, vfs_per_gpu: 2}\n"
    profile = load_profile_text(text, catalog=Catalog(DEFAULT.models + (standin,)))
    assert profile.gpu.catalog_model is standin
