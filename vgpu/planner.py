"""The planner: a pure function from (desired state, discovered host) to a Plan or a refusal.

Nothing here touches the host. ``check`` collects every reason the profile cannot be applied
(one sentence each, docs/hardware.md §3-4 and the catalog); ``make_plan`` compares the desired
state with the inventory and the current config files and emits only the steps that differ, so a
host already in sync plans zero steps.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from vgpu.capability import HostView, Verdict, assess
from vgpu.catalog import DEFAULT, Catalog, ComputePartition, Hypervisor, MemoryPartition, Mode, Support
from vgpu.errors import RefusedError
from vgpu.model.inventory import Gpu, Inventory
from vgpu.model.pci import PciAddress
from vgpu.model.plan import (BindDevice, BindVfs, Disruption, InstallPersistence, Plan, Problem, ReloadGim,
                             SetMemoryPartition, WriteFile)
from vgpu.persist import STATE_RECORD, UNIT_LINK, UNIT_PATH
from vgpu.readiness import UNREADABLE_FIX, UNREADABLE_IDS

GIM_CONFIG = "gim_config"
MODPROBE_CONF = "modprobe.d/vgpu.conf"
MODULES_LOAD = "modules-load.d/vgpu.conf"
VFIO = "vfio-pci"
# vf_num sets the compute partition (docs/hardware.md §3).
COMPUTE_FOR_VF_NUM = {1: "SPX", 2: "DPX", 4: "QPX", 8: "CPX"}


@dataclass(frozen=True)
class Target:
    """What one selected GPU must look like."""

    address: PciAddress
    vf_num: int  # 0 for passthrough
    compute: str | None = None
    memory: str | None = None


@dataclass(frozen=True)
class Desired:
    profile: str
    model: str
    mode: Mode
    targets: tuple[Target, ...]
    record: str  # canonical JSON of the state record (vgpu/persist.py)
    unit: str  # the boot unit's text
    warnings: tuple[str, ...] = ()
    hypervisor: Hypervisor = Hypervisor.KVM
    # each PF's VBIOS/IFWI name from the host amd-smi (vgpu/host/amdsmi.py); empty when it could not be read
    firmware: Mapping[PciAddress, str] = field(default_factory=dict)


class Refusal(RefusedError):
    def __init__(self, profile: str, problems: Sequence[Problem]):
        lines = [f"{p.subject}: {p.message}" for p in problems]
        super().__init__(f"profile {profile} cannot be applied: " + "; ".join(lines),
                         hint=next((p.fix for p in problems if p.fix), None))
        self.profile = profile
        self.problems = tuple(problems)


Holders = Mapping[PciAddress, Sequence[str]]  # function -> "VM name" / "pid N (comm)"


def check(desired: Desired, inv: Inventory, catalog: Catalog = DEFAULT) -> list[Problem]:
    """Every reason ``desired`` cannot be applied to ``inv``; empty when it can."""
    if desired.hypervisor is not Hypervisor.KVM:
        # every other check is about a Linux host's drivers: an ESXi profile gets this one sentence only
        return [Problem("host", f"profile {desired.profile} is for VMware ESXi 8 (hypervisor: {desired.hypervisor.value}), "
                        "but this is a Linux KVM host",
                        "run it against the ESXi host (`vgpu plan --esxi https://HOST ...`, docs/esxi.md), or pick "
                        "a KVM profile here (`vgpu profiles list`), e.g. mi300x-passthrough")]
    problems: list[Problem] = []
    if inv.facts.iommu_groups == 0 and inv.facts.iommu_units == 0:
        problems.append(Problem("host", "the IOMMU is off, so no function can be assigned to a VM",
                                "enable IOMMU/SR-IOV in the BIOS and boot with iommu=pt"))
    gim = inv.facts.modules.get("gim")
    if desired.mode is Mode.SRIOV and (gim is None or not gim.loaded):
        problems.append(Problem("host", "gim (AMD's SR-IOV host driver) is not loaded",
                                "install gim-dkms with playbooks/prepare_kvm_hosts.yml, `modprobe gim`, "
                                "then plan again"))
    if desired.mode is Mode.SRIOV:
        problems += _vf_num_overrides(inv)
        problems += _bystanders(desired, inv, catalog)
        verdict = capability(desired, inv, catalog)
        problems += [Problem(_matrix_subject(desired, verdict), sentence, fix) for sentence, fix in verdict.problems] \
            if verdict else []
    for address in inv.unidentified:  # its model is unknown: any profile might select it
        problems.append(Problem(str(address), UNREADABLE_IDS, UNREADABLE_FIX.replace("ADDRESS", str(address))))
    if not desired.targets:
        problems.append(Problem("host", f"no GPU on this host matches profile {desired.profile}"))
    for target in desired.targets:
        gpu = inv.gpu(target.address)
        if gpu is None:
            problems.append(Problem(str(target.address), "no such GPU on this host", "check `vgpu discover`"))
            continue
        problems += _check_gpu(desired, target, gpu, catalog)
    return problems


def capability(desired: Desired, inv: Inventory, catalog: Catalog = DEFAULT) -> Verdict | None:
    """The capability matrix's verdict on the profile's SR-IOV mode on this host (vgpu/capability.py);
    None when it does not apply (passthrough, no GPU selected, gim not loaded: check refuses those)."""
    gim = inv.facts.modules.get("gim")
    if desired.mode is not Mode.SRIOV or not desired.targets or gim is None or not gim.loaded:
        return None
    target = desired.targets[0]  # a profile gives every GPU it selects the same mode
    compute, memory = effective_partitions(desired.model, target, catalog)
    facts = inv.facts
    return assess(desired.model, target.vf_num, compute, memory,
                  HostView(gim.version, facts.os_id, facts.os_version, facts.kernel_release))


def effective_partitions(model_name: str, target: Target, catalog: Catalog = DEFAULT) -> tuple[str | None, str | None]:
    """The compute and memory partition GIM will use for ``target``: the profile's, else GIM's default for
    the VF count (NPS1, or NPS2 on MI350-series multi-VF: GpuModel.gim_default_memory)."""
    model = catalog.by_name(model_name)
    compute = target.compute or COMPUTE_FOR_VF_NUM.get(target.vf_num)
    memory = target.memory or (model.gim_default_memory(target.vf_num).value if model and target.vf_num else None)
    return compute, memory


def _matrix_subject(desired: Desired, verdict: Verdict) -> str:
    return f"host ({verdict.host.os_label()}, GIM {verdict.host.gim or '?'})" if verdict.host else "host"


def _bystanders(desired: Desired, inv: Inventory, catalog: Catalog) -> list[Problem]:
    """GPUs gim drives that the profile does not select keep their VF count, but gim_config's
    memory_partition_mode is one number for the whole host: refuse when it is invalid for them
    (GIM would silently fall back to NPS1 on those GPUs)."""
    memory = next((t.memory for t in desired.targets if t.memory), None)
    if memory is None:
        return []
    wanted = {t.address for t in desired.targets}
    problems = []
    for gpu in _gim_pfs(inv, desired):
        model = catalog.by_name(gpu.model)
        if gpu.address in wanted or model is None:
            continue
        vf_num = max(gpu.num_vfs or 0, 1)
        compute = COMPUTE_FOR_VF_NUM.get(vf_num)
        if compute and model.combo(vf_num, ComputePartition(compute), MemoryPartition(memory)) is None:
            problems.append(Problem(f"{gpu.address} ({gpu.model})",
                                    f"not selected, but gim drives it with {vf_num} VF(s) ({compute}), and the "
                                    f"host-wide memory_partition_mode {memory} is not valid with that (GIM would "
                                    "silently fall back to NPS1 on it)",
                                    "select this GPU too, or use a memory partition valid for every GPU gim drives"))
    return problems


def _vf_num_overrides(inv: Inventory) -> list[Problem]:
    """vf_num given to gim anywhere but /etc/gim_config wins over the file (docs/hardware.md §3), so the
    reload would create the wrong number of VFs: refuse until the operator removes it."""
    problems = []
    if "vf_num" in inv.facts.modprobe_options.get("gim", {}):
        problems.append(Problem("host", "an `options gim vf_num=...` line in /etc/modprobe.d overrides the VF "
                                "counts vgpu writes to /etc/gim_config",
                                "remove vf_num from that options line (vgpu sets it in /etc/gim_config)"))
    if any(word.startswith("gim.vf_num=") for word in (inv.facts.cmdline or "").split()):
        problems.append(Problem("host", "gim.vf_num= on the kernel command line overrides the VF counts vgpu "
                                "writes to /etc/gim_config",
                                "remove gim.vf_num= from the boot loader's kernel command line and reboot"))
    return problems


def _check_gpu(desired: Desired, target: Target, gpu: Gpu, catalog: Catalog) -> list[Problem]:
    subject = f"{gpu.address} ({gpu.model})"
    if gpu.model != desired.model:
        return [Problem(subject, f"the profile is for {desired.model}, this GPU is an {gpu.model}",
                        "pick a profile for this model (`vgpu profiles list`)")]
    model = catalog.by_name(gpu.model)
    if desired.mode is Mode.PASSTHROUGH:
        if gpu.driver == "gim":
            return [Problem(subject, "gim drives this PF, which the profile wants for whole-GPU passthrough",
                            "unload gim (`vgpu release`, then `modprobe -r gim` and remove it from "
                            "/etc/modules-load.d), or keep this GPU out of gim with gim's enabled_devices module "
                            "parameter (/etc/modprobe.d)")]
        return []
    problems = _single_vf_firmware(subject, target, desired.firmware.get(gpu.address))
    if target.vf_num not in model.gim_vf_counts:
        allowed = ", ".join(str(n) for n in sorted(model.gim_vf_counts)) or "none"
        problems.append(Problem(subject, f"{target.vf_num} VFs per GPU is not allowed (GIM accepts {allowed})"))
    elif gpu.total_vfs is not None and target.vf_num > gpu.total_vfs:
        problems.append(Problem(subject, f"{target.vf_num} VFs exceed this PF's TotalVFs of {gpu.total_vfs}",
                                "more than 1 VF per GPU needs AMD's multi-VF firmware bundle"))
    if target.compute and COMPUTE_FOR_VF_NUM.get(target.vf_num) not in (None, target.compute):
        problems.append(Problem(subject, f"{target.compute} with {target.vf_num} VF(s) needs GIM's "
                                "accelerator_partition_mode, whose numbering vgpu cannot verify yet",
                                f"use {COMPUTE_FOR_VF_NUM[target.vf_num]} with {target.vf_num} VF(s)"))
    compute = ComputePartition(target.compute) if target.compute else None
    memory = MemoryPartition(target.memory) if target.memory else None
    combo = model.combo(target.vf_num, compute, memory)
    if combo is None and target.vf_num in model.gim_vf_counts:
        problems.append(Problem(subject, f"{target.vf_num} VFs with {target.compute}/{target.memory} is not a "
                                "partition GIM accepts (it would silently fall back to NPS1)"))
    elif combo is not None and combo.support is Support.UNSUPPORTED:
        problems.append(Problem(subject, f"{target.vf_num} VFs ({combo.compute.value}/{combo.memory.value}) is "
                                f"not supported on {model.name} by AMD"))
    if gpu.driver not in (None, "gim"):
        problems.append(Problem(subject, f"bound to {gpu.driver}, but SR-IOV needs gim on the PF",
                                "blacklist amdgpu (modprobe.blacklist=amdgpu), reboot, and plan again"))
    return problems


def _single_vf_firmware(subject: str, target: Target, firmware: str | None) -> list[Problem]:
    """A VBIOS/IFWI named ..._1VF is a 1-VF build (docs/hardware.md §9): GIM would refuse more VFs at load."""
    if target.vf_num <= 1 or not firmware or not firmware.strip().upper().endswith("_1VF"):
        return []
    return [Problem(subject, f"its firmware {firmware!r} (amd-smi static --ifwi) is a 1-VF build, so GIM would "
                    f"refuse {target.vf_num} VFs at load",
                    "flash AMD's multi-VF firmware bundle on this GPU, or use a 1-VF profile")]


def make_plan(desired: Desired, inv: Inventory, files: Mapping[str, str | None], holders: Holders,
              catalog: Catalog = DEFAULT, *, vm_steps: Sequence = (), vm_problems: Sequence[Problem] = (),
              vms=(), vms_settled: bool = False) -> Plan:
    """The steps that bring ``inv`` to ``desired``. Raises Refusal with every problem found.
    ``vm_steps``/``vm_problems``: the VM side (vgpu/vms.py), run after the devices are bound and
    before the profile is recorded; ``vms``: the VM assignment the plan shows (None: not predictable);
    ``vms_settled``: every VM of the assignment that exists already has its functions (nothing to attach,
    nothing pending), so a record that differs only in how ``vms`` is written describes the same setup."""
    problems = check(desired, inv, catalog) + list(vm_problems)
    if problems:
        raise Refusal(desired.profile, problems)
    steps = _sriov_steps(desired, inv, files, holders) if desired.mode is Mode.SRIOV else \
        _passthrough_steps(desired, inv, files, holders)
    steps += list(vm_steps)
    steps += _persistence_steps(desired, files, vms_settled and not vm_steps)
    verdict = capability(desired, inv, catalog)
    warnings = desired.warnings + (verdict.warnings if verdict else ())
    return Plan(profile=desired.profile, host=inv.source, steps=tuple(steps), warnings=warnings, vms=vms,
                matrix=verdict.to_dict() if verdict else None)


def _gim_pfs(inv: Inventory, desired: Desired) -> list[Gpu]:
    """The PFs gim drives (or will), in probe order: vf_num has one entry for each."""
    wanted = {t.address for t in desired.targets}
    return [g for g in inv.gpus if g.address in wanted or g.driver == "gim"]


def gim_config_text(pfs: Sequence[Gpu], desired: Desired) -> str:
    """/etc/gim_config: vf_num one value per GPU; memory_partition_mode ONE number for the host.

    GIM's gim_config.c takes a single partition mode for all GPUs (a list is ignored), and a
    vf_num list repeats its last value for later GPUs.
    """
    by_addr = {t.address: t for t in desired.targets}
    vf = [str(by_addr[g.address].vf_num if g.address in by_addr else max(g.num_vfs or 0, 1)) for g in pfs]
    memory = next((effective_partitions(desired.model, t)[1] for t in desired.targets), None) or "NPS1"
    return f"vf_num={','.join(vf)}\nmemory_partition_mode={MemoryPartition(memory).gim_number}\n"


CONFIG_PURPOSE = {
    GIM_CONFIG: "vf_num and memory partition per GPU, read by gim at load",
    MODPROBE_CONF: "keep amdgpu off the PFs; vfio-pci options",
    MODULES_LOAD: "load gim and vfio-pci at boot",
}


def desired_files(desired: Desired, inv: Inventory) -> dict[str, str]:
    """The config files (relative to /etc) the profile needs, with their exact content, in write order.
    The plan writes those that differ; ``status`` reports each one."""
    if desired.mode is Mode.SRIOV:
        return {GIM_CONFIG: gim_config_text(_gim_pfs(inv, desired), desired), MODPROBE_CONF: modprobe_text(desired),
                MODULES_LOAD: "gim\nvfio-pci\n"}
    return {MODPROBE_CONF: modprobe_text(desired), MODULES_LOAD: "vfio-pci\n"}


def _file_steps(desired: Desired, inv: Inventory, files) -> list:
    why = dict(CONFIG_PURPOSE)
    if desired.mode is Mode.PASSTHROUGH:
        why[MODULES_LOAD] = "load vfio-pci at boot"
    return [WriteFile(path, content, why=why[path]) for path, content in desired_files(desired, inv).items()
            if files.get(path) != content]


def _sriov_steps(desired: Desired, inv: Inventory, files, holders: Holders) -> list:
    pfs = _gim_pfs(inv, desired)
    config = gim_config_text(pfs, desired)
    steps: list = _file_steps(desired, inv, files)
    reload = _needs_reload(desired, inv)
    if reload:
        every_vf = tuple(vf.address for g in inv.gpus for vf in g.vfs)
        steps.append(ReloadGim(vf_num=tuple(int(v) for v in config.split("\n")[0][7:].split(",")),
                               pfs=tuple(g.address for g in pfs),
                               disruption=disruption_for(every_vf, holders, host_wide=True)))
    for target in desired.targets:
        gpu = inv.gpu(target.address)
        if not reload and target.memory and gpu.partition.memory != target.memory:
            steps.append(SetMemoryPartition(gpu.address, target.memory,
                                            disruption_for(tuple(v.address for v in gpu.vfs), holders)))
        if reload or any(vf.driver != VFIO for vf in gpu.vfs):
            steps.append(BindVfs(gpu.address, target.vf_num))
    return steps


def _needs_reload(desired: Desired, inv: Inventory) -> bool:
    gim = inv.facts.modules.get("gim")
    if gim is None or not gim.loaded:
        return True
    for target in desired.targets:
        gpu = inv.gpu(target.address)
        if gpu.driver != "gim" or (gpu.num_vfs or 0) != target.vf_num or len(gpu.vfs) != target.vf_num:
            return True
        if target.compute and gpu.partition.compute and gpu.partition.compute != target.compute:
            return True
    return False


def _passthrough_steps(desired: Desired, inv: Inventory, files, holders: Holders) -> list:
    steps: list = _file_steps(desired, inv, files)
    for target in desired.targets:
        gpu = inv.gpu(target.address)
        group = gpu.iommu_group.members if gpu.iommu_group else ()
        functions = [(gpu.address, gpu.driver)] + [(m.address, m.driver) for m in group
                                                   if m.address != gpu.address and not m.is_bridge]
        for address, driver in functions:
            if driver != VFIO:
                steps.append(BindDevice(address, VFIO, previous=driver,
                                        disruption=disruption_for((address,), holders) if driver else Disruption()))
    return steps


def modprobe_text(desired: Desired) -> str:
    # disable_idle_d3=1: as AMD's GPU operator configures vfio-pci for Instinct GPUs.
    # No profile name in it: two profiles describing the same setup must plan in sync.
    return ("# Written by vgpu (see /etc/vgpu/state.json). Changes are overwritten by `vgpu provision`.\n"
            "blacklist amdgpu\n"
            "options vfio-pci disable_idle_d3=1\n")


def _same_record(a: str | None, b: str, vms_settled: bool = False) -> bool:
    """Records match when they describe the same setup: names and descriptions do not count, two
    selections that resolved to the same GPUs (``count: 4`` and those four addresses) are the same, and with
    ``vms_settled`` so are two ``vms`` sections the VMs already agree with (the pattern a profile was applied
    with, and the explicit ``assign`` `vgpu export` reads back from them)."""
    ignored = ("name", "description", "vms") if vms_settled else ("name", "description")
    import json
    try:
        x, y = json.loads(a or "null"), json.loads(b)
    except ValueError:
        return False
    if not isinstance(x, dict):
        return False
    for r in (x, y):
        r.pop("profile", None)
        if isinstance(r.get("spec"), dict):
            r["spec"] = {k: v for k, v in r["spec"].items() if k not in ignored}
            if "gpus" in r and isinstance(r["spec"].get("gpu"), dict):
                r["spec"]["gpu"] = {k: v for k, v in r["spec"]["gpu"].items() if k != "select"}
    return x == y


def _persistence_steps(desired: Desired, files, vms_settled: bool = False) -> list:
    if _same_record(files.get(STATE_RECORD), desired.record, vms_settled) and files.get(UNIT_PATH) == desired.unit \
            and files.get(UNIT_LINK) is not None:
        return []
    return [InstallPersistence(profile=desired.profile, record=desired.record, unit=desired.unit)]


def disruption_for(functions: tuple[PciAddress, ...], holders: Holders, host_wide: bool = False) -> Disruption:
    vms: dict[str, None] = {}
    procs: dict[str, None] = {}
    for address in functions:
        for h in holders.get(address, ()):
            if h.startswith("VM "):
                vms[h[3:]] = None
            else:
                procs[h] = None
    return Disruption(functions=functions, vms=tuple(vms), processes=tuple(procs), host_wide=host_wide)
