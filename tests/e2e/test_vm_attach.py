"""VM attach: provision cold-plugs each VM's functions into VMs that exist (libvirt's test driver),
rolls that back with everything else, and release takes them back out."""

import pytest

from vgpu.errors import ApplyError
from vgpu.hypervisor.domain import DomainXml
from vgpu.planner import Refusal
from vgpu.profiles import load_profile
from vgpu.provision import plan_profile, provision, release

from conftest import hypervisor_of, inventory, run_cli, target_of


def _hostdevs(hv, name):
    return next(d for d in hv.domains() if d.name == name).hostdevs


def test_provision_attaches_each_defined_vm_its_vfs_and_replans_to_zero(sim):
    host = sim()
    hv = hypervisor_of(host)
    for name in ("gpu-vm-00", "gpu-vm-05", "gpu-vm-31"):
        hv.define_domain(name, running=False)
    target = target_of(host)
    profile = load_profile("mi300x-4vf")
    result = plan_profile(target, profile)
    attach = [s for s in result.plan.steps if s.kind == "attach-functions"]
    assert [s.vm for s in attach] == ["gpu-vm-00", "gpu-vm-05", "gpu-vm-31"]
    assert any("29 VM(s) of the assignment are not defined in libvirt" in w for w in result.warnings)
    provision(target, profile)
    vfs = [vf.address for g in inventory(host).gpus for vf in g.vfs]
    assert _hostdevs(hv, "gpu-vm-00") == (vfs[0],)
    assert _hostdevs(hv, "gpu-vm-05") == (vfs[5],)
    assert _hostdevs(hv, "gpu-vm-31") == (vfs[31],)
    xml = DomainXml.parse(hv.definition("gpu-vm-31"))
    assert xml.numa_nodes() == {inventory(host).gpus[7].numa_node}  # pinned to its GPU's node
    assert plan_profile(target, profile).plan.in_sync


def test_running_vm_is_not_hot_plugged_and_keeps_the_plan_pending(sim):
    host = sim()
    hv = hypervisor_of(host)
    hv.define_domain("gpu-vm-00", running=True)
    result = plan_profile(target_of(host), load_profile("mi300x-4vf"))
    assert not [s for s in result.plan.steps if s.kind == "attach-functions"]
    assert [p for p in result.plan.pending if p.startswith("shut down VM gpu-vm-00 (it is running")]
    assert not result.plan.in_sync


def test_function_already_in_another_vms_configuration_is_refused(sim):
    host = sim()
    provision(target_of(host), load_profile("mi300x-4vf"))
    hv = hypervisor_of(host)
    vf = inventory(host).gpus[0].vfs[1].address  # gpu-vm-01's by the pattern
    hv.define_domain("legacy-vm", [vf], running=False)
    hv.define_domain("gpu-vm-01", running=False)
    with pytest.raises(Refusal, match="VM legacy-vm's configuration already has it"):
        plan_profile(target_of(host), load_profile("mi300x-4vf"))


def test_failed_attach_rolls_back_the_vm_and_the_host(sim):
    host = sim()
    hv = hypervisor_of(host)
    hv.define_domain("gpu-vm-00", running=False)
    hv.define_domain("gpu-vm-01", running=False, machine="pc")  # i440fx: attach refuses it
    before, xml_00 = inventory(host), hv.definition("gpu-vm-00")
    with pytest.raises(ApplyError, match="gpu-vm-01"):
        provision(target_of(host), load_profile("mi300x-4vf"))
    assert inventory(host).gpus == before.gpus
    assert hv.definition("gpu-vm-00") == xml_00  # attached, then put back exactly
    assert _hostdevs(hv, "gpu-vm-01") == ()


def test_release_detaches_what_vgpu_attached_and_leaves_the_rest(sim):
    host = sim()
    hv = hypervisor_of(host)
    hv.define_domain("gpu-vm-00", running=False)
    target = target_of(host)
    provision(target, load_profile("mi300x-4vf"))
    other = inventory(host).gpus[7].vfs[3].address
    hv.define_domain("hand-made", [other], running=False)  # attached by hand, not by vgpu
    assert _hostdevs(hv, "gpu-vm-00")
    run_cli("release", "--yes", "--simulate", "--sim-dir", str(host.state_dir), sim_dir=host.state_dir, check_rc=0)
    assert _hostdevs(hv, "gpu-vm-00") == ()
    assert _hostdevs(hv, "hand-made") == (other,)
    assert release(target).outcome is None


def test_status_reports_a_vm_whose_functions_were_detached_by_hand(sim):
    import json
    host = sim()
    hv = hypervisor_of(host)
    hv.define_domain("gpu-vm-02", running=False)
    provision(target_of(host), load_profile("mi300x-4vf"))
    args = ("status", "--json", "--simulate", "--sim-dir", str(host.state_dir))
    ok = json.loads(run_cli(*args, sim_dir=host.state_dir, check_rc=0).stdout)
    assert [i for i in ok["items"] if i["subject"] == "VM gpu-vm-02"][0]["ok"]
    hv.detach("gpu-vm-02", list(_hostdevs(hv, "gpu-vm-02")))
    drift = json.loads(run_cli(*args, sim_dir=host.state_dir, check_rc=1).stdout)
    item = [i for i in drift["items"] if i["subject"] == "VM gpu-vm-02"][0]
    assert item["actual"] == "none" and not item["ok"]


def test_no_vm_defined_means_vms_are_managed_elsewhere_and_no_warning(sim):
    result = plan_profile(target_of(sim()), load_profile("mi300x-4vf"))
    assert not [w for w in result.warnings if "not defined in libvirt" in w]
    assert len(result.plan.vms) == 32  # the assignment is still shown


@pytest.mark.parametrize("names, message", [(["bad name;"], "is not allowed"),
                                            (["gpu-vm-00", "gpu-vm-00"], "already defined")])
def test_sim_vm_refuses_unsafe_or_duplicate_names(sim, names, message):
    host = sim()
    if names[0] == names[-1] and len(names) > 1:
        run_cli("sim", "vm", names[0], "--sim-dir", str(host.state_dir), sim_dir=host.state_dir, check_rc=0)
        names = names[1:]
    proc = run_cli("sim", "vm", *names, "--sim-dir", str(host.state_dir), sim_dir=host.state_dir, check_rc=5)
    assert message in proc.stderr
