"""Bad input and unsafe states stop the roles early, with a sentence, before anything changes: wrong
argument types, no (or two) GIM package sources, Secure Boot without a signing key, a reboot the
operator did not allow, a DKMS build missing for the running kernel, amdgpu on a PF, a ROCm version
other than the pinned one. Plays that would change this machine run in check mode; the shared task
files run for real on paths under tmp_path."""
from __future__ import annotations

import os

import pytest

from conftest import PLAYBOOKS, TEST_PLAYBOOKS, UBUNTU_24, fake_tool

KVM = PLAYBOOKS / "prepare_kvm_hosts.yml"
GUESTS = PLAYBOOKS / "install_guest_stack.yml"
PASSTHROUGH = PLAYBOOKS / "prepare_passthrough_hosts.yml"
SHARED = TEST_PLAYBOOKS / "shared_task.yml"
# Aim the real playbooks at localhost, as the fake Ubuntu 24.04 host, as the user running the tests.
ON_LOCALHOST = {"vgpu_kvm_hosts": "localhost", "vgpu_guests": "localhost", "vgpu_passthrough_hosts": "localhost",
                "ansible_become": False, **UBUNTU_24}
FIRST_CHANGE = "Install the build prerequisites and the running kernel's headers"


@pytest.fixture(autouse=True)
def secure_boot_off(fake_bin):
    fake_tool(fake_bin, "mokutil", "SecureBoot disabled\n")


# --- argument specs ---------------------------------------------------------------------------------

@pytest.mark.parametrize("playbook,bad,words", [
    (KVM, {"vgpu_allow_reboot": "maybe"}, ["vgpu_allow_reboot", "bool"]),
    (KVM, {"gim_host_pf_ids": {"mi300x": "74a1"}, "gim_host_package_name": "gim-dkms"}, ["gim_host_pf_ids", "list"]),
    (GUESTS, {"rocm_guest_pin_priority": "high"}, ["rocm_guest_pin_priority", "int"]),
    (PASSTHROUGH, {"passthrough_host_disable_idle_d3": "sometimes"}, ["passthrough_host_disable_idle_d3", "bool"]),
    (KVM, {"vgpu_os_family": "Suse"}, ["vgpu_os_family", "Debian, RedHat"]),
])
def test_argument_specs_refuse_wrong_types(run_play, playbook, bad, words):
    res = run_play(playbook, {**ON_LOCALHOST, **bad}, check=True)
    name, msg = res.failed()
    assert name.startswith("Validating arguments against arg spec")
    for word in words:
        assert word in msg
    assert res.changed_tasks() == []


# --- GIM package source -------------------------------------------------------------------------

def test_no_gim_package_source_fails_before_anything_changes(run_play):
    res = run_play(KVM, ON_LOCALHOST, check=True)
    name, msg = res.failed()
    assert name == "Check exactly one GIM package source is set"
    assert msg.startswith("no GIM package source is set: set exactly one of gim_host_package_url")
    assert "nothing was changed on localhost" in msg
    assert FIRST_CHANGE not in res.task_names() and res.changed_tasks() == []


def test_two_gim_package_sources_are_refused(run_play):
    res = run_play(KVM, {**ON_LOCALHOST, "gim_host_package_name": "gim-dkms",
                         "gim_host_package_url": "https://example.invalid/gim-dkms_8.5.0.K_all.deb"}, check=True)
    assert res.failed()[1].startswith("more than one GIM package source is set")
    assert FIRST_CHANGE not in res.task_names()


def test_an_rpm_is_refused_on_ubuntu(run_play):
    res = run_play(KVM, {**ON_LOCALHOST, "gim_host_package_url":
                         "https://example.invalid/releases/download/mainline%2F8.5.0.K/gim-dkms-8.5.0.K-0.noarch.rpm"},
                   check=True)
    assert "is not a .deb package, which Ubuntu needs" in res.failed()[1]


def test_a_missing_local_package_file_is_refused(run_play, tmp_path):
    res = run_play(KVM, {**ON_LOCALHOST, "gim_host_package_file": str(tmp_path / "gim-dkms_8.5.0.K_all.deb")},
                   check=True)
    assert "does not exist on the controller" in res.failed()[1]


