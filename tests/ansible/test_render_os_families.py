"""The roles' repository files, package lists and boot-loader/initramfs commands, rendered by ansible's
templar from the roles' own defaults, vars and templates for each supported OS. RHEL 9 cannot run here:
this is how its paths are checked (docs/ansible.md says which family is verified how)."""
from __future__ import annotations

import json

import pytest

from conftest import RHEL_9, TEST_PLAYBOOKS, UBUNTU_22, UBUNTU_24, fake_tool, run_playbook


_CACHE: dict[str, tuple[dict, dict]] = {}


@pytest.fixture(scope="module")
def render(ansible_env, tmp_path_factory):
    """render(facts, **extra) -> ({file name: text}, {computed var: value}); one ansible run per input."""
    def _render(facts: dict, **extra):
        key = json.dumps([facts, extra], sort_keys=True)
        if key not in _CACHE:
            out = tmp_path_factory.mktemp("render")
            res = run_playbook(ansible_env, out / "play", None, TEST_PLAYBOOKS / "render.yml",
                               {**facts, **extra})
            assert res.rc == 0, res.failed()
            results = dict(res.tasks())
            computed = results["Print what the roles computed"]["msg"]
            files = {r["item"].rsplit("/", 1)[1].removesuffix(".j2"): r["msg"]
                     for r in results["Render the templates"]["results"]}
            _CACHE[key] = (files, computed)
        return _CACHE[key]
    return _render


def deb822_stanzas(text: str) -> list[dict]:
    stanzas = []
    for block in text.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if line and not line.startswith("#"))
        if fields:
            stanzas.append(fields)
    return stanzas


def ini_sections(text: str) -> dict[str, dict]:
    sections, cur = {}, None
    for line in text.splitlines():
        if line.startswith("["):
            cur = sections.setdefault(line.strip("[]"), {})
        elif "=" in line and cur is not None:
            k, v = line.split("=", 1)
            cur[k] = v
    return sections


def test_rhel9_repo_files_use_the_el_layout_with_priority_and_gpgcheck(render):
    files, computed = render(RHEL_9)
    amdgpu = ini_sections(files["amdgpu.repo"])
    rocm = ini_sections(files["rocm.repo"])
    assert amdgpu["amdgpu"]["baseurl"] == "https://repo.radeon.com/amdgpu/30.10.1/el/9.6/main/x86_64/"
    assert rocm["rocm"]["baseurl"] == "https://repo.radeon.com/rocm/el9/7.0.1/main"
    assert rocm["amdgraphics"]["baseurl"] == "https://repo.radeon.com/graphics/7.0.1/el/9.6/main/x86_64/"
    for section in [amdgpu["amdgpu"], rocm["rocm"], rocm["amdgraphics"]]:
        assert section["gpgcheck"] == "1" and section["priority"] == "50" and section["enabled"] == "1"
        assert section["gpgkey"] == "file:///etc/pki/rpm-gpg/RPM-GPG-KEY-rocm"
    assert computed["rocm_guest_driver_repo_file"] == "/etc/yum.repos.d/amdgpu.repo"
    assert computed["rocm_guest_rocm_repo_file"] == "/etc/yum.repos.d/rocm.repo"


def test_rhel9_packages_are_for_the_running_kernel(render):
    _, computed = render(RHEL_9)
    kernel = RHEL_9["vgpu_kernel"]
    assert f"kernel-devel-{kernel}" in computed["gim_host_packages"]
    assert {"dkms", "automake", "bc"} <= set(computed["gim_host_packages"])
    assert computed["rocm_guest_driver_prerequisites"] == [
        "kernel-headers", f"kernel-devel-{kernel}", f"kernel-devel-matched-{kernel}"]


def test_rhel9_boot_loader_is_grubby_and_initramfs_is_dracut(render):
    files, computed = render(RHEL_9)
    assert computed["vgpu_bootloader"] == "grubby"
    assert computed["vgpu_bootloader_command"] == ["grubby", "--update-kernel=ALL"]
    assert computed["vgpu_initramfs_command"] == ["dracut", "-f", "--regenerate-all"]
    assert computed["vgpu_iommu_kernel_args"] == ["intel_iommu=on", "iommu=pt"]
    assert 'force_drivers+=" vfio vfio_iommu_type1 vfio_pci "' in files["dracut-vfio.conf"]


