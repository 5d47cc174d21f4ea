"""Boot persistence: the state record and the systemd unit that re-applies it (pure text).

The unit runs after systemd-modules-load (which loads gim and vfio-pci from modules-load.d) and
before libvirt starts guests, re-applies the recorded profile and verifies it by read-back, as
mig-parted's and driverctl's boot units do. Paths are relative to the host's /etc.
"""

from __future__ import annotations

import json

STATE_SCHEMA = "vgpu.state/v1"
STATE_RECORD = "vgpu/state.json"
UNIT_NAME = "vgpu-reapply.service"
UNIT_PATH = f"systemd/system/{UNIT_NAME}"
UNIT_LINK = f"systemd/system/multi-user.target.wants/{UNIT_NAME}"
UNIT_LINK_TARGET = f"../{UNIT_NAME}"


def state_record(profile_name: str, profile: dict, gpus: list[str] | None = None) -> str:
    """Canonical JSON (sorted keys, no timestamps) so an unchanged profile compares equal.
    ``gpus``: the addresses the profile's selection resolved to when it was applied."""
    record = {"schema": STATE_SCHEMA, "profile": profile_name, "spec": profile}
    if gpus is not None:
        record["gpus"] = list(gpus)
    return json.dumps(record, sort_keys=True, indent=2) + "\n"


def unit_text(exec_start: str) -> str:
    return f"""# Written by vgpu. Re-applies the recorded profile at boot; `vgpu release` removes it.
[Unit]
Description=vgpu: re-apply and verify the recorded GPU profile
Wants=systemd-modules-load.service
After=systemd-modules-load.service systemd-udev-settle.service
Before=libvirtd.service libvirt-guests.service
ConditionPathExists=/etc/{STATE_RECORD}

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart={exec_start} provision --recorded --yes
TimeoutStartSec=20min

[Install]
WantedBy=multi-user.target
"""
