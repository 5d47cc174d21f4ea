"""Bad input and unsafe states stop the roles early, with a sentence, before anything changes: wrong
argument types, no (or two) GIM package sources, Secure Boot without a signing key, a reboot the
operator did not allow, a DKMS build missing for the running kernel, amdgpu on a PF, a ROCm version
other than the pinned one.

Each module-scoped fixture is ONE ansible-playbook run in which every case is an inventory host (all
of them this machine, local connection): the cases stay separate tests without paying ansible's start-up
per case. Plays that would change this machine run in check mode; the shared task files run for real on
paths under tmp."""
from __future__ import annotations

import os

import pytest

from conftest import PLAYBOOKS, TEST_PLAYBOOKS, UBUNTU_24, fake_tool

KVM = PLAYBOOKS / "prepare_kvm_hosts.yml"
GUESTS = PLAYBOOKS / "install_guest_stack.yml"
PASSTHROUGH = PLAYBOOKS / "prepare_passthrough_hosts.yml"
SHARED = TEST_PLAYBOOKS / "shared_task.yml"
# Aim the real playbooks at the inventory's hosts (one per case), as the user running the tests.
EVERY_HOST = {"vgpu_kvm_hosts": "all", "vgpu_guests": "all", "vgpu_passthrough_hosts": "all", "ansible_become": False,
              "vgpu_serial": "100%", "vgpu_max_fail_percentage": 100}   # every case in one batch, none stops another
FIRST_CHANGE = "Install the build prerequisites and the running kernel's headers"
GIM = {"gim_host_package_name": "gim-dkms"}


# --- the real playbooks, in check mode, Secure Boot on (stand-in mokutil) --------------------------

@pytest.fixture(scope="module")
def kvm(module_run, module_bin, tmp_path_factory):
    fake_tool(module_bin, "mokutil", "SecureBoot enabled\n")
    keys = tmp_path_factory.mktemp("mok")
    (keys / "mok.priv").write_text("key")
    cases = {
        "bad-allow-reboot": {"vgpu_allow_reboot": "maybe"},
        "bad-pf-ids": {"gim_host_pf_ids": {"mi300x": "74a1"}, **GIM},
        "bad-os-family": {"vgpu_os_family": "Suse"},
        "no-source": {},
        "two-sources": {**GIM, "gim_host_package_url": "https://example.invalid/gim-dkms_8.5.0.K_all.deb"},
        "rpm-on-ubuntu": {"gim_host_package_url":
                          "https://example.invalid/releases/download/mainline%2F8.5.0.K/gim-dkms-8.5.0.K-0.noarch.rpm"},
        "missing-file": {"gim_host_package_file": str(keys / "gim-dkms_8.5.0.K_all.deb")},
        "debian-12": {"vgpu_distribution": "Debian", "vgpu_distribution_major": "12",
                      "vgpu_distribution_version": "12.7", **GIM},
        "secure-boot": GIM,
        "cert-missing": {**GIM, "vgpu_dkms_signing_key": str(keys / "mok.priv"),
                         "vgpu_dkms_signing_cert": str(keys / "mok.der")},
    }
    return module_run(KVM, {h: {**UBUNTU_24, **v} for h, v in cases.items()}, EVERY_HOST, check=True), keys


@pytest.fixture(scope="module")
def guests_and_passthrough(module_run, module_bin):
    fake_tool(module_bin, "mokutil", "SecureBoot enabled\n")
    guests = module_run(GUESTS, {"bad-pin-priority": {**UBUNTU_24, "rocm_guest_pin_priority": "high"},
                                 "secure-boot": UBUNTU_24}, EVERY_HOST, check=True)
    passthrough = module_run(PASSTHROUGH, {"bad-idle-d3": {**UBUNTU_24, "passthrough_host_disable_idle_d3": "sometimes"}},
                             EVERY_HOST, check=True)
    return guests, passthrough


def test_at_least_one_case_ran_per_host(kvm):
    res, _ = kvm
    assert res.on("no-source").task_names(), res.stderr[-2000:]


@pytest.mark.parametrize("host,words", [
    ("bad-allow-reboot", ["vgpu_allow_reboot", "bool"]),
    ("bad-pf-ids", ["gim_host_pf_ids", "list"]),
    ("bad-os-family", ["vgpu_os_family", "Debian, RedHat"]),
])
def test_argument_specs_refuse_wrong_types_gim_host(kvm, host, words):
    res = kvm[0].on(host)
    name, msg = res.failed()
    assert name.startswith("Validating arguments against arg spec")
    assert all(w in msg for w in words), msg
    assert res.changed_tasks() == []


