#!/bin/sh
# Runs as PID 1 inside the tier-4 QEMU guest (exec'd by /sbin/vgpu-realkernel-init from the root
# that build-root.sh made). It brings up just enough of a host for vgpu's binding code: proc, sysfs,
# devtmpfs, tmpfs scratch space, udevd, the vfio-pci module. It then runs guest_driver.py from the
# repository (shared read-only over 9p at /mnt/vgpu) and powers off whatever happened: the host
# side reads result.json and console.log from the shared out directory (/mnt/out).
# docs/testing.md (tier 4): 9p refuses sockets, so /run and /tmp are tmpfs; the init must power off.
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
export PYTHONDONTWRITEBYTECODE=1 PYTHONPATH=/mnt/vgpu

poweroff_now() {
  sync
  echo o >/proc/sysrq-trigger
  sleep 30
}

mountpoint -q /proc || mount -t proc proc /proc
mountpoint -q /sys || mount -t sysfs sysfs /sys
mountpoint -q /dev || mount -t devtmpfs devtmpfs /dev
mountpoint -q /run || mount -t tmpfs -o mode=0755 tmpfs /run
mount -t tmpfs -o mode=1777 tmpfs /tmp
mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 out /mnt/out || poweroff_now

log=/mnt/out/guest.log
{
  echo "guest: kernel $(uname -r), cmdline: $(cat /proc/cmdline)"
  # udevd handles the add/bind uevents that `udevadm settle` (LinuxKernel.settle) waits for.
  /lib/systemd/systemd-udevd --daemon --resolve-names=never
  udevadm trigger --action=add --subsystem-match=pci
  udevadm settle --timeout=30
  # driver_override names a driver; it does not load the module (Documentation/ABI/testing/sysfs-bus-pci).
  modprobe vfio-pci
  echo "guest: udevd up, vfio-pci loaded; running guest_driver.py"
} >"$log" 2>&1

timeout 240 python3 /mnt/vgpu/tools/realkernel/guest_driver.py --out /mnt/out/result.json >>"$log" 2>&1
echo "guest: guest_driver.py exited with $?" >>"$log"
dmesg >/mnt/out/dmesg.txt 2>&1
poweroff_now
