"""Host readiness: pure rules over discovered facts. Each finding says what to do about it.

Facts come from docs/hardware.md §3 (kernel command line, GIM, vfio) and §4 (IOMMU
groups). Profile-specific refusals (e.g. amdgpu bound to a GPU a profile wants for SR-IOV) live in
the planner; here amdgpu on a PF is a warning, since a host may legitimately run bare-metal ROCm.
"""

from __future__ import annotations

from collections.abc import Sequence

from vgpu.model.inventory import Finding, Gpu, HostFacts, Severity
from vgpu.model.pci import PciAddress

MIN_GIM_FOR_ROCM7 = (8, 4, 0)  # ROCm 7.0 requires GIM 8.4.0.K (docs/hardware.md §3)

UNREADABLE_IDS = ("its vendor/device id cannot be read (unreadable or garbage), so vgpu cannot tell "
                  "which GPU it is")
UNREADABLE_FIX = "check `lspci -nn -s ADDRESS` and dmesg for this function; a capture: recapture it"
E, W, I, OK = Severity.ERROR, Severity.WARNING, Severity.INFO, Severity.OK


def assess(gpus: Sequence[Gpu], facts: HostFacts, orphan_vfs: Sequence[PciAddress] = (),
           unidentified: Sequence[PciAddress] = ()) -> tuple[Finding, ...]:
    findings: list[Finding] = []
    findings += _iommu(facts)
    findings += _cmdline(facts)
    findings += _modules(facts)
    findings += _hugepages(facts)
    if not gpus:
        findings.append(Finding("gpus", W, "no AMD Instinct GPU known to the catalog was found",
                                "check `lspci -nn -d 1002:` and that the BIOS exposes the GPUs"))
    for gpu in gpus:
        findings += _gpu(gpu, facts)
    for address in unidentified:
        findings.append(Finding("gpus.unreadable_ids", E, f"{address}: {UNREADABLE_IDS}",
                                UNREADABLE_FIX.replace("ADDRESS", str(address))))
    if orphan_vfs:
        names = ", ".join(str(a) for a in orphan_vfs)
        findings.append(Finding("gpus.orphan_vfs", I, f"{names}: Instinct VFs without a visible PF "
                                "(this looks like a guest, not a host)"))
    return tuple(findings)


def _iommu(facts: HostFacts) -> list[Finding]:
    if facts.iommu_groups == 0 and facts.iommu_units == 0:
        return [Finding("iommu", E, "the IOMMU is off: the kernel created no IOMMU groups",
                        "enable IOMMU (AMD-Vi / VT-d), SR-IOV, Above-4G decoding, ARI and ACS in the BIOS, "
                        "boot with iommu=pt (Intel: also intel_iommu=on)")]
    return [Finding("iommu", OK, f"IOMMU active: {facts.iommu_groups} groups, {facts.iommu_units} units")]


def _cmdline(facts: HostFacts) -> list[Finding]:
    if facts.cmdline is None:
        return [Finding("cmdline", I, "kernel command line unknown (no /proc/cmdline in this capture)")]
    words = facts.cmdline.split()
    out: list[Finding] = []
    for off in ("amd_iommu=off", "intel_iommu=off", "iommu=off"):
        if off in words:
            out.append(Finding("cmdline.iommu_off", E, f"the kernel command line disables the IOMMU ({off})",
                               f"remove {off} from GRUB_CMDLINE_LINUX, update-grub, reboot"))
    if "iommu=pt" not in words:
        out.append(Finding("cmdline.iommu_pt", W, "iommu=pt is not on the kernel command line",
                           "add iommu=pt to GRUB_CMDLINE_LINUX (AMD's and Red Hat's MI300X hosts use it), reboot"))
    if facts.cpu_vendor == "GenuineIntel" and "intel_iommu=on" not in words:
        out.append(Finding("cmdline.intel_iommu", W, "Intel CPU without intel_iommu=on on the kernel command line",
                           "add intel_iommu=on to GRUB_CMDLINE_LINUX, reboot"))
    if "amdgpu" not in facts.blacklisted:
        out.append(Finding("cmdline.blacklist_amdgpu", W, "amdgpu is not blacklisted on the host: it may take "
                           "the PFs that gim (SR-IOV) or vfio-pci (passthrough) must drive",
                           "add modprobe.blacklist=amdgpu to the kernel command line, reboot"))
    if "pci=realloc=off" not in words:
        out.append(Finding("cmdline.pci_realloc", I, "pci=realloc=off is not set",
                           "add it if VFs come up without BARs (BIOS did not size the SR-IOV BARs)"))
    return out or [Finding("cmdline", OK, "kernel command line has iommu=pt and blacklists amdgpu")]


