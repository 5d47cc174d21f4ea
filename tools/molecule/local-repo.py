#!/usr/bin/env python3
"""A local, signed apt repository standing in for AMD's and the distribution's, for the Molecule hosts.

    local-repo.py build DIR              build the stand-in packages, index and sign them; DIR/rocm/rocm.gpg.key
    local-repo.py serve DIR ADDR PORT    serve DIR over HTTP (daemonized; pid in DIR/.http.pid)
    local-repo.py stop DIR

Layout, as repo.radeon.com lays it out (the roles' default URL rules apply unchanged under a new base):
  amdgpu/30.10.1/ubuntu  dists/noble   amdgpu-dkms           (the decoupled driver)
  rocm/apt/7.0.1         dists/noble   rocm                  (the ROCm 7.0.1 user stack)
  graphics/7.0.1/ubuntu  dists/noble   (empty)
  debian                 dists/bookworm  dkms, linux-headers-<kernel>, linux-modules-extra-<kernel>, build
                                        prerequisites, grub2-common (the site's distribution mirror)
  releases/download/mainline/8.5.0.K   gim-dkms_8.5.0.K_all.deb (GIM's release asset; URL .../mainline%2F8.5.0.K/...)
The packages are built here with dpkg-deb; their maintainer scripts do what the real ones do: amdgpu-dkms
registers, builds and installs its module with dkms for the running kernel, rocm installs /opt/rocm-7.0.1 with
.info/version. `dkms` is a stand-in too (Debian's real one pulls a compiler and builds nothing here): it keeps
the same tree (/var/lib/dkms/<module>/<version>/<kernel>/<arch>, build/make.log, /lib/modules/<kernel>/updates/dkms)
and prints `dkms status` in the real format, `amdgpu/6.14.14, <kernel>, x86_64: installed`. grub2-common's
update-grub is a stand-in as well: it computes the next boot's kernel command line from /etc/default/grub(.d),
and a boot unit binds it over /proc/cmdline, so kernel arguments take effect after a reboot, not before.
Every Release file is signed (InRelease and Release.gpg) with a throw-away key made for this repository.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ORIGIN = "vgpu test mirror"
DRIVER, DRIVER_MODULE_VERSION = "30.10.1", "6.14.14"
ROCM = "7.0.1"
GIM = "8.5.0.K"

UPDATE_GRUB = r"""#!/bin/sh
# vgpu test stand-in for update-grub: works out the next boot's kernel command line as grub-mkconfig
# would (/etc/default/grub, then /etc/default/grub.d/*.cfg); vgpu-test-cmdline.service hands it to the
# container at boot, as a boot loader hands it to a kernel. Arguments take effect only after a reboot.
set -e
GRUB_CMDLINE_LINUX=""
GRUB_CMDLINE_LINUX_DEFAULT="quiet"
[ -f /etc/default/grub ] && . /etc/default/grub
for f in /etc/default/grub.d/*.cfg; do [ -f "$f" ] && . "$f"; done
mkdir -p /boot/grub
echo "BOOT_IMAGE=/boot/vmlinuz-$(uname -r) root=/dev/vda1 ro $GRUB_CMDLINE_LINUX $GRUB_CMDLINE_LINUX_DEFAULT" \
  > /boot/grub/vgpu-test-cmdline
echo "Generating grub configuration file ... done" >&2
"""
CMDLINE_UNIT = """[Unit]
Description=vgpu test stand-in: the kernel command line the boot loader passed
DefaultDependencies=no
Before=sysinit.target
ConditionPathExists=/boot/grub/vgpu-test-cmdline

[Service]
Type=oneshot
ExecStart=/bin/mount --bind /boot/grub/vgpu-test-cmdline /proc/cmdline

[Install]
WantedBy=sysinit.target
"""

DKMS = r"""#!/bin/sh
# vgpu test stand-in for dkms: add, build, install, remove, status, on the real dkms tree layout.
set -e
cmd=${1:-status}; [ $# -gt 0 ] && shift
m=""; v=""; k=""
while [ $# -gt 0 ]; do
  case "$1" in
    -m) m=${2%%/*}; case "$2" in */*) v=${2#*/};; esac; shift 2;;
    -v) v=$2; shift 2;;
    -k) k=$2; shift 2;;
    *) case "$1" in */*) m=${1%%/*}; v=${1#*/};; esac; shift;;
  esac