@pytest.mark.parametrize("facts,suite", [(UBUNTU_24, "noble"), (UBUNTU_22, "jammy")])
def test_ubuntu_sources_are_deb822_signed_by_the_rocm_key_and_pinned_at_600(render, facts, suite):
    files, computed = render(facts)
    driver = deb822_stanzas(files["amdgpu.sources"])
    rocm = deb822_stanzas(files["rocm.sources"])
    assert [s["URIs"] for s in driver] == ["https://repo.radeon.com/amdgpu/30.10.1/ubuntu"]
    assert [s["URIs"] for s in rocm] == ["https://repo.radeon.com/rocm/apt/7.0.1",
                                         "https://repo.radeon.com/graphics/7.0.1/ubuntu"]
    for s in driver + rocm:
        assert s["Suites"] == suite and s["Components"] == "main" and s["Types"] == "deb"
        assert s["Signed-By"] == "/etc/apt/keyrings/rocm.asc"
    assert "Pin: release o=repo.radeon.com\nPin-Priority: 600" in files["rocm-pin"]
    assert computed["rocm_guest_driver_prerequisites"] == [
        f"linux-headers-{facts['vgpu_kernel']}", f"linux-modules-extra-{facts['vgpu_kernel']}"]
    assert computed["vgpu_initramfs_command"] == ["update-initramfs", "-u", "-k", "all"]
    assert computed["vgpu_bootloader_command"] == ["update-grub"]


def test_ubuntu_grub_dropin_appends_iommu_and_blacklist(render):
    files, _ = render(UBUNTU_24)
    assert ('GRUB_CMDLINE_LINUX_DEFAULT="${GRUB_CMDLINE_LINUX_DEFAULT} amd_iommu=on iommu=pt '
            'modprobe.blacklist=amdgpu"') in files["grub-dropin.cfg"]


def test_an_x_y_0_release_lives_under_x_y_and_a_mirror_replaces_the_base(render):
    files, _ = render(UBUNTU_24, rocm_guest_version="7.0.0", rocm_guest_driver_version="30.10.0",
                      rocm_guest_repo_base="http://mirror.example.internal/amd", rocm_guest_pin_origin="Site Mirror")
    assert "URIs: http://mirror.example.internal/amd/amdgpu/30.10/ubuntu" in files["amdgpu.sources"]
    assert "URIs: http://mirror.example.internal/amd/rocm/apt/7.0\n" in files["rocm.sources"]
    assert "Pin: release o=Site Mirror" in files["rocm-pin"]


def test_passthrough_modprobe_gives_every_mi300_family_pf_to_vfio_before_amdgpu(render):
    files, _ = render(UBUNTU_24)
    conf = files["vgpu-vfio.conf"]
    ids = conf.split("options vfio-pci ids=", 1)[1].split()[0].split(",")
    # docs/hardware.md §1: MI300X, MI300X HF, MI308X (two ids), MI325X, MI350X, MI355X
    assert set(ids) == {"1002:74a1", "1002:74a9", "1002:74a2", "1002:74a8", "1002:74a5", "1002:75a0", "1002:75a3"}
    assert "disable_idle_d3=1" in conf and "softdep amdgpu pre: vfio-pci" in conf
    assert "blacklist amdgpu" not in conf


def test_rhel9_grubby_adds_only_the_arguments_the_default_entry_lacks(run_play, fake_bin):
    fake_tool(fake_bin, "grubby", 'index=0\nkernel="/boot/vmlinuz-5.14.0-570.el9.x86_64"\n'
                                  'args="ro crashkernel=1G-4G:192M iommu=pt rhgb quiet"\nroot="/dev/mapper/rhel-root"\n')
    res = run_play(TEST_PLAYBOOKS / "shared_task.yml",
                   {**RHEL_9, "test_tasks": "kernel_args.yml",
                    "vgpu_kernel_args": ["intel_iommu=on", "iommu=pt"]}, check=True)
    assert res.rc == 0, res.failed()
    results = dict(res.tasks())
    assert results["Work out which arguments grubby must add"]["ansible_facts"]["vgpu_grubby_missing"] == \
        ["intel_iommu=on"]
    assert results["Write the GRUB drop-in with the kernel arguments"].get("skipped")
    reasons = results["Note the arguments the running kernel lacks"]["ansible_facts"]["vgpu_reboot_reasons"]
    assert "the running kernel lacks intel_iommu=on" in reasons
