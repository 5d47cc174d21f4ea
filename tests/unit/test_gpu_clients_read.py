"""Reading GPU clients from /proc (vgpu/host/holders.py): device nodes, systemd services, DRM node -> GPU."""

from __future__ import annotations

import os
from pathlib import Path

from vgpu.host.holders import clients_for, gpu_clients, service_of
from vgpu.host.paths import HostPaths
from vgpu.model.pci import PciAddress


def proc(root: Path, pid: int, comm: str, targets: list[str], cgroup: str) -> None:
    d = root / "proc" / str(pid)
    (d / "fd").mkdir(parents=True)
    (d / "comm").write_text(comm + "\n")
    (d / "cgroup").write_text(cgroup)
    for i, target in enumerate(targets, 3):
        os.symlink(target, d / "fd" / str(i))


def tree(tmp_path: Path) -> HostPaths:
    (tmp_path / "sys/bus/pci/devices").mkdir(parents=True)
    gpu = tmp_path / "sys/devices/pci0000:00/0000:00:01.1/0000:05:00.0"
    gpu.mkdir(parents=True)
    (tmp_path / "sys/class/drm/renderD128").mkdir(parents=True)
    os.symlink("../../../devices/pci0000:00/0000:00:01.1/0000:05:00.0", tmp_path / "sys/class/drm/renderD128/device")
    proc(tmp_path, 900, "gpuagent", ["/dev/gim-smi0", "/dev/null"], "0::/system.slice/gpuagent-sriov.service\n")
    proc(tmp_path, 901, "python3", ["/dev/kfd", "/dev/dri/renderD128"], "0::/user.slice/user-1000.slice/session-4.scope\n")
    proc(tmp_path, 902, "qemu-system-x86", ["/dev/vfio/17"], "0::/machine.slice/machine-qemu.scope\n")
    proc(tmp_path, 903, "exporter", ["/dev/gim-smi0"],
         "12:pids:/system.slice/x.service\n1:name=systemd:/system.slice/amd-metrics-exporter-sriov.service\n")
    return HostPaths.under(tmp_path)


def test_clients_are_the_processes_with_gpu_nodes_open_with_their_services(tmp_path):
    clients = gpu_clients(tree(tmp_path))
    assert [(c.pid, c.comm, c.unit, c.devices) for c in clients] == [
        (900, "gpuagent", "gpuagent-sriov.service", ("/dev/gim-smi0",)),
        (901, "python3", None, ("/dev/dri/renderD128", "/dev/kfd")),
        (903, "exporter", "amd-metrics-exporter-sriov.service", ("/dev/gim-smi0",))]


def test_a_step_is_disrupted_by_the_clients_of_the_gpus_it_touches(tmp_path):
    paths = tree(tmp_path)
    clients = gpu_clients(paths)
    wide = clients_for(clients, paths, [], host_wide=True)
    assert [c.pid for c in wide] == [900, 901, 903]
    # rebinding 05:00.0 alone: only who holds its render node
    assert [c.pid for c in clients_for(clients, paths, [PciAddress.parse("0000:05:00.0")], False)] == [901]
    assert clients_for(clients, paths, [PciAddress.parse("0000:85:00.0")], False) == []


def test_service_names_come_only_from_system_services(tmp_path):
    paths = tree(tmp_path)
    assert service_of(paths, "901") is None  # a session scope: nothing vgpu can restart
    assert service_of(paths, "902") is None
    (tmp_path / "proc/901/cgroup").write_text("0::/system.slice/../../etc/evil;rm.service\n")
    assert service_of(paths, "901") is None
    assert service_of(paths, "4242") is None  # gone


def test_no_proc_means_no_clients(tmp_path):
    (tmp_path / "sys/bus/pci/devices").mkdir(parents=True)
    assert gpu_clients(HostPaths(tmp_path / "sys")) == []
