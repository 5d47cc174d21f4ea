"""The ESXi tier: vgpu's real CLI and services against govmomi's vSphere API simulator (a real SOAP
server over HTTPS), extended in Go (tools/vcsim/main.go) and serving the devices of vgpu's
simulated machine specs. pyVmomi is never mocked."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from vgpu.sim.vcsim import EsxiSpec, Vcsim, VmSpec, build

REPO = Path(__file__).resolve().parents[2]
PROFILE = "mi300x-esxi-passthrough"
GPUS = ("0000:05:00.0", "0000:26:00.0", "0000:46:00.0", "0000:65:00.0",
        "0000:85:00.0", "0000:a6:00.0", "0000:c6:00.0", "0000:e5:00.0")


@pytest.fixture(scope="session")
def vcsim_binary() -> Path:
    """Built once from tools/vcsim/main.go (keyed by its hash) into $VGPU_VCSIM_CACHE or ~/.cache/vgpu/vcsim."""
    cache = os.environ.get("VGPU_VCSIM_CACHE")
    return build(Path(cache) if cache else None)


def gpu_vms(n: int = 8, **kw) -> list[VmSpec]:
    return [VmSpec(f"gpu-vm-{i:02d}", **kw) for i in range(n)]


@dataclass
class Esxi:
    sim: Vcsim
    workdir: Path
    state_dir: Path
    env: dict = field(default_factory=dict)

    @property
    def url(self) -> str:
        return self.sim.url

    def args(self) -> list[str]:
        return ["--esxi", self.url, "--esxi-ca", str(self.sim.ca_file)]

    def run(self, *args, env: dict | None = None, tls: list[str] | None = None, timeout: float = 120):
        """The real CLI in a child process, against this host."""
        cmd = [sys.executable, "-m", "vgpu", *args, *(self.args() if tls is None else tls)]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=self.workdir,
                              env={**self.env, **(env or {})})

    def admin(self):
        """A separate pyVmomi session, as an administrator's, to read and change the host behind vgpu."""
        import ssl

        from pyVim.connect import SmartConnect
        host, port = self.url.split("//")[1].rsplit(":", 1)
        ctx = ssl.create_default_context(cafile=str(self.sim.ca_file))
        return SmartConnect(host=host, port=int(port), user=self.sim.spec.user, pwd=self.sim.spec.password,
                            sslContext=ctx)

    def snapshot(self) -> dict:
        """Everything vgpu may change, as the API reports it: passthrough per device, each VM's
        passthrough devices, firmware, memory lock, extraConfig, power state."""
        from pyVmomi import vim
        si = self.admin()
        try:
            content = si.RetrieveContent()
            view = content.viewManager.CreateContainerView(content.rootFolder, [vim.HostSystem], True)
            host = view.view[0]
            out = {"passthrough": {i.id: (i.passthruEnabled, i.passthruActive) for i in host.config.pciPassthruInfo}}
            for vm in host.vm:
                cfg = vm.config
                out[vm.name] = {
                    "power": str(vm.runtime.powerState), "firmware": cfg.firmware,
                    "locked": bool(cfg.memoryReservationLockedToMax),
                    "devices": sorted((d.backing.id, d.backing.deviceId, int(d.backing.vendorId), d.backing.systemId)
                                      for d in cfg.hardware.device
                                      if isinstance(d, vim.vm.device.VirtualPCIPassthrough)
                                      and isinstance(d.backing, vim.vm.device.VirtualPCIPassthrough.DeviceBackingInfo)),
                    "dynamic": sorted((tuple((a.vendorId, a.deviceId) for a in d.backing.allowedDevice),
                                       d.backing.customLabel or "", d.backing.assignedId or "")
                                      for d in cfg.hardware.device
                                      if isinstance(d, vim.vm.device.VirtualPCIPassthrough)
                                      and isinstance(d.backing, vim.vm.device.VirtualPCIPassthrough.DynamicBackingInfo)),
                    "extra": {o.key: str(o.value) for o in cfg.extraConfig}}
            return out
        finally:
            from pyVim.connect import Disconnect
            Disconnect(si)

    def vm(self, si, name: str):
        from pyVmomi import vim
        content = si.RetrieveContent()
        view = content.viewManager.CreateContainerView(content.rootFolder, [vim.VirtualMachine], True)
        return next(v for v in view.view if v.name == name)


@pytest.fixture
def esxi(tmp_path, vcsim_binary):
    """esxi(spec=None) -> a running simulated ESXi 8 host with 8 MI300X and VMs gpu-vm-00..07."""
    running = []

    def start(spec: EsxiSpec | None = None) -> Esxi:
        spec = spec or EsxiSpec(vms=gpu_vms())
        work = tmp_path / f"esxi{len(running)}"
        sim = Vcsim(spec, work, binary=vcsim_binary).__enter__()
        running.append(sim)
        state = tmp_path / "state"
        env = {k: v for k, v in os.environ.items() if not k.startswith("VGPU_")}
        env.update(VGPU_ESXI_USER=spec.user, VGPU_ESXI_PASSWORD=spec.password, VGPU_STATE_DIR=str(state),
                   COLUMNS="200", PYTHONPATH=str(REPO))
        return Esxi(sim, work, state, env)
    yield start
    for sim in running:
        sim.__exit__(None, None, None)
