"""The passthrough role end to end in check mode (it installs no package, so every task can run here):
as an Ubuntu 24.04 and as a RHEL 9 host (stand-in grubby), it plans the modprobe.d file, the initramfs
additions, the boot-loader change with its handlers, and stops short of a reboot with the reasons."""
from __future__ import annotations

import pytest

from conftest import PLAYBOOKS, RHEL_9, TEST_PLAYBOOKS, UBUNTU_24, fake_tool


@pytest.fixture(scope="module")
def passthrough(module_run, module_bin):
    fake_tool(module_bin, "grubby", 'index=0\nargs="ro crashkernel=1G-4G:192M rhgb quiet"\n')
    every = {"vgpu_passthrough_hosts": "all", "ansible_become": False, "vgpu_serial": "100%",
             "vgpu_max_fail_percentage": 100}
    return module_run(PLAYBOOKS / "prepare_passthrough_hosts.yml", {"ubuntu": UBUNTU_24, "rhel": RHEL_9}, every,
                      check=True)


@pytest.mark.parametrize("host,changes,handlers", [
    ("ubuntu", ["Give the GPUs to vfio-pci in modprobe.d", "Put vfio-pci into the initramfs (Debian family)",
                "Write the GRUB drop-in with the kernel arguments"],
     ["Rebuild the initramfs", "Update the boot loader configuration"]),
    ("rhel", ["Give the GPUs to vfio-pci in modprobe.d", "Put vfio-pci into the initramfs (RHEL family)"],
     ["Rebuild the initramfs"]),
])
def test_check_mode_plans_the_files_the_initramfs_and_the_boot_loader(passthrough, host, changes, handlers):
    res = passthrough.on(host)
    assert res.ok, res.failed()
    changed = res.changed_tasks()
    for name in changes:
        assert name in changed, (name, changed)
    # notified handlers run before the gate; their commands are skipped in check mode
    ran = res.task_names()
    for name in handlers:
        assert name in ran and ran.index(name) < ran.index("Say a reboot would be required (check mode)"), ran
    if host == "rhel":
        assert "Update the boot loader configuration" not in ran
    gate = dict(res.tasks())["Say a reboot would be required (check mode)"]["msg"]
    assert gate.startswith("reboot required: the running kernel lacks")
    assert dict(res.tasks())["Verify the GPUs are bound to vfio-pci"].get("skipped")   # only for real


def test_rhel_check_mode_plans_grubby_with_only_the_missing_arguments(passthrough):
    results = dict(passthrough.on("rhel").tasks())
    assert results["Work out which arguments grubby must add"]["ansible_facts"]["vgpu_grubby_missing"] == \
        ["intel_iommu=on", "iommu=pt"]


@pytest.fixture(scope="module")
def efivar(module_run, module_bin, tmp_path_factory):
    # No mokutil on this "host" (127, as the shell says for a missing command): the role reads the EFI variable.
    fake_tool(module_bin, "mokutil", "", rc=127)
    hosts = {}
    for host, value in [("sb-on", b"\x06\x00\x00\x00\x01"), ("sb-off", b"\x06\x00\x00\x00\x00"), ("bios", None)]:
        sysfs = tmp_path_factory.mktemp(host)
        if value is not None:
            efivars = sysfs / "firmware" / "efi" / "efivars"
            efivars.mkdir(parents=True)
            (efivars / "SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c").write_bytes(value)
        hosts[host] = {**UBUNTU_24, "test_tasks": "secure_boot.yml", "vgpu_sysfs_root": str(sysfs),
                       "vgpu_dkms_module": "gim"}
    return module_run(TEST_PLAYBOOKS / "shared_task.yml", hosts, check=True)


def test_without_mokutil_the_efi_variable_decides_secure_boot(efivar):
    assert efivar.on("sb-on").failed()[0] == "Refuse Secure Boot without a DKMS signing key"
    assert efivar.on("sb-off").ok and efivar.on("bios").ok
