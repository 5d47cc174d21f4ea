"""Profile.select_gpus and Profile.vm_assignment: what the planner asks a profile about a discovered host."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from profile_helpers import DROP, doc, load

from vgpu.errors import InputError, RefusedError
from vgpu.model.pci import PciAddress


@dataclass(frozen=True)
class Gpu:
    address: PciAddress
    numa_node: int | None
    model: str


@dataclass(frozen=True)
class Fn:
    address: PciAddress
    numa_node: int | None


A = PciAddress.parse
# Like the simulated 8 x MI300X host: four GPUs per socket, listed out of order on purpose.
HOST = [Gpu(A(f"0000:{bus:02x}:00.0"), 0 if bus < 0x80 else 1, "MI300X")
        for bus in (0xf5, 0x05, 0x85, 0x15, 0xe5, 0x75, 0xc5, 0x65)]


def _profile(**changes):
    return load(doc(changes))


def _buses(gpus):
    return [f"{g.address.bus:02x}" for g in gpus]


def test_all_selects_every_gpu_of_the_model_in_address_order():
    mixed = HOST + [Gpu(A("0000:a5:00.0"), 1, "MI325X")]
    assert _buses(_profile().select_gpus(mixed)) == ["05", "15", "65", "75", "85", "c5", "e5", "f5"]


def test_count_takes_the_lowest_addresses():
    assert _buses(_profile(**{"gpu.select": {"count": 3}}).select_gpus(HOST)) == ["05", "15", "65"]


def test_count_refuses_when_the_host_has_too_few():
    with pytest.raises(RefusedError, match=r"^profile t wants 9 MI300X GPUs, but the host has 8$"):
        _profile(**{"gpu.select": {"count": 9}}).select_gpus(HOST)


def test_numa_nodes_select_that_socket():
    assert _buses(_profile(**{"gpu.select": {"numa_nodes": [1]}}).select_gpus(HOST)) == ["85", "c5", "e5", "f5"]


def test_count_within_numa_nodes():
    profile = _profile(**{"gpu.select": {"numa_nodes": [1], "count": 2}})
    assert _buses(profile.select_gpus(HOST)) == ["85", "c5"]
    with pytest.raises(RefusedError, match="wants 5 MI300X GPUs on NUMA node 1, but the host has 4"):
        _profile(**{"gpu.select": {"numa_nodes": [1], "count": 5}}).select_gpus(HOST)


def test_numa_node_without_gpus_is_refused():
    with pytest.raises(RefusedError, match=r"selects NUMA node 3, but no MI300X GPU is there \(its MI300X GPUs "
                                           r"are on nodes 0, 1\)"):
        _profile(**{"gpu.select": {"numa_nodes": [0, 3]}}).select_gpus(HOST)


def test_addresses_select_exactly_those():
    profile = _profile(**{"gpu.select": {"addresses": ["c5:00.0", "0000:05:00.0"]}})
    assert _buses(profile.select_gpus(HOST)) == ["05", "c5"]


def test_address_without_a_gpu_is_refused():
    with pytest.raises(RefusedError, match=r"selects GPU 0000:99:00.0, but the host has no GPU there \(GPUs: "
                                           r"0000:05:00.0, "):
        _profile(**{"gpu.select": {"addresses": ["99:00.0"]}}).select_gpus(HOST)


def test_address_of_another_model_is_refused():
    host = HOST + [Gpu(A("0000:a5:00.0"), 1, "MI325X")]
    with pytest.raises(RefusedError, match="selects GPU 0000:a5:00.0, which is an MI325X, not an MI300X"):
        _profile(**{"gpu.select": {"addresses": ["a5:00.0"]}}).select_gpus(host)


def test_host_without_the_model_is_refused_with_a_census():
    host = [Gpu(A("0000:a5:00.0"), 0, "MI325X"), Gpu(A("0000:b5:00.0"), 0, "MI325X")]
    with pytest.raises(RefusedError, match=r"wants MI300X GPUs, but the host has none \(found: 2 x MI325X\)"):
        _profile().select_gpus(host)


# VM assignment --------------------------------------------------------------------------------------


def _vfs(per_gpu: int, nodes=(0, 0, 1, 1)):
    """VFs at device 2 of each PF's bus, like the public examples (docs/hardware.md §1); PFs listed out of order."""
    out = []
    for bus, node in zip((0x85, 0x05, 0xc5, 0x15), nodes):
        out += [Fn(A(f"0000:{bus:02x}:02.{i}"), node) for i in range(per_gpu)]
    return out


def test_one_vf_per_vm_named_by_the_pattern_in_address_order():
    plan = _profile(**{"gpu.vfs_per_gpu": 2}).vm_assignment(_vfs(2))
    assert list(plan) == [f"gpu-vm-{i:02d}" for i in range(8)]
    assert plan["gpu-vm-00"] == [A("0000:05:02.0")] and plan["gpu-vm-07"] == [A("0000:c5:02.1")]