done
root=/var/lib/dkms
kernel=${k:-$(uname -r)}
case "$cmd" in
  add) mkdir -p "$root/$m/$v"; ln -sfn "/usr/src/$m-$v" "$root/$m/$v/source";;
  build)
    mkdir -p "$root/$m/$v/build" "$root/$m/$v/$kernel/x86_64/module"
    if [ -e /etc/vgpu-test/dkms-fail ]; then
      echo "make: *** [Makefile:42: $m.ko] Error 1 (stand-in failure)" > "$root/$m/$v/build/make.log"
      echo "Error! Bad return status for module build on kernel: $kernel (x86_64)" >&2
      echo "Consult $root/$m/$v/build/make.log for more information." >&2
      exit 10
    fi
    echo "stand-in build of $m $v for $kernel" > "$root/$m/$v/build/make.log"
    : > "$root/$m/$v/$kernel/x86_64/module/$m.ko";;
  install)
    mkdir -p "/lib/modules/$kernel/updates/dkms"
    cp "$root/$m/$v/$kernel/x86_64/module/$m.ko" "/lib/modules/$kernel/updates/dkms/$m.ko"
    : > "$root/$m/$v/$kernel/x86_64/installed";;
  remove) rm -rf "${root:?}/$m/$v"; rm -f "/lib/modules/$kernel/updates/dkms/$m.ko";;
  status)
    for dir in "$root"/*/*/*/x86_64; do
      [ -d "$dir" ] || continue
      rest=${dir#"$root"/}; mod=${rest%%/*}; rest=${rest#*/}; ver=${rest%%/*}; rest=${rest#*/}; kv=${rest%%/*}
      [ -z "$m" ] || [ "$m" = "$mod" ] || continue
      [ -z "$k" ] || [ "$k" = "$kv" ] || continue
      state=built; [ -e "$dir/installed" ] && state=installed
      echo "$mod/$ver, $kv, x86_64: $state"
    done;;
  *) echo "dkms stand-in: $cmd is not supported" >&2; exit 2;;
esac
"""


def deb(out: Path, name: str, version: str, *, depends: str = "", files: dict[str, str | tuple] | None = None,
        postinst: str = "", prerm: str = "", description: str = "") -> None:
    """Build one Architecture: all package with dpkg-deb. files: path -> text, or ("link", target)."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "DEBIAN").mkdir()
        control = [f"Package: {name}", f"Version: {version}", "Architecture: all", "Maintainer: vgpu tests <t@t>",
                   f"Description: {description or 'vgpu test stand-in for ' + name}"]
        if depends:
            control.insert(3, f"Depends: {depends}")
        (root / "DEBIAN/control").write_text("\n".join(control) + "\n")
        for script, body in (("postinst", postinst), ("prerm", prerm)):
            if body:
                p = root / "DEBIAN" / script
                p.write_text("#!/bin/sh\nset -e\n" + textwrap.dedent(body))
                p.chmod(0o755)
        for path, content in (files or {}).items():
            target = root / path.lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(content, tuple):
                target.symlink_to(content[1])
            else:
                target.write_text(content)
                target.chmod(0o755 if path.startswith(("/usr/sbin/", "/usr/bin/")) else 0o644)
        out.mkdir(parents=True, exist_ok=True)
        subprocess.run(["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", str(root),
                        str(out / f"{name}_{version}_all.deb")], check=True, capture_output=True)


def dkms_deb(out: Path, name: str, version: str, module: str, module_version: str) -> None:
    """A DKMS package as AMD builds them (gim-dkms, amdgpu-dkms): the sources' dkms.conf under /usr/src, and
    maintainer scripts that add, build and install the module for the running kernel, and remove it."""
    v = module_version
    deb(out, name, version, depends="dkms",
        files={f"/usr/src/{module}-{v}/dkms.conf": f'PACKAGE_NAME="{module}"\nPACKAGE_VERSION="{v}"\nAUTOINSTALL="yes"\n'},
        postinst=f"""
            if [ "$1" = configure ]; then
              dkms add -m {module} -v {v}
              dkms build -m {module} -v {v} -k "$(uname -r)"
              dkms install -m {module} -v {v} -k "$(uname -r)"
            fi
        """, prerm=f"""dkms remove -m {module} -v {v} -k "$(uname -r)" || true\n""")


def index(repo: Path, suite: str, gnupghome: Path) -> None:
    """dists/SUITE/main/binary-amd64/Packages and a signed Release (InRelease, Release.gpg)."""
    binary = repo / "dists" / suite / "main" / "binary-amd64"
    binary.mkdir(parents=True, exist_ok=True)
    (repo / "pool").mkdir(exist_ok=True)
    packages = subprocess.run(["apt-ftparchive", "packages", "pool"], cwd=repo, check=True, capture_output=True,
                              text=True).stdout
    (binary / "Packages").write_text(packages)
    release = subprocess.run(
        ["apt-ftparchive", "-o", f"APT::FTPArchive::Release::Origin={ORIGIN}",
         "-o", f"APT::FTPArchive::Release::Label={ORIGIN}", "-o", f"APT::FTPArchive::Release::Suite={suite}",
         "-o", f"APT::FTPArchive::Release::Codename={suite}", "-o", "APT::FTPArchive::Release::Architectures=amd64",
         "-o", "APT::FTPArchive::Release::Components=main", "release", f"dists/{suite}"],
        cwd=repo, check=True, capture_output=True, text=True).stdout
    dists = repo / "dists" / suite
    (dists / "Release").write_text(release)
    env = dict(os.environ, GNUPGHOME=str(gnupghome))
    for args, name in ((["--clearsign"], "InRelease"), (["--detach-sign", "--armor"], "Release.gpg")):
        (dists / name).unlink(missing_ok=True)
        subprocess.run(["gpg", "--batch", "--yes", "--pinentry-mode", "loopback", "--passphrase", "",
                        "--default-key", "vgpu-test", *args, "-o", str(dists / name), str(dists / "Release")],
                       env=env, check=True, capture_output=True)


