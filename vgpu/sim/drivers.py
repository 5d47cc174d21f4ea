"""What the simulated kernel knows about modules and the PCI drivers they register.

Facts from the Linux kernel: module names use underscores and modprobe treats '-' and '_' alike
(kmod ``modname_normalize``); vfio_pci registers the driver "vfio-pci"; drivers without a
``sriov_configure`` hook (gim, amdgpu) refuse sriov_numvfs writes (drivers/pci/iov.c).
"""

from __future__ import annotations

import re

# What the kernel allows in a module name (MODULE_NAME_LEN is 64 - sizeof(unsigned long) = 56 bytes
# with the NUL, include/linux/module.h; kmod takes letters, digits, '_' and '-') and in a parameter
# name (a C identifier in module_param; 64 is our bound). Names from a machine spec or a modprobe.d
# file become /sys/module/<module>/parameters/<param> paths: anything else is refused.
MODULE_NAME = re.compile(r"[A-Za-z0-9_-]{1,55}")
PARAM_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")

# module -> PCI driver name it registers (identity when absent)
DRIVER_OF_MODULE = {"vfio_pci": "vfio-pci"}

# Drivers built into the kernel: always registered, never in lsmod.
BUILTIN_DRIVERS = ("pcieport",)

# Modules every simulated host can load besides the drivers its devices name.
STANDARD_MODULES = ("gim", "amdgpu", "vfio_pci", "vfio", "vfio_iommu_type1", "kvm", "kvm_amd")

# Drivers that implement sriov_configure, so writing sriov_numvfs works (drivers/pci/iov.c).
SRIOV_CONFIGURE = frozenset({"mlx5_core", "nvme", "ixgbe", "igb", "ice", "i40e", "bnxt_en"})

# Parameters a module accepts, with the value /sys/module/<m>/parameters shows by default.
# Modules not listed accept any parameter. gim's names are from GIM's gim_drv.c/gim_config.c.
MODULE_PARAMS: dict[str, dict[str, str]] = {
    # gim_shim/gim_config.c: the partition modes are config-file only, not parameters
    "gim": {"vf_num": "1", "enabled_devices": "", **{p: "" for p in (
        "skip_check_bgpu", "fw_load_type", "guard", "fullaccess_timeout", "sch_policy", "log_level",
        "mm_policy", "power_saving_mode", "hangdump_timeout", "fb_sharing_mode",
        "partition_full_access_enable", "hang_detection_mode", "debug_dump_reserved_size",
        "deferred_full_live_update", "asymmetric_fb_mode", "bp_mode", "pf_fb_size", "bad_page_threshold",
        "ras_vf_telemetry_policy", "max_cper_count", "gpu_data_addr_hi", "gpu_data_addr_lo",
        "gpu_data_size")}},
    "vfio_pci": {"ids": "", "disable_idle_d3": "N", "disable_vga": "N", "enable_sriov": "N",
                 "nointxmask": "N", "disable_denylist": "N"},
    "vfio": {"enable_unsafe_noiommu_mode": "N"},
    "amdgpu": {"ip_block_mask": "-1", "virtual_display": "", "user_partt_mode": "-1"},
}

# What /sys/module/<m>/parameters shows for gim (only the parameters vgpu reads are visible).
VISIBLE_DEFAULTS = {"gim": ("vf_num",)}


def normalize(name: str) -> str:
    return name.replace("-", "_")


def driver_of(module: str) -> str:
    return DRIVER_OF_MODULE.get(module, module)


def module_of(driver: str) -> str | None:
    """The module registering ``driver``; None for built-in drivers."""
    if driver in BUILTIN_DRIVERS:
        return None
    for module, drv in DRIVER_OF_MODULE.items():
        if drv == driver:
            return module
    return normalize(driver)
