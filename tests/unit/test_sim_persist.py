"""Persistence, crash repair, cross-process use and fault injection of the simulated host."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from simhelp import bind_vfio, dev, driver, fresh_host, group, read, snapshot, vfs

from vgpu.errors import HostError
from vgpu.sim import SimHost
from vgpu.sim.tree import Tree

PF, VF = "0000:85:00.0", "0000:85:02.0"
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def host(tmp_path):
    return fresh_host(tmp_path)


def run_python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=600)


def test_a_change_made_by_another_process_is_seen_by_this_one(host):
    proc = run_python(f"from vgpu.sim import SimHost\n"
                      f"h = SimHost.open({str(host.state_dir)!r})\n"
                      f"h.kernel.unload_module('gim')\n"
                      f"h.kernel.load_module('gim', {{'vf_num': '2,2,2,2,2,2,2,2'}})\n")
    assert proc.returncode == 0, proc.stderr
    assert len(vfs(host, PF)) == 2
    bind_vfio(host, vfs(host, PF)[1])  # this process's kernel works on the new state
    assert driver(host, "0000:85:02.1") == "vfio-pci"
    assert SimHost.open(host.state_dir).state.functions["0000:85:02.1"].driver == "vfio-pci"


def test_incremental_rendering_equals_a_full_render_of_the_same_state(host, tmp_path):
    host.kernel.unload_module("gim")
    host.kernel.load_module("gim", {"vf_num": "8,4,2,1,8,4,2,1"})
    bind_vfio(host, VF)
    host.add_holder(group(host, VF), "qemu")
    host.kernel.write_attr(dev(host, "0000:06:00.0") / "sriov_numvfs", "0")
    host.kernel.write_attr(dev(host, "0000:05:00.0") / "memory_partition_mode", "NPS4")
    host.kernel.write_attr(host.sys_root / "bus/pci/drivers/vfio-pci/new_id", "15b3 1021")
    incremental = snapshot(host.root)
    Tree(host.root).render_all(host.state)
    assert snapshot(host.root) == incremental


def test_open_repairs_a_tree_that_a_crash_left_behind_the_state(host):
    shutil.rmtree(dev(host, VF).resolve())
    (host.state_dir / "tree-generation").write_text("-1")
    SimHost.open(host.state_dir)
    assert read(dev(host, VF) / "device") == "0x74b5"


def test_a_state_saved_before_the_tree_was_rendered_wins_after_a_crash(host):
    state = json.loads((host.state_dir / "state.json").read_text())
    state["functions"][VF]["driver_override"] = "vfio-pci"
    state["generation"] += 1  # as if killed between saving the state and rendering the tree
    (host.state_dir / "state.json").write_text(json.dumps(state))
    SimHost.open(host.state_dir)
    assert read(dev(host, VF) / "driver_override") == "vfio-pci"


def test_concurrent_operations_never_interleave(host):
    host.kernel.unload_module("gim")
    host.kernel.load_module("gim", {"vf_num": "8,8,8,8,8,8,8,8"})
    targets = [vfs(host, pf) for pf in ("0000:05:00.0", PF)]
    errors = []

    def worker(addresses):
        try:
            other = SimHost.open(host.state_dir)
            for address in addresses[:4]:
                bind_vfio(other, address)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)
    threads = [threading.Thread(target=worker, args=(t,)) for t in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    bound = [a for t in targets for a in t[:4] if driver(host, a) == "vfio-pci"]
    assert len(bound) == 8
    assert all(host.state.functions[a].driver == "vfio-pci" for a in bound)


def test_fail_next_fails_the_matching_operation_and_changes_nothing(host):
    host.kernel.fail_next("write_attr:*/drivers_probe", "simulated probe failure")
    host.kernel.write_attr(dev(host, VF) / "driver_override", "vfio-pci")  # does not match: runs
    before = snapshot(host.root)
    with pytest.raises(HostError, match="simulated probe failure"):
        host.kernel.write_attr(host.sys_root / "bus/pci/drivers_probe", VF)
    assert snapshot(host.root) == before
    host.kernel.write_attr(host.sys_root / "bus/pci/drivers_probe", VF)  # the fault is spent
    assert driver(host, VF) == "vfio-pci"


def test_fail_next_can_skip_matches_and_match_on_the_written_value(host):
    host.kernel.fail_next("write_attr:*/driver_override=vfio-pci", skip=1)
    host.kernel.write_attr(dev(host, VF) / "driver_override", "amdgpu")  # value does not match
    host.kernel.write_attr(dev(host, VF) / "driver_override", "vfio-pci")  # first match: skipped
    with pytest.raises(HostError, match="injected fault"):
        host.kernel.write_attr(dev(host, "0000:a6:02.0") / "driver_override", "vfio-pci")
    assert read(dev(host, "0000:a6:02.0") / "driver_override") == "(null)"


def test_fail_next_reaches_module_operations_in_another_process(host):
    host.kernel.fail_next("unload_module:gim", "gim busy")
    proc = run_python(f"from vgpu.sim import SimHost\n"
                      f"SimHost.open({str(host.state_dir)!r}).kernel.unload_module('gim')\n")
    assert proc.returncode != 0 and "gim busy" in proc.stderr
    assert driver(host, PF) == "gim"
    host.kernel.unload_module("gim")
    assert driver(host, PF) is None


def test_fail_next_with_kill_applies_the_operation_then_kills_the_process(host):
    host.kernel.fail_next("load_module:gim", kill=True)
    proc = run_python(f"from vgpu.sim import SimHost\n"
                      f"h = SimHost.open({str(host.state_dir)!r})\n"
                      f"h.kernel.unload_module('gim')\n"
                      f"h.kernel.load_module('gim', {{'vf_num': '4,4,4,4,4,4,4,4'}})\n"
                      f"print('survived')\n")
    assert proc.returncode == -9 and "survived" not in proc.stdout
    reopened = SimHost.open(host.state_dir)
    assert len(vfs(reopened, PF)) == 4
    reopened.kernel.clear_faults()


def test_fault_on_settle_is_possible(host):
    host.kernel.fail_next("settle", "udev timed out")
    with pytest.raises(HostError, match="udev timed out"):
        host.kernel.settle(5)
    host.kernel.settle(5)