def build(base: Path, kernel: str) -> None:
    base.mkdir(parents=True, exist_ok=True)
    gnupghome = base / ".gnupg"
    gnupghome.mkdir(mode=0o700, exist_ok=True)
    env = dict(os.environ, GNUPGHOME=str(gnupghome))
    subprocess.run(["gpg", "--batch", "--pinentry-mode", "loopback", "--passphrase", "", "--quick-gen-key",
                    "vgpu-test", "ed25519", "sign", "1d"], env=env, check=True, capture_output=True)
    key = subprocess.run(["gpg", "--armor", "--export", "vgpu-test"], env=env, check=True, capture_output=True,
                         text=True).stdout
    (base / "rocm").mkdir(exist_ok=True)
    (base / "rocm" / "rocm.gpg.key").write_text(key)  # where repo.radeon.com keeps its key
    (base / "debian.asc").write_text(key)

    debian = base / "debian"
    deb(debian / "pool", "dkms", "3.0.10-8+vgpu", files={"/usr/sbin/dkms": DKMS})
    for name in (f"linux-headers-{kernel}", f"linux-modules-extra-{kernel}", "build-essential", "autoconf",
                 "automake", "bc"):
        deb(debian / "pool", name, "1.0", files={f"/usr/share/doc/{name}/vgpu-test": "stand-in\n"})
    unit = "/lib/systemd/system/vgpu-test-cmdline.service"
    deb(debian / "pool", "grub2-common", "2.06-13+vgpu",
        files={"/usr/sbin/update-grub": UPDATE_GRUB, unit: CMDLINE_UNIT,
               "/etc/systemd/system/sysinit.target.wants/vgpu-test-cmdline.service": ("link", unit)})
    index(debian, "bookworm", gnupghome)

    driver = base / "amdgpu" / DRIVER / "ubuntu"
    v = DRIVER_MODULE_VERSION
    dkms_deb(driver / "pool", "amdgpu-dkms", f"1:{v}.30101000-2212064.24.04", "amdgpu", v)
    index(driver, "noble", gnupghome)

    # GIM as AMD publishes it: a release asset, .../releases/download/mainline%2F<VER>/gim-dkms_<VER>_all.deb
    dkms_deb(base / "releases" / "download" / "mainline" / GIM, "gim-dkms", GIM, "gim", GIM)

    rocm = base / "rocm" / "apt" / ROCM
    deb(rocm / "pool", "rocm", f"{ROCM}.70001-42~24.04",
        files={f"/opt/rocm-{ROCM}/.info/version": f"{ROCM}-42\n", f"/opt/rocm-{ROCM}/lib/.keep": "",
               "/opt/rocm": ("link", f"rocm-{ROCM}")})
    index(rocm, "noble", gnupghome)
    index(base / "graphics" / ROCM / "ubuntu", "noble", gnupghome)
    # gpg started an agent for the throw-away key; it would outlive the run
    subprocess.run(["gpgconf", "--kill", "gpg-agent"], env=env, check=False, capture_output=True)


def serve(base: Path, addr: str, port: int) -> None:
    log = open(base / ".http.log", "ab")
    proc = subprocess.Popen([sys.executable, "-m", "http.server", "--bind", addr, "--directory", str(base), str(port)],
                            stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
    (base / ".http.pid").write_text(str(proc.pid))
    import socket
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            socket.create_connection((addr, port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"local-repo.py: http.server did not start on {addr}:{port}")


def stop(base: Path) -> None:
    pid = base / ".http.pid"
    if pid.exists():
        try:
            os.killpg(int(pid.read_text()), signal.SIGTERM)
        except ProcessLookupError:
            pass
        pid.unlink()


if __name__ == "__main__":
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    cmd, base = sys.argv[1], Path(sys.argv[2])
    if cmd == "build":
        build(base, sys.argv[3] if len(sys.argv) > 3 else os.uname().release)
    elif cmd == "serve":
        serve(base, sys.argv[3], int(sys.argv[4]))
    elif cmd == "stop":
        stop(base)
    else:
        raise SystemExit(__doc__)