def test_argument_specs_refuse_wrong_types_rocm_guest_and_passthrough_host(guests_and_passthrough):
    guests, passthrough = guests_and_passthrough
    for res, words in [(guests.on("bad-pin-priority"), ["rocm_guest_pin_priority", "int"]),
                       (passthrough.on("bad-idle-d3"), ["passthrough_host_disable_idle_d3", "bool"])]:
        name, msg = res.failed()
        assert name.startswith("Validating arguments against arg spec") and all(w in msg for w in words), msg
        assert res.changed_tasks() == []


def test_no_gim_package_source_fails_before_anything_changes(kvm):
    res = kvm[0].on("no-source")
    name, msg = res.failed()
    assert name == "Check exactly one GIM package source is set"
    assert msg.startswith("no GIM package source is set: set exactly one of gim_host_package_url")
    assert "nothing was changed on no-source" in msg
    assert FIRST_CHANGE not in res.task_names() and res.changed_tasks() == []


def test_two_gim_package_sources_are_refused(kvm):
    res = kvm[0].on("two-sources")
    assert res.failed()[1].startswith("more than one GIM package source is set")
    assert FIRST_CHANGE not in res.task_names()


def test_an_rpm_is_refused_on_ubuntu(kvm):
    assert "is not a .deb package, which Ubuntu needs" in kvm[0].on("rpm-on-ubuntu").failed()[1]


def test_a_missing_local_package_file_is_refused(kvm):
    assert "does not exist on the controller" in kvm[0].on("missing-file").failed()[1]


def test_unsupported_distribution_is_refused_with_the_override_named(kvm):
    msg = kvm[0].on("debian-12").failed()[1]
    assert "runs Debian 12.7, which the vgpu.instinct roles do not support" in msg
    assert "vgpu_allow_unsupported_os=true" in msg


@pytest.mark.parametrize("which,module", [("kvm", "gim"), ("guests", "amdgpu")])
def test_secure_boot_without_a_signing_key_is_refused_before_anything_changes(kvm, guests_and_passthrough,
                                                                             which, module):
    res = (kvm[0] if which == "kvm" else guests_and_passthrough[0]).on("secure-boot")
    name, msg = res.failed()
    assert name == "Refuse Secure Boot without a DKMS signing key"
    assert msg.startswith("Secure Boot is enabled on secure-boot and no DKMS signing key is set")
    assert f"unsigned {module} module" in msg and "vgpu_dkms_signing_key" in msg
    assert res.changed_tasks() == []


def test_secure_boot_with_a_signing_key_missing_on_the_host_is_refused(kvm):
    res, keys = kvm
    assert res.on("cert-missing").failed()[1] == \
        f"{keys / 'mok.der'} does not exist on cert-missing: DKMS cannot sign modules with it"


# --- reboot gate (the shared task file, for real, marker under tmp) -----------------------------

