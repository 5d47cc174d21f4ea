"""A simulated ESXi 8 host: govmomi's vSphere API simulator, extended (tools/vcsim/main.go), serving
the PCI devices of one of vgpu's machine specs, the same specs the simulated Linux hosts use.

Used by ``make demo`` and the ESXi test tier; vgpu itself talks to it exactly as to a real host,
over HTTPS with pyVmomi. Building needs Go and Debian's govmomi source (``golang-go``,
``golang-github-vmware-govmomi-dev``); the binary is cached by the hash of its source.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from vgpu.errors import HostError
from vgpu.fsutil import absolute

SOURCE = Path(__file__).resolve().parents[2] / "tools" / "vcsim" / "main.go"
GOCODE = Path("/usr/share/gocode")
SYSTEM_ID = "5f1c2a3e-0b1d-4c5e-9f00-1a2b3c4d5e6f"


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "vgpu" / "vcsim"


def build(cache: Path | None = None) -> Path:
    """The simulator binary, built once per source version (about 20 s the first time)."""
    if not SOURCE.is_file():
        raise HostError(f"{SOURCE} is missing: the ESXi simulator is built from a vgpu checkout")
    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:16]
    out = (cache or cache_dir()) / digest / "vgpu-vcsim"
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.parent / ".lock", "w") as lock:  # parallel test workers build it once
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not out.is_file():
            _build(out)
    return out


def _build(out: Path) -> None:
    go = shutil.which("go")
    if go is None or not (GOCODE / "src/github.com/vmware/govmomi/simulator").is_dir():
        raise HostError("the ESXi simulator needs Go and govmomi's source",
                        hint="apt-get install golang-go golang-github-vmware-govmomi-dev (make demo does)")
    with tempfile.TemporaryDirectory(prefix="vgpu-vcsim-") as tmp:
        src = Path(tmp) / "src" / "vgpu-vcsim"
        src.mkdir(parents=True)
        shutil.copy(SOURCE, src / "main.go")
        env = {**os.environ, "GOPATH": f"{tmp}:{GOCODE}", "GO111MODULE": "off", "GOPROXY": "off", "GOFLAGS": "",
               "GOCACHE": str(out.parent.parent / "gocache")}  # offline: Debian's source only
        staged = out.with_suffix(".tmp")
        proc = subprocess.run([go, "build", "-o", str(staged), "."], cwd=src, env=env, capture_output=True,
                              text=True, timeout=600)
        if proc.returncode != 0:
            raise HostError(f"building the ESXi simulator failed: {proc.stderr.strip()[-2000:]}")
        os.replace(staged, out)


@dataclass
class VmSpec:
    name: str
    memory_mb: int = 65536
    cpus: int = 16
    powered_on: bool = False
    firmware: str = "bios"
    disk_mb: int = 0  # > 0: a virtual disk of that size (an installed guest)


@dataclass
class EsxiSpec:
    """One simulated ESXi host: the GPUs and other PCI functions of a machine spec, and VMs."""

    machine: str = "8xmi300x"
    name: str = "esxi-sim-01"
    vms: list[VmSpec] = field(default_factory=list)
    user: str = "vgpu-operator"
    password: str = "simulated-secret"
    api_version: str = "8.0.3.0"
    maintenance: bool = False
    reboot_to_apply: bool = False
    fail_reconfigure: list[str] = field(default_factory=list)
    enabled: list[str] = field(default_factory=list)  # addresses whose passthrough is on (and active) already
    expire_session_on_reconfigure: list[str] = field(default_factory=list)  # VMs whose reconfigure ends the session
    deny: dict[str, str] = field(default_factory=dict)  # method -> privilege id of the NoPermission it fails with
    vcenter_api_version: str = ""  # the endpoint's about is a vCenter's of this version (the host keeps its own)
    connection_state: str = ""  # the host's runtime.connectionState ("" connected)
    hang_reconfigure: list[str] = field(default_factory=list)  # VMs whose reconfigure task never ends

    def document(self) -> dict:
        from vgpu.sim.presets import resolve
        from vgpu.sim.spec import load_spec

        machine = load_spec(self.machine)
        devices = []
        for fn in machine.functions:
            r = resolve(fn)
            if r["vendor"] is None or r["device"] is None:
                continue
            bar64 = sum(b.size for b in r["bars"] or () if b.type.startswith("mem64"))
            name = f"{r['model']} (simulated)" if r.get("model") else f"{fn.kind} {r['vendor']:04x}:{r['device']:04x}"
            on = str(fn.address) in self.enabled
            devices.append({"id": str(fn.address), "vendor": r["vendor"], "device": r["device"],
                            "sub_vendor": r["subsystem_vendor"], "sub_device": r["subsystem_device"],
                            "class": r["class_code"] or 0, "vendor_name": _vendor(r["vendor"]), "device_name": name,
                            "capable": fn.kind in ("gpu", "nic", "nvme", "other", "vga", "audio"),
                            "enabled": on, "active": on, "bar64_bytes": bar64, "numa_node": fn.numa_node})
        return {"name": self.name, "system_id": SYSTEM_ID, "api_version": self.api_version,
                "maintenance": self.maintenance, "reboot_to_apply": self.reboot_to_apply, "user": self.user,
                "password": self.password, "devices": devices,
                "vms": [{"name": v.name, "memory_mb": v.memory_mb, "cpus": v.cpus, "powered_on": v.powered_on,
                         "firmware": v.firmware, "disk_mb": v.disk_mb} for v in self.vms],
                "fail_reconfigure": list(self.fail_reconfigure),
                "expire_session_on_reconfigure": list(self.expire_session_on_reconfigure), "deny": dict(self.deny),
                "vcenter_api_version": self.vcenter_api_version, "connection_state": self.connection_state,
                "hang_reconfigure": list(self.hang_reconfigure)}


def _vendor(vendor: int) -> str:
    return {0x1002: "Advanced Micro Devices, Inc. [AMD/ATI]", 0x10DE: "NVIDIA Corporation",
            0x15B3: "Mellanox Technologies", 0x144D: "Samsung Electronics Co Ltd",
            0x1A03: "ASPEED Technology, Inc.", 0x1000: "Broadcom / LSI", 0x1022: "Advanced Micro Devices, Inc. [AMD]"
            }.get(vendor, f"vendor {vendor:04x}")


class Vcsim:
    """A running simulator (a context manager). ``url``, ``thumbprint`` and ``ca_file`` say how to
    reach it; ``reboot()`` is the stand-in for rebooting the host."""

    def __init__(self, spec: EsxiSpec, workdir: Path, *, binary: Path | None = None):
        self.spec = spec
        self.workdir = absolute(workdir)  # the paths given to the simulator and printed: valid from anywhere
        self.binary = binary or build()
        self.proc: subprocess.Popen | None = None
        self.url = self.thumbprint = ""
        self.ca_file = self.workdir / "vcsim-cert.pem"

    def __enter__(self) -> "Vcsim":
        self.workdir.mkdir(parents=True, exist_ok=True)
        spec_file = self.workdir / "vcsim-spec.json"
        spec_file.write_text(json.dumps(self.spec.document()))
        os.chmod(spec_file, 0o600)
        self.log = open(self.workdir / "vcsim.log", "wb")
        self.proc = subprocess.Popen([str(self.binary), "-spec", str(spec_file), "-tls", "-cert-out", str(self.ca_file)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log)
        line = self.proc.stdout.readline()
        if not line:
            self.__exit__(None, None, None)
            raise HostError(f"the ESXi simulator did not start (see {self.workdir / 'vcsim.log'})")
        info = json.loads(line)
        self.url, self.thumbprint = info["url"].rsplit("/sdk", 1)[0], info["thumbprint"]
        return self

    def reboot(self) -> None:
        import ssl
        ctx = ssl.create_default_context(cafile=str(self.ca_file))
        req = urllib.request.Request(self.url + "/vgpu/reboot", method="POST", data=b"")
        with urllib.request.urlopen(req, context=ctx, timeout=10) as resp:
            resp.read()

    def __exit__(self, *exc) -> None:
        if self.proc is not None:
            if self.proc.stdin:
                self.proc.stdin.close()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None
        if getattr(self, "log", None):
            self.log.close()
