"""Boot the tier-4 guest: QEMU TCG, an emulated Intel IOMMU and an SR-IOV NVMe controller.

    python3 tools/realkernel/boot.py --root /var/cache/vgpu-realkernel/root --out DIR

The root comes from build-root.sh; the repository is shared read-only over 9p (tag ``vgpu``) and
DIR read-write (tag ``out``); the guest runs tools/realkernel/guest-init.sh and powers off. DIR
then holds result.json (guest_driver.py), guest.log, dmesg.txt and console.log.
QEMU options follow docs/testing.md (tier 4): q35 with kernel-irqchip=split for the
IOMMU's interrupt remapping, and ``max_ioqpairs - sriov_vq_flexible >= 2`` for the NVMe PF.
Standard library only: tests/realkernel/conftest.py imports this file.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
QEMU = "qemu-system-x86_64"
VFS = 2
NINEP = "trans=virtio,version=9p2000.L,msize=262144"


class Unavailable(Exception):
    """This machine cannot run the guest at all (missing tool or feature): a reason to skip."""


@dataclass(frozen=True)
class Boot:
    returncode: int | None  # None: killed at the timeout
    seconds: float
    out: Path


def find_kernel(root: Path) -> tuple[Path, Path]:
    """The newest vmlinuz/initrd pair under ROOT/boot. Raises Unavailable when there is none."""
    kernels = sorted((root / "boot").glob("vmlinuz-*"), key=_version_key)
    for kernel in reversed(kernels):
        initrd = root / "boot" / ("initrd.img-" + kernel.name[len("vmlinuz-"):])
        if initrd.exists():
            return kernel, initrd
    raise Unavailable(f"no kernel with an initrd under {root}/boot (rebuild with build-root.sh)")


def _version_key(path: Path) -> list[int]:
    return [int(n) for n in re.findall(r"\d+", path.name)]


def check_qemu(qemu: str = QEMU) -> str:
    """QEMU's path, if it can emulate the SR-IOV NVMe controller (7.1+). Raises Unavailable."""
    path = shutil.which(qemu)
    if path is None:
        raise Unavailable(f"{qemu} is not installed (apt-get install qemu-system-x86)")
    try:
        probe = subprocess.run([path, "-device", "nvme,help"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise Unavailable(f"{qemu} does not run: {exc}") from exc
    if "sriov_max_vfs" not in probe.stdout + probe.stderr:
        raise Unavailable(f"{qemu} cannot emulate an SR-IOV NVMe controller (needs QEMU 7.1 or later)")
    return path


def qemu_command(qemu: str, root: Path, out: Path, repo: Path = REPO, memory_mb: int = 1024) -> list[str]:
    kernel, initrd = find_kernel(root)
    append = (f"root=rootfs rootfstype=9p rootflags={NINEP} ro console=ttyS0 quiet panic=-1 "
              "intel_iommu=on iommu=pt init=/sbin/vgpu-realkernel-init")
    nvme = (f"nvme,serial=vgpu0,subsys=subsys0,sriov_max_vfs={VFS},sriov_vq_flexible=4,"
            "sriov_vi_flexible=2,max_ioqpairs=6,msix_qsize=6")
    return [qemu, "-accel", "tcg", "-cpu", "max", "-M", "q35,kernel-irqchip=split", "-m", str(memory_mb),
            "-smp", "2", "-nodefaults", "-display", "none", "-no-reboot",
            "-device", "intel-iommu,intremap=on,caching-mode=on",
            "-kernel", str(kernel), "-initrd", str(initrd), "-append", append,
            *_share("rootfs", root, readonly=True, model="passthrough"),
            *_share("vgpu", repo, readonly=True, model="none"),
            *_share("out", out, readonly=False, model="passthrough"),
            "-device", "nvme-subsys,id=subsys0", "-device", nvme,
            "-serial", f"file:{out / 'console.log'}"]


def _share(tag: str, path: Path, *, readonly: bool, model: str) -> list[str]:
    # QEMU splits -fsdev options at commas: a path containing one would be misread, so refuse it.
    if "," in str(path):
        raise Unavailable(f"cannot share {path} over 9p: QEMU options cannot carry a comma in a path")
    fsdev = f"local,id=fs_{tag},path={path},security_model={model}" + (",readonly=on" if readonly else "")
    return ["-fsdev", fsdev, "-device", f"virtio-9p-pci,fsdev=fs_{tag},mount_tag={tag}"]


def boot(root: Path, out: Path, *, timeout: float = 600, qemu: str = QEMU, repo: Path = REPO) -> Boot:
    """Run the guest to its power-off (or kill it at ``timeout``); the artifacts land in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    command = qemu_command(check_qemu(qemu), root, out, repo=repo)
    start = time.monotonic()
    with open(out / "qemu.log", "wb") as log:
        proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            code = None
    return Boot(returncode=code, seconds=round(time.monotonic() - start, 1), out=out)


def tail(path: Path, lines: int = 25) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return f"({path.name} missing)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path(os.environ.get(
        "VGPU_REALKERNEL_CACHE", "/var/cache/vgpu-realkernel")) / "root")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--repo", type=Path, default=REPO,
                        help="the vgpu checkout the guest imports (e.g. a copy with an injected fault)")
    args = parser.parse_args(argv)
    try:
        result = boot(args.root.resolve(), args.out.resolve(), timeout=args.timeout, repo=args.repo.resolve())
    except Unavailable as exc:
        print(f"realkernel: {exc}", file=sys.stderr)
        return 3
    print(f"realkernel: qemu exit {result.returncode} after {result.seconds}s; artifacts in {result.out}")
    return 0 if result.returncode == 0 and (result.out / "result.json").exists() else 1


if __name__ == "__main__":
    sys.exit(main())
