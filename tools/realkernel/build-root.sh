#!/usr/bin/env bash
# Build (or reuse) the Debian 12 root that the tier-4 real-kernel test boots under QEMU TCG.
#
#   tools/realkernel/build-root.sh [CACHE_DIR]
#   (default CACHE_DIR: $VGPU_REALKERNEL_CACHE or /var/cache/vgpu-realkernel)
#
# The root lives OUTSIDE the repository. It is rebuilt only when this recipe changes (the stamp
# holds a hash of this file), so the first run costs ~2.5 min and later runs nothing.
# Exit codes: 0 root ready; 3 cannot build here (no root, no debootstrap, mirror unreachable): the
# test turns that into a skip; anything else is a real failure.
# Environment: VGPU_REALKERNEL_MIRROR (default http://deb.debian.org/debian).
set -euo pipefail

CACHE=${1:-${VGPU_REALKERNEL_CACHE:-/var/cache/vgpu-realkernel}}
MIRROR=${VGPU_REALKERNEL_MIRROR:-http://deb.debian.org/debian}
SUITE=bookworm
# What the guest needs: a kernel with SR-IOV, vfio-pci and 9p modules; udev so that udevadm settle
# (LinuxKernel.settle) and driver binding behave as on a host; kmod for modprobe; python3 to run vgpu.
# python3-pyudev lets the guest compare udev discovery with the sysfs walk on a real kernel.
PACKAGES=linux-image-amd64,udev,kmod,pciutils,python3,python3-pyudev
ROOT="$CACHE/root"
STAMP="$CACHE/root.stamp"
RECIPE=$(sha256sum "$0" | cut -d' ' -f1)

# The kernel mounts its root over virtio-9p: those modules must be in the initramfs, which
# initramfs-tools leaves out by default (MODULES=most covers block and network drivers, not 9p).
# /sbin/vgpu-realkernel-init is the guest's PID 1 (init=): it only mounts the repository share and
# hands over to tools/realkernel/guest-init.sh there, so changing the test needs no rebuild.
customize() {
  local root=$1
  printf '%s\n' 9p 9pnet 9pnet_virtio virtio_pci >>"$root/etc/initramfs-tools/modules"
  chroot "$root" update-initramfs -u -k all >>"$LOG" 2>&1
  mkdir -p "$root/mnt/vgpu" "$root/mnt/out"
  cat >"$root/sbin/vgpu-realkernel-init" <<'INIT'
#!/bin/sh
mount -t proc proc /proc 2>/dev/null
mount -t 9p -o ro,trans=virtio,version=9p2000.L,msize=262144 vgpu /mnt/vgpu \
  && exec /bin/sh /mnt/vgpu/tools/realkernel/guest-init.sh
echo "vgpu-realkernel-init: cannot mount the repository share" >&2
echo o >/proc/sysrq-trigger
INIT
  chmod 0755 "$root/sbin/vgpu-realkernel-init"
}

cannot() { echo "realkernel: cannot build the root here: $*" >&2; exit 3; }

ready() { [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$RECIPE" ] && [ -d "$ROOT" ]; }

if ready; then
  echo "$ROOT"
  exit 0
fi
[ "$(id -u)" = 0 ] || cannot "debootstrap and 9p passthrough need root"
mkdir -p "$CACHE"
chmod 0755 "$CACHE"
# Two test sessions may start at once: one builds, the other waits and then reuses the root.
exec 9>"$CACHE/.lock"
flock 9
if ready; then
  echo "$ROOT"
  exit 0
fi
command -v debootstrap >/dev/null || cannot "debootstrap is not installed (apt-get install debootstrap)"
# Probe the mirror first so that an offline machine skips in seconds instead of timing out.
if command -v python3 >/dev/null; then
  python3 - "$MIRROR/dists/$SUITE/Release" <<'EOF' || cannot "mirror $MIRROR is unreachable"
import sys, urllib.request
urllib.request.urlopen(sys.argv[1], timeout=15).read(64)
EOF
fi

WORK=$(mktemp -d "$CACHE/build.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
LOG="$CACHE/build.log"
trap 'echo "realkernel: building the root failed at line $LINENO (log: $LOG)" >&2' ERR
echo "realkernel: debootstrap $SUITE into $WORK (log: $LOG)" >&2
if ! debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$WORK/root" "$MIRROR" >"$LOG" 2>&1; then
  tail -5 "$LOG" >&2
  grep -qiE "resolve|connect|download|Release" "$LOG" && cannot "debootstrap could not fetch from $MIRROR"
  echo "realkernel: debootstrap failed (see $LOG)" >&2
  exit 1
fi

# The kernel mounts its root over virtio-9p: those modules must be in the initramfs, which
# initramfs-tools leaves out by default (MODULES=most covers block and network drivers, not 9p).
customize "$WORK/root"
# Keep the root small and quiet: no apt caches, no getty/systemd start (init= is our script).
rm -rf "$WORK/root/var/cache/apt/archives/"*.deb "$WORK/root/var/lib/apt/lists/"*

rm -rf "$ROOT"
mv "$WORK/root" "$ROOT"
echo "$RECIPE" >"$STAMP"
echo "$ROOT"
