"""SimHypervisor: libvirt's test driver with its state persisted in a state dir."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypervisor_helpers import GIB, VF0, VF1, VF2, virt_xml_validate

from vgpu.errors import InputError, InUseError
from vgpu.hypervisor import Hypervisor, open_hypervisor
from vgpu.hypervisor.sim import SimHypervisor

REPO = Path(__file__).resolve().parents[2]


def by_name(hv) -> dict:
    return {d.name: d for d in hv.domains()}


def test_a_simulated_host_brings_its_own_hypervisor(tmp_path):
    from vgpu.sim import SimHost
    from vgpu.vms import sim_hypervisor_dir
    host = SimHost.create(tmp_path / "sim", machine="8xmi300x")
    hv = host.target().open_hypervisor()  # chosen where the host is opened, not by the libvirt factory
    assert isinstance(hv, SimHypervisor) and isinstance(hv, Hypervisor)
    assert hv.dir == sim_hypervisor_dir(host.root).resolve() / "hypervisor" and hv.domains() == []


def test_the_libvirt_factory_knows_no_simulator():
    import inspect
    assert list(inspect.signature(open_hypervisor).parameters) == ["uri"]


def test_domains_persist_across_two_instances(tmp_path):
    first = SimHypervisor(tmp_path)
    first.define_domain("vm-a", [VF0, VF1], running=True)
    first.define_domain("vm-b", [VF2], running=False)
    second = SimHypervisor(tmp_path)
    found = {n: (d.state, d.hostdevs) for n, d in by_name(second).items()}
    assert found == {"vm-a": ("running", (VF0, VF1)), "vm-b": ("shutoff", (VF2,))}
    assert [d.name for d in second.holders([VF1])[VF1]] == ["vm-a"]


def test_a_change_in_one_instance_reaches_an_already_open_one(tmp_path):
    first, second = SimHypervisor(tmp_path), SimHypervisor(tmp_path)
    first.define_domain("vm-a", [VF0], running=False)
    assert by_name(second)["vm-a"].state == "shutoff"
    second.set_state("vm-a", "paused")
    assert by_name(first)["vm-a"].state == "paused" and by_name(first)["vm-a"].active


def test_attach_in_one_process_is_seen_by_another(tmp_path):
    SimHypervisor(tmp_path).define_domain("vm-x", [], running=False)
    script = ("import sys; from pathlib import Path; from vgpu.hypervisor.sim import SimHypervisor;"
              "from vgpu.model.pci import PciAddress as P;"
              "SimHypervisor(Path(sys.argv[1])).attach('vm-x', [P.parse('0000:85:02.0')],"
              " numa_node=0, bar64_bytes=64 << 30)")
    subprocess.run([sys.executable, "-c", script, str(tmp_path)], check=True, cwd=REPO, timeout=600)
    hv = SimHypervisor(tmp_path)
    assert by_name(hv)["vm-x"].hostdevs == (VF0,)
    saved = hv._persistent_xml(hv._lookup("vm-x"))  # the test driver drops qemu:commandline; files keep it
    assert "name=opt/ovmf/X-PciMmio64Mb,string=131072" in saved


def test_saved_domain_xml_passes_libvirts_schema(tmp_path):
    hv = SimHypervisor(tmp_path)
    hv.define_domain("vm-v", [], running=False)
    hv.attach("vm-v", [VF0, VF1], numa_node=1, bar64_bytes=128 * GIB)
    saved = hv._persistent_xml(hv._lookup("vm-v"))
    result = virt_xml_validate(tmp_path, saved)
    assert result.returncode == 0, result.stderr


def test_attach_refuses_a_running_simulated_vm(tmp_path):
    hv = SimHypervisor(tmp_path)
    hv.define_domain("vm-r", [VF0], running=True)
    with pytest.raises(InUseError, match="while it is running"):
        hv.attach("vm-r", [VF1], numa_node=None, bar64_bytes=GIB)


def test_stopping_and_undefining_persist(tmp_path):
    hv = SimHypervisor(tmp_path)
    hv.define_domain("vm-s", [VF0])
    hv.set_state("vm-s", "shutoff")
    assert by_name(SimHypervisor(tmp_path))["vm-s"].state == "shutoff"
    hv.undefine("vm-s")
    assert SimHypervisor(tmp_path).domains() == [] and not list((hv.dir / "domains").iterdir())


def test_state_files_are_written_whole_and_world_readable(tmp_path):
    hv = SimHypervisor(tmp_path)
    hv.define_domain("vm-f", [VF0])
    names = sorted(p.name for p in hv.dir.rglob("*") if p.is_file())
    assert not [n for n in names if n.startswith(".") and n != ".lock"]  # no temp files left behind
    for path in (hv.dir / "states.json", next((hv.dir / "domains").iterdir())):
        assert os.stat(path).st_mode & 0o777 == 0o644
    assert json.loads((hv.dir / "states.json").read_text())["states"] == {by_name(hv)["vm-f"].uuid: "running"}


def test_corrupt_state_is_a_clear_error(tmp_path):
    SimHypervisor(tmp_path)
    (tmp_path / "hypervisor" / "states.json").write_text("{not json")
    with pytest.raises(InputError, match=r"simulated hypervisor state .*states\.json is corrupt"):
        SimHypervisor(tmp_path)


def test_unknown_state_is_refused(tmp_path):
    hv = SimHypervisor(tmp_path)
    hv.define_domain("vm-u", [])
    with pytest.raises(InputError, match="must be one of running, paused, shutoff, not 'crashed'"):
        hv.set_state("vm-u", "crashed")


def test_define_domain_can_make_the_vms_attach_refuses(tmp_path):
    hv = SimHypervisor(tmp_path)
    info = hv.define_domain("legacy", [], running=False, machine="pc-i440fx-7.2", firmware=None)
    assert info.state == "shutoff" and info.hostdevs == ()