@pytest.fixture(scope="module")
def gate(module_run, tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("run")

    def case(reasons, allow=False, marker=None):
        return {**UBUNTU_24, "test_tasks": "reboot_gate.yml",
                "vgpu_reboot_extra_reasons": reasons, "vgpu_allow_reboot": allow,
                "vgpu_reboot_marker": str(run_dir / (marker or "x") / "reboot-required")}
    hosts = {"stop": case(["gim-dkms changed"], marker="stop"),
             "pending": case(["amdgpu-dkms changed"], marker="pending"),
             "nothing": case([], marker="nothing"),
             "allowed": case(["kernel command line"], allow=True, marker="allowed")}
    first = module_run(SHARED, hosts)
    again = module_run(SHARED, {"pending": case([], marker="pending")})
    check = module_run(SHARED, {"check": case(["gim-dkms changed"], marker="check")}, check=True)
    return first, again, check, run_dir


def test_no_reboot_unless_allowed_the_play_stops_and_says_why(gate):
    res, run_dir = gate[0].on("stop"), gate[3]
    name, msg = res.failed()
    assert name == "Stop, the host needs a reboot that is not allowed"
    assert msg.startswith("reboot required: gim-dkms changed. Reboot stop and run the play again")
    assert "Reboot the host" not in [n for n, r in res.tasks() if not r.get("skipped")]
    assert (run_dir / "stop" / "reboot-required").read_text() == "gim-dkms changed\n"


def test_a_pending_reboot_still_stops_the_next_run(gate):
    assert gate[1].on("pending").failed()[1].startswith("reboot required: amdgpu-dkms changed.")


def test_nothing_to_reboot_passes_the_gate(gate):
    assert gate[0].on("nothing").ok
    assert not (gate[3] / "nothing" / "reboot-required").exists()


def test_an_allowed_reboot_reboots(gate):
    # ansible's reboot refuses the local connection ("would reboot the control node"): proof the gate
    # reached the reboot, without rebooting anything.
    name, msg = gate[0].on("allowed").failed()
    assert name == "Reboot the host" and "would reboot the control node" in msg


def test_check_mode_reports_the_reboot_without_failing(gate):
    res = gate[2].on("check")
    assert res.ok
    assert dict(res.tasks())["Say a reboot would be required (check mode)"]["msg"] == \
        "reboot required: gim-dkms changed"


# --- DKMS, amdgpu on the PFs, ROCm version (shared task files for real on tmp trees) ---------------

def fake_pci(sysfs, driver, bdf, vendor, device):
    dev = sysfs / "devices" / "pci0000:00" / bdf
    dev.mkdir(parents=True)
    (dev / "vendor").write_text(f"{vendor}\n")
    (dev / "device").write_text(f"{device}\n")
    d = sysfs / "bus" / "pci" / "drivers" / driver
    d.mkdir(parents=True, exist_ok=True)
    os.symlink(dev, d / bdf)


ROCM_FOUND = {"rocm-7-0-1-40": ("7.0.1-40", True), "rocm-7-0-1": ("7.0.1", True), "rocm-7-0-10": ("7.0.10-2", False),
              "rocm-6-4": ("6.4.3-127", False), "rocm-none": (None, False)}


@pytest.fixture(scope="module")
def checks(module_run, module_bin, tmp_path_factory):
    root = tmp_path_factory.mktemp("checks")
    kernel = UBUNTU_24["vgpu_kernel"]
    log = root / "dkms" / "gim" / "8.5.0.K" / "build" / "make.log"
    log.parent.mkdir(parents=True)
    log.write_text("error: implicit declaration of function\n")
    # dkms status -m MODULE ...: gim built but not installed for the running kernel; amdgpu installed.
    (module_bin / "dkms").write_text(
        "#!/bin/sh\ncase \"$3\" in\n"
        f"gim) echo 'gim/8.5.0.K, 6.8.0-40-generic, x86_64: installed'; echo 'gim/8.5.0.K, {kernel}, x86_64: built';;\n"
        f"amdgpu) echo 'amdgpu/6.14.14-2212064.24.04, {kernel}, x86_64: installed';;\nesac\n")
    (module_bin / "dkms").chmod(0o755)
    sysfs = root / "sys"
    fake_pci(sysfs, "amdgpu", "0000:85:00.0", "0x1002", "0x74a1")
    fake_pci(sysfs, "amdgpu", "0000:c1:00.0", "0x1002", "0x1586")   # another AMD GPU the host keeps
    shared = {**UBUNTU_24, "vgpu_dkms_root": str(root / "dkms")}
    hosts = {"dkms-gim": {**shared, "test_tasks": "dkms_check.yml", "vgpu_dkms_module": "gim"},
             "dkms-amdgpu": {**shared, "test_tasks": "dkms_check.yml", "vgpu_dkms_module": "amdgpu"},
             "amdgpu-on-pf": {**shared, "test_tasks": "amdgpu_check.yml", "vgpu_sysfs_root": str(sysfs),
                              "vgpu_amdgpu_forbidden_ids": ["1002:74a1", "1002:75a3"],
                              "vgpu_amdgpu_rightful_driver": "gim"}}
    for host, (found, _) in ROCM_FOUND.items():
        prefix = root / host
        if found is not None:
            (prefix / ".info").mkdir(parents=True)
            (prefix / ".info" / "version").write_text(found + "\n")
        hosts[host] = {**UBUNTU_24, "test_tasks": "verify_rocm.yml",
                       "rocm_guest_prefix": str(prefix), "rocm_guest_version": "7.0.1"}
    return module_run(SHARED, hosts), log, root


def test_a_dkms_build_missing_for_the_running_kernel_fails_with_the_make_log(checks):
    res, log, _ = checks
    name, msg = res.on("dkms-gim").failed()
    assert name == "Fail unless DKMS installed the module for the running kernel"
    assert msg.startswith(f"DKMS has not installed gim for the running kernel {UBUNTU_24['vgpu_kernel']} on dkms-gim")
    assert f"build log: {log};" in msg


def test_a_dkms_module_installed_for_the_running_kernel_passes(checks):
    assert checks[0].on("dkms-amdgpu").ok


def test_amdgpu_on_a_pf_fails_naming_it(checks):
    msg = checks[0].on("amdgpu-on-pf").failed()[1]
    assert msg.startswith("amdgpu drives 0000:85:00.0 on amdgpu-on-pf, which must be left to gim")
    assert "c1:00.0" not in msg


@pytest.mark.parametrize("host", ROCM_FOUND)
def test_rocm_version_must_match_the_pin(checks, host):
    res, _, root = checks
    found, ok = ROCM_FOUND[host]
    if ok:
        assert res.on(host).ok
    else:
        assert res.on(host).failed()[1].startswith(
            f"{root / host}/.info/version on {host} says {found or 'nothing'}, not the pinned ROCm 7.0.1")
