"""The simulated host's amd-smi (GIM build), installed where the machine spec says ``state.amdsmi: true``.

It answers the two calls vgpu makes (vgpu.host.amdsmi.read_amdsmi) in the real tool's JSON shapes
(tests/fixtures/amd-smi): ``list --json`` (the PFs gim drives, in GIM's probe order, with their VFs) and
``static --bus --ifwi --json`` (each PF's IFWI). A GPU's IFWI name is its spec's ``vbios``; without one it is
SIMULATED: ``AMD <model>_PRODUCTION_1VF`` where the firmware allows 1 VF, else ``AMD <model>_PRODUCTION_MULTIVF``
(AMD's multi-VF naming is UNVERIFIED, docs/hardware.md §9). Without gim loaded the library cannot start:
exit -100 ("unknown error"), as a GIM host's amd-smi fails then.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from vgpu.catalog import DEFAULT as CATALOG

UNKNOWN_ERROR = 156  # -100 as an exit status


def runner(host):
    """A Runner for ``host`` (vgpu.sim.host.SimHost), or None when its spec has no amd-smi."""
    machine = host.state.machine
    if not (machine.get("state") or {}).get("amdsmi"):
        return None
    return lambda args: answer(host, list(args))


def answer(host, args: Sequence[str]) -> tuple[int, str, str]:
    state = host.state
    if "gim" not in state.modules:
        return UNKNOWN_ERROR, "", "An unknown error has occurred. Run 'help' for more info.\n"
    pfs = [f for f in state.sorted_functions() if f.driver == "gim"]
    if list(args) == ["list", "--json"]:
        return 0, json.dumps([_listed(state, i, pf) for i, pf in enumerate(pfs)], indent=4) + "\n", ""
    if list(args) == ["static", "--bus", "--ifwi", "--json"]:
        names = _vbios_names(state.machine)
        data = [{"gpu": i, "bus": {"bdf": pf.address},
                 "ifwi": {"name": names.get(pf.address) or _default_name(pf), "build_date": "2025/07/27 14:45",
                          "part_number": "113-SIMULATED-001", "version": "00159017"}} for i, pf in enumerate(pfs)]
        return 0, json.dumps({"gpu_data": data}, indent=4) + "\n", ""
    return 255, "", f"Command {' '.join(args)} is invalid. Run 'help' for more info.\n"  # -1


def _listed(state, index: int, pf) -> dict:
    vfs = state.vfs_of(pf)
    return {"gpu": index, "bdf": pf.address, "uuid": _uuid(pf, 0xFF, index),
            "vfs": [{"vf": n, "bdf": vf.address, "uuid": _uuid(pf, n, index)} for n, vf in enumerate(vfs)]}


def _uuid(pf, vf: int, index: int) -> str:
    # the shape of the fixture's (10ff74a1-0000-1000-8000-000000001010): id and indexes, SIMULATED values
    return f"{vf & 0xFF:02x}ff{pf.device:04x}-0000-1000-8000-{index:012x}"


def _vbios_names(machine: dict) -> dict[str, str]:
    return {f["address"]: f["vbios"] for f in machine.get("functions") or () if f.get("vbios")}


def _default_name(pf) -> str:
    match = CATALOG.match(pf.vendor, pf.device)
    model = match.model.name if match else f"{pf.device:04x}"
    sriov = pf.sriov
    limit = (sriov.total_vfs if sriov.vf_limit is None else min(sriov.vf_limit, sriov.total_vfs)) if sriov else 1
    return f"AMD {model}_PRODUCTION_{'1VF' if limit <= 1 else 'MULTIVF'}"
