"""Checks of the guest's PCI function, kernel driver and ROCm install (docs/hardware.md §7).

All reads go through the agent root (``Guest.path``), all tools through ``Guest.run``.
Standard library only, Python >= 3.8.
"""

from __future__ import annotations

import os
from typing import Dict, List, Optional

from . import base
from .base import Context, error, result
from .result import CheckResult

PCI_DEVICES = "/sys/bus/pci/devices"


def _hexid(text: Optional[str]) -> Optional[int]:
    try:
        return int(text, 16) if text else None
    except ValueError:
        return None


def _functions(ctx: Context) -> List[Dict[str, object]]:
    """Every PCI function under <root>/sys/bus/pci/devices with vendor, device, class, driver."""
    top = ctx.guest.path(PCI_DEVICES)
    out = []
    for bdf in sorted(os.listdir(str(top))) if top.is_dir() else []:
        base_path = PCI_DEVICES + "/" + bdf
        driver_link = ctx.guest.path(base_path + "/driver")
        driver = os.path.basename(os.readlink(str(driver_link))) if driver_link.is_symlink() else None
        out.append({"bdf": bdf, "vendor": _hexid(ctx.guest.read(base_path + "/vendor")),
                    "device": _hexid(ctx.guest.read(base_path + "/device")),
                    "class": _hexid(ctx.guest.read(base_path + "/class")), "driver": driver})
    return out


def check_pci_function(ctx: Context) -> List[CheckResult]:
    """The expected AMD function (VF or PF id from the expectation) is on the guest's PCI bus."""
    vendor = int(ctx.expect["vendor_id"], 16)
    wanted = {int(i, 16) for i in ctx.expect["device_ids"]}
    kind = "VF" if ctx.expect.get("is_vf") else "PF"
    expected = ", ".join("%04x:%04x" % (vendor, i) for i in sorted(wanted))
    functions = [f for f in _functions(ctx) if f["vendor"] == vendor]
    found = [f for f in functions if f["device"] in wanted]
    ctx.state["functions"] = found
    if found:
        measured = ", ".join("%s [%04x:%04x]" % (f["bdf"], vendor, f["device"]) for f in found)
        return [result("pci.function", True, measured, expected, None, "%d %s %s function(s) found" % (
            len(found), ctx.expect["model"], kind))]
    if functions:
        others = ", ".join("%s [%04x:%04x]" % (f["bdf"], vendor, f["device"]) for f in functions)
        return [result("pci.function", False, others, expected, None,
                       "AMD functions present but none is the expected %s %s" % (ctx.expect["model"], kind))]
    return [result("pci.function", False, None, expected, None,
                   "no AMD (vendor 0x%04x) function under %s: the %s is not attached to this VM" % (
                       vendor, PCI_DEVICES, kind))]


def check_amdgpu(ctx: Context) -> List[CheckResult]:
    """amdgpu is loaded and drives every expected function."""
    if not ctx.guest.path("/sys/module/amdgpu").is_dir():
        return [result("driver.amdgpu", False, "not loaded", "amdgpu", None,
                       "amdgpu module not loaded (no /sys/module/amdgpu): install amdgpu-dkms and run "
                       "modprobe amdgpu; check dmesg")]
    functions = ctx.state.get("functions") or []
    if not functions:
        return [base.unjudged(ctx, "driver.amdgpu", "amdgpu is loaded but no expected PCI function to check the "
                              "binding of (see pci.function)", "loaded", expected="amdgpu")]
    unbound = [f for f in functions if f["driver"] != "amdgpu"]
    if unbound:
        detail = "; ".join("%s is bound to %s" % (f["bdf"], f["driver"] or "no driver") for f in unbound)
        return [result("driver.amdgpu", False, unbound[0]["driver"] or "none", "amdgpu", None,
                       detail + ": see dmesg for amdgpu probe errors")]
    version = ctx.guest.read("/sys/module/amdgpu/version")
    detail = "%d function(s) bound to amdgpu" % len(functions)
    return [result("driver.amdgpu", True, "amdgpu" + (" " + version if version else ""), "amdgpu", None,
                   detail + ("" if version else " (in-tree module: no /sys/module/amdgpu/version)"))]


def check_dkms(ctx: Context) -> List[CheckResult]:
    """amdgpu-dkms is installed for the running kernel (``dkms status``, docs/hardware.md §7)."""
    from .parsers.common import ParseError
    from .parsers.dkms import find_module, parse_dkms_status

    expected = "amdgpu installed (driver %s)" % ctx.expect.get("driver", "?")
    run = ctx.guest.run(["dkms", "status"], base.TIMEOUTS["query"])
    if not run.ok:
        return [error("driver.dkms", run.why() + ": amdgpu-dkms (ROCm 7.0's decoupled driver) needs dkms",
                      expected)]
    try:
        entries = find_module(parse_dkms_status(run.stdout), "amdgpu")
    except ParseError as exc:
        return [error("driver.dkms", "dkms status output not understood: %s" % exc, expected)]
    if not entries:
        return [result("driver.dkms", False, "not installed", expected, None,
                       "dkms status lists no amdgpu module: install amdgpu-dkms from repo.radeon.com/amdgpu/%s"
                       % ctx.expect.get("driver", ""))]
    kernel = ctx.guest.read("/proc/sys/kernel/osrelease") or os.uname().release
    mine = [e for e in entries if e.kernel == kernel]
    entry = next((e for e in mine if e.installed), (mine or entries)[0])
    ok = entry.installed and entry.kernel == kernel
    detail = "amdgpu/%s %s for kernel %s (running %s)" % (entry.version, entry.status, entry.kernel, kernel)
    if not ok:
        detail += ": rebuild with dkms autoinstall or reinstall amdgpu-dkms for the running kernel"
    return [result("driver.dkms", ok, "amdgpu/%s: %s" % (entry.version, entry.status), expected, None, detail)]


def rocm_version_matches(found: str, wanted: str) -> bool:
    """"7.0.2-56" matches "7.0" and "7.0.2"; "7.10.0" does not match "7.1"."""
    release = found.split("-")[0].strip()
    return release == wanted or release.startswith(wanted + ".")


def check_rocm_version(ctx: Context) -> List[CheckResult]:
    wanted = ctx.expect.get("rocm", "7.0")
    found = ctx.guest.read("/opt/rocm/.info/version")
    if not found:
        return [error("rocm.version", "/opt/rocm/.info/version missing: ROCm is not installed in /opt/rocm "
                      "(amdgpu-install --usecase=rocm)", wanted + ".x")]
    ok = rocm_version_matches(found, wanted)
    detail = "" if ok else "ROCm %s installed, %s.x expected: install ROCm %s from repo.radeon.com" % (
        found, wanted, wanted)
    return [result("rocm.version", ok, found, wanted + ".x", None, detail)]


CHECKS = (check_pci_function, check_amdgpu, check_dkms, check_rocm_version)
for _fn, _name in zip(CHECKS, ("pci.function", "driver.amdgpu", "driver.dkms", "rocm.version")):
    _fn.check_name = _name  # type: ignore[attr-defined]