def test_unsupported_distribution_is_refused_with_the_override_named(run_play):
    res = run_play(KVM, {**ON_LOCALHOST, "vgpu_distribution": "Debian", "vgpu_distribution_major": "12",
                         "vgpu_distribution_version": "12.7", "gim_host_package_name": "gim-dkms"}, check=True)
    name, msg = res.failed()
    assert "runs Debian 12.7, which the vgpu.instinct roles do not support" in msg
    assert "vgpu_allow_unsupported_os=true" in msg


# --- Secure Boot ---------------------------------------------------------------------------------

@pytest.mark.parametrize("playbook,module,extra", [
    (KVM, "gim", {"gim_host_package_name": "gim-dkms"}),
    (GUESTS, "amdgpu", {}),
])
def test_secure_boot_without_a_signing_key_is_refused_before_anything_changes(run_play, fake_bin, playbook,
                                                                             module, extra):
    fake_tool(fake_bin, "mokutil", "SecureBoot enabled\n")
    res = run_play(playbook, {**ON_LOCALHOST, **extra}, check=True)
    name, msg = res.failed()
    assert name == "Refuse Secure Boot without a DKMS signing key"
    assert msg.startswith("Secure Boot is enabled on localhost and no DKMS signing key is set")
    assert f"unsigned {module} module" in msg and "vgpu_dkms_signing_key" in msg
    assert res.changed_tasks() == []


def test_secure_boot_with_a_signing_key_missing_on_the_host_is_refused(run_play, fake_bin, tmp_path):
    fake_tool(fake_bin, "mokutil", "SecureBoot enabled\n")
    key, cert = tmp_path / "mok.priv", tmp_path / "mok.der"
    key.write_text("key")
    res = run_play(KVM, {**ON_LOCALHOST, "gim_host_package_name": "gim-dkms",
                         "vgpu_dkms_signing_key": str(key), "vgpu_dkms_signing_cert": str(cert)}, check=True)
    assert res.failed()[1] == f"{cert} does not exist on localhost: DKMS cannot sign modules with it"


# --- reboot gate ---------------------------------------------------------------------------------

def gate(run_play, tmp_path, reasons, allow=False, check=False):
    return run_play(SHARED, {**UBUNTU_24, "test_role": "vgpu.instinct.vgpu", "test_tasks": "reboot_gate.yml",
                             "vgpu_reboot_extra_reasons": reasons, "vgpu_allow_reboot": allow,
                             "vgpu_reboot_marker": str(tmp_path / "run" / "reboot-required")}, check=check)


def test_no_reboot_unless_allowed_the_play_stops_and_says_why(run_play, tmp_path):
    res = gate(run_play, tmp_path, ["gim-dkms changed"])
    name, msg = res.failed()
    assert name == "Stop, the host needs a reboot that is not allowed"
    assert msg.startswith("reboot required: gim-dkms changed. Reboot localhost and run the play again")
    assert "Reboot the host" not in [n for n, r in res.tasks() if not r.get("skipped")]
    assert (tmp_path / "run" / "reboot-required").read_text() == "gim-dkms changed\n"


def test_a_pending_reboot_still_stops_the_next_run(run_play, tmp_path):
    gate(run_play, tmp_path, ["amdgpu-dkms changed"])
    res = gate(run_play, tmp_path, [])
    assert res.failed()[1].startswith("reboot required: amdgpu-dkms changed.")


def test_nothing_to_reboot_passes_the_gate(run_play, tmp_path):
    res = gate(run_play, tmp_path, [])
    assert res.rc == 0
    assert not (tmp_path / "run" / "reboot-required").exists()


def test_an_allowed_reboot_reboots(run_play, tmp_path):
    # ansible's reboot refuses the local connection ("would reboot the control node"): proof the gate
    # reached the reboot, without rebooting anything.
    res = gate(run_play, tmp_path, ["kernel command line"], allow=True)
    name, msg = res.failed()
    assert name == "Reboot the host" and "would reboot the control node" in msg