def _modules(facts: HostFacts) -> list[Finding]:
    out: list[Finding] = []
    gim = facts.modules.get("gim")
    if gim is None or not gim.loaded:
        out.append(Finding("module.gim", W, "gim (AMD's SR-IOV host driver) is not loaded: SR-IOV profiles need it",
                           "install gim-dkms (playbooks/prepare_kvm_hosts.yml) and `modprobe gim`"))
    else:
        out.append(_gim_version(gim.version, gim.parameters.get("vf_num")))
    vfio = facts.modules.get("vfio_pci")
    if vfio is None or not vfio.loaded:
        out.append(Finding("module.vfio_pci", W, "vfio-pci is not loaded: VFs and passthrough GPUs cannot be "
                           "assigned to VMs", "`modprobe vfio-pci` and list it in /etc/modules-load.d/vgpu.conf"))
    else:
        out.append(Finding("module.vfio_pci", OK, "vfio-pci is loaded"))
    return out


def _gim_version(version: str | None, vf_num: str | None) -> Finding:
    where = f" (vf_num={vf_num})" if vf_num else ""
    parsed = parse_gim_version(version)
    if parsed is None:
        return Finding("module.gim", W, f"gim is loaded{where} but its version is unknown ({version!r})",
                       "ROCm 7.0 guests need GIM 8.4.0.K or later: check `modinfo gim`")
    if parsed < MIN_GIM_FOR_ROCM7:
        return Finding("module.gim", E, f"gim {version} is loaded{where}; ROCm 7.0 guests need 8.4.0.K or later",
                       "upgrade gim-dkms to 8.4.0.K or later")
    return Finding("module.gim", OK, f"gim {version} is loaded{where}")


def parse_gim_version(text: str | None) -> tuple[int, int, int] | None:
    """"8.4.0.K" -> (8, 4, 0); None when it is not a GIM version (one parser: vgpu.matrix.release_number)."""
    from vgpu.matrix import release_number  # the matrix's data is read only when a plan asks for it
    return release_number(text)


def _hugepages(facts: HostFacts) -> list[Finding]:
    if facts.hugepages_1g is None:
        return []
    if facts.hugepages_1g == 0:
        return [Finding("hugepages", I, "no 1 GiB hugepages reserved",
                        "Red Hat's validated MI300X host backs VM memory with 1 GiB hugepages: add "
                        "default_hugepagesz=1G hugepagesz=1G hugepages=N to the kernel command line")]
    return [Finding("hugepages", OK, f"{facts.hugepages_1g} x 1 GiB hugepages reserved")]


def _gpu(gpu: Gpu, facts: HostFacts) -> list[Finding]:
    subject = f"gpu.{gpu.address}"
    out: list[Finding] = []
    if gpu.driver == "amdgpu":
        out.append(Finding(subject + ".driver", W, f"{gpu.address} ({gpu.model}) is bound to amdgpu: "
                           "SR-IOV needs gim on the PF, passthrough needs vfio-pci",
                           "blacklist amdgpu (modprobe.blacklist=amdgpu) and reboot, or let `vgpu provision` rebind it"))
    if gpu.driver == "gim" and not gpu.num_vfs:
        vf_num = facts.modules.get("gim").parameters.get("vf_num") if facts.modules.get("gim") else None
        out.append(Finding(subject + ".vfs", W, f"{gpu.address} is bound to gim but has no VFs "
                           f"(vf_num={vf_num or '?'}, TotalVFs={gpu.total_vfs})",
                           "vf_num must be 1, 2, 4 or 8 and at most TotalVFs; see `dmesg | grep gim`"))
    if gpu.total_vfs == 1:
        out.append(Finding(subject + ".firmware", I, f"{gpu.address}: TotalVFs is 1 (standard firmware)",
                           "more than 1 VF per GPU needs AMD's multi-VF firmware bundle"))
    out += _shared_group(gpu)
    out += _vfio_nodes(gpu, facts)
    return out


def _shared_group(gpu: Gpu) -> list[Finding]:
    group = gpu.iommu_group
    if group is None:
        return []
    others = group.others(gpu.address)
    if not others:
        return []
    names = ", ".join(f"{m.address} [{m.vendor:04x}:{m.device:04x}] ({m.driver or 'no driver'})" for m in others)
    return [Finding(f"gpu.{gpu.address}.iommu_group", W,
                    f"{gpu.address} shares IOMMU group {group.number} with {names}",
                    "every member must be bound to vfio-pci together for passthrough; enable ACS in the BIOS "
                    "or choose another slot to isolate it")]


def _vfio_nodes(gpu: Gpu, facts: HostFacts) -> list[Finding]:
    if facts.dev_vfio_groups is None:
        return []
    missing = [vf for vf in gpu.vfs if vf.driver == "vfio-pci" and vf.iommu_group is not None
               and vf.iommu_group.number not in facts.dev_vfio_groups]
    return [Finding(f"gpu.{vf.address}.vfio", W, f"{vf.address} is bound to vfio-pci but "
                    f"/dev/vfio/{vf.iommu_group.number} does not exist",
                    "rebind it: `vgpu provision` again, or check dmesg for vfio errors") for vf in missing]