def test_required_numa_keeps_each_vm_on_one_node():
    profile = _profile(**{"gpu.vfs_per_gpu": 4, "vms.vfs_per_vm": 8, "vms.numa_policy": "required",
                          "vms.name_pattern": "vm{index}"})
    funcs = _vfs(4, nodes=(0, 1, 0, 1))
    plan = profile.vm_assignment(funcs)
    node = {f.address: f.numa_node for f in funcs}
    assert [sorted({node[a] for a in addrs}) for addrs in plan.values()] == [[1], [0]]
    assert plan["vm0"][0] == A("0000:05:02.0")


def test_required_numa_refuses_a_node_that_does_not_split():
    funcs = [Fn(A("0000:05:02.0"), 0), Fn(A("0000:05:02.1"), 1), Fn(A("0000:85:02.0"), 0),
             Fn(A("0000:85:02.1"), 1)]
    profile = _profile(**{"gpu.vfs_per_gpu": 2, "vms.vfs_per_vm": 2, "vms.numa_policy": "required"})
    assert profile.vm_assignment(funcs)["gpu-vm-00"] == [A("0000:05:02.0"), A("0000:85:02.0")]
    with pytest.raises(RefusedError, match="NUMA policy required: NUMA node 0 has 3 VFs, which do not split into "
                                           "VMs of 2"):
        profile.vm_assignment(funcs + [Fn(A("0000:95:02.0"), 0)])


def test_required_numa_refuses_functions_without_a_node():
    profile = _profile(**{"vms.numa_policy": "required"})
    with pytest.raises(RefusedError, match="0000:05:02.0 reports no NUMA node; use numa_policy: preferred"):
        profile.vm_assignment([Fn(A("0000:05:02.0"), -1)])


def test_preferred_numa_mixes_nodes_only_for_leftovers():
    funcs = [Fn(A("0000:05:02.0"), 0), Fn(A("0000:05:02.1"), 0), Fn(A("0000:05:02.2"), 0),
             Fn(A("0000:85:02.0"), 1), Fn(A("0000:85:02.1"), 1), Fn(A("0000:85:02.2"), 1)]
    profile = _profile(**{"gpu.vfs_per_gpu": 2, "vms.vfs_per_vm": 2})
    plan = profile.vm_assignment(funcs)
    assert list(plan.values()) == [[A("0000:05:02.0"), A("0000:05:02.1")], [A("0000:05:02.2"), A("0000:85:02.2")],
                                   [A("0000:85:02.0"), A("0000:85:02.1")]]


def test_no_numa_policy_pairs_in_address_order():
    funcs = [Fn(A("0000:05:02.0"), 0), Fn(A("0000:05:02.1"), 1), Fn(A("0000:85:02.0"), 0),
             Fn(A("0000:85:02.1"), 1)]
    plan = _profile(**{"gpu.vfs_per_gpu": 2, "vms.vfs_per_vm": 2, "vms.numa_policy": "none"}).vm_assignment(funcs)
    assert list(plan.values()) == [[A("0000:05:02.0"), A("0000:05:02.1")], [A("0000:85:02.0"), A("0000:85:02.1")]]


def test_functions_that_do_not_split_are_refused():
    profile = _profile(**{"gpu.vfs_per_gpu": 2, "vms.vfs_per_vm": 2, "vms.numa_policy": "none"})
    with pytest.raises(RefusedError, match=r"profile t: 3 VFs do not split into VMs of 2 \(1 left over\)"):
        profile.vm_assignment(_vfs(2)[:3])


def test_passthrough_assigns_whole_gpus():
    profile = _profile(**{"gpu.mode": "passthrough", "gpu.vfs_per_gpu": DROP, "vms.vfs_per_vm": 2})
    plan = profile.vm_assignment([Fn(g.address, g.numa_node) for g in HOST])
    assert len(plan) == 4 and plan["gpu-vm-00"] == [A("0000:05:00.0"), A("0000:15:00.0")]
    with pytest.raises(RefusedError, match="has no GPUs to assign to VMs"):
        profile.vm_assignment([])


def test_explicit_map_is_returned_as_written():
    profile = _profile(**{"vms.assign": {"train": ["85:02.0", "05:02.0"], "infer": ["c5:02.0"]}})
    plan = profile.vm_assignment(_vfs(1))
    assert plan == {"train": [A("0000:85:02.0"), A("0000:05:02.0")], "infer": [A("0000:c5:02.0")]}


def test_explicit_map_refuses_an_address_the_host_does_not_provide():
    profile = _profile(**{"vms.assign": {"train": ["99:02.0"]}})
    with pytest.raises(RefusedError, match="assigns 0000:99:02.0 to VM train, but it is not one of the 4 VFs"):
        profile.vm_assignment(_vfs(1))


def test_explicit_map_with_required_numa_refuses_a_vm_across_nodes():
    profile = _profile(**{"vms.assign": {"train": ["85:02.0", "c5:02.0"]}, "vms.numa_policy": "required"})
    with pytest.raises(RefusedError, match="VM train gets VFs on NUMA nodes 0, 1; give it VFs from one node"):
        profile.vm_assignment(_vfs(1))


def test_duplicate_function_addresses_are_a_caller_error():
    with pytest.raises(InputError, match="same PCI address twice"):
        _profile().vm_assignment([Fn(A("0000:05:02.0"), 0), Fn(A("0000:05:02.0"), 0)])