def test_check_mode_reports_the_reboot_without_failing(run_play, tmp_path):
    res = gate(run_play, tmp_path, ["gim-dkms changed"], check=True)
    assert res.rc == 0
    assert dict(res.tasks())["Say a reboot would be required (check mode)"]["msg"] == \
        "reboot required: gim-dkms changed"


# --- DKMS, amdgpu on the PFs, ROCm version ---------------------------------------------------------

def dkms_check(run_play, tmp_path, module="gim"):
    return run_play(SHARED, {**UBUNTU_24, "test_role": "vgpu.instinct.vgpu", "test_tasks": "dkms_check.yml",
                             "vgpu_dkms_module": module, "vgpu_dkms_root": str(tmp_path / "dkms")})


def test_a_dkms_build_missing_for_the_running_kernel_fails_with_the_make_log(run_play, fake_bin, tmp_path):
    kernel = UBUNTU_24["vgpu_kernel"]
    log = tmp_path / "dkms" / "gim" / "8.5.0.K" / "build" / "make.log"
    log.parent.mkdir(parents=True)
    log.write_text("error: implicit declaration of function\n")
    fake_tool(fake_bin, "dkms", "gim/8.5.0.K, 6.8.0-40-generic, x86_64: installed\n"
                                f"gim/8.5.0.K, {kernel}, x86_64: built\n")
    name, msg = dkms_check(run_play, tmp_path).failed()
    assert name == "Fail unless DKMS installed the module for the running kernel"
    assert msg.startswith(f"DKMS has not installed gim for the running kernel {kernel} on localhost")
    assert f"build log: {log};" in msg


def test_a_dkms_module_installed_for_the_running_kernel_passes(run_play, fake_bin, tmp_path):
    fake_tool(fake_bin, "dkms", f"amdgpu/6.14.14-2212064.24.04, {UBUNTU_24['vgpu_kernel']}, x86_64: installed\n")
    assert dkms_check(run_play, tmp_path, "amdgpu").rc == 0


def fake_pci(sysfs, driver, bdf, vendor, device):
    dev = sysfs / "devices" / "pci0000:00" / bdf
    dev.mkdir(parents=True)
    (dev / "vendor").write_text(f"{vendor}\n")
    (dev / "device").write_text(f"{device}\n")
    d = sysfs / "bus" / "pci" / "drivers" / driver
    d.mkdir(parents=True, exist_ok=True)
    os.symlink(dev, d / bdf)


def test_amdgpu_on_a_pf_fails_naming_it(run_play, tmp_path):
    sysfs = tmp_path / "sys"
    fake_pci(sysfs, "amdgpu", "0000:85:00.0", "0x1002", "0x74a1")
    fake_pci(sysfs, "amdgpu", "0000:c1:00.0", "0x1002", "0x1586")   # another AMD GPU the host keeps
    res = run_play(SHARED, {**UBUNTU_24, "test_role": "vgpu.instinct.vgpu", "test_tasks": "amdgpu_check.yml",
                            "vgpu_sysfs_root": str(sysfs), "vgpu_amdgpu_forbidden_ids": ["1002:74a1", "1002:75a3"],
                            "vgpu_amdgpu_rightful_driver": "gim"})
    msg = res.failed()[1]
    assert msg.startswith("amdgpu drives 0000:85:00.0 on localhost, which must be left to gim")
    assert "c1:00.0" not in msg


@pytest.mark.parametrize("found,ok", [("7.0.1-40", True), ("7.0.1", True), ("7.0.10-2", False),
                                      ("6.4.3-127", False), (None, False)])
def test_rocm_version_must_match_the_pin(run_play, tmp_path, found, ok):
    prefix = tmp_path / "rocm"
    if found is not None:
        (prefix / ".info").mkdir(parents=True)
        (prefix / ".info" / "version").write_text(found + "\n")
    res = run_play(SHARED, {**UBUNTU_24, "test_role": "vgpu.instinct.rocm_guest", "test_tasks": "verify_rocm.yml",
                            "rocm_guest_prefix": str(prefix), "rocm_guest_version": "7.0.1"})
    if ok:
        assert res.rc == 0
    else:
        assert res.failed()[1].startswith(f"{prefix}/.info/version on localhost says {found or 'nothing'}, "
                                          "not the pinned ROCm 7.0.1")
