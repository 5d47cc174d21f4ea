#!/usr/bin/env bash
# Build (or reuse) the Debian 12 root the Molecule hosts boot from with systemd-nspawn (docs/testing.md).
#
#   tools/molecule/build-root.sh [CACHE_DIR]     (default $VGPU_MOLECULE_CACHE or /var/cache/vgpu-molecule)
#
# The root lives outside the repository and is rebuilt only when this recipe changes (the stamp holds its
# hash). Each host boots an overlay of it, so the cached root stays clean. Exit codes: 0 ready (prints the
# root's path); 3 cannot build here (not root, no debootstrap, mirror unreachable): the tests skip; other: a
# real failure. Environment: VGPU_MOLECULE_MIRROR (default http://deb.debian.org/debian).
set -euo pipefail

CACHE=${1:-${VGPU_MOLECULE_CACHE:-/var/cache/vgpu-molecule}}
MIRROR=${VGPU_MOLECULE_MIRROR:-http://deb.debian.org/debian}
SUITE=bookworm
# A host Ansible reaches over SSH: systemd as PID 1 (nspawn -b), sshd, python3 for the modules; gpgv (apt's
# signature check) and initramfs-tools come with the base; dkms is the local repository's stand-in.
PACKAGES=systemd-sysv,dbus,openssh-server,python3,python3-apt,iproute2,initramfs-tools,kmod
ROOT="$CACHE/root"
STAMP="$CACHE/root.stamp"
LOG="$CACHE/build.log"
RECIPE=$(sha256sum "$0" | cut -d' ' -f1)

cannot() { echo "molecule: cannot build the root here: $*" >&2; exit 3; }
ready() { [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$RECIPE" ] && [ -d "$ROOT" ]; }

if ready; then echo "$ROOT"; exit 0; fi
[ "$(id -u)" = 0 ] || cannot "debootstrap and systemd-nspawn need root"
mkdir -p "$CACHE"
exec 9>"$CACHE/.lock"
flock 9
if ready; then echo "$ROOT"; exit 0; fi
command -v debootstrap >/dev/null || cannot "debootstrap is not installed (apt-get install debootstrap)"
python3 - "$MIRROR/dists/$SUITE/Release" <<'PY' || cannot "mirror $MIRROR is unreachable"
import sys, urllib.request
urllib.request.urlopen(sys.argv[1], timeout=15).read(64)
PY
rm -rf "$ROOT.new" "$STAMP"
: >"$LOG"
debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$ROOT.new" "$MIRROR" >>"$LOG" 2>&1 \
  || { tail -5 "$LOG" >&2; exit 1; }
# Boot quietly and fast in a container: no getty, no timers, sshd with keys only.
chroot "$ROOT.new" systemctl mask getty@tty1.service console-getty.service systemd-timesyncd.service \
  apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer fstrim.timer >>"$LOG" 2>&1 || true
printf 'PasswordAuthentication no\nPermitRootLogin prohibit-password\nUseDNS no\n' \
  >"$ROOT.new/etc/ssh/sshd_config.d/vgpu-molecule.conf"
rm -f "$ROOT.new"/etc/ssh/ssh_host_*  # each host gets its own, written by the create playbook
rm -rf "$ROOT.new/var/cache/apt/archives/"*.deb "$ROOT.new/var/lib/apt/lists/"*
rm -rf "$ROOT"
mv "$ROOT.new" "$ROOT"
echo "$RECIPE" >"$STAMP"
echo "$ROOT"
