# vgpu: the two commands a newcomer runs are `make demo` and `make test`.
# Both work on a fresh Debian 12 / Ubuntu 24.04 machine as root (or with sudo): they install
# the apt packages they need when missing, create .venv, install vgpu into it, and run.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# Every tier names its tests that took over 30 s (a run that is slow under load says where the time went).
PYTEST_REPORT ?= --durations=8 --durations-min=30
PYTEST := $(VENV)/bin/pytest $(PYTEST_REPORT)
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
# Tiers made of independent CLI runs (each case its own temporary directory) use every core.
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
# In the two lanes of `make test` each tier keeps its temporary files in its own directory (a fresh mktemp -d per
# lane): tiers running side by side never share pytest's numbered /tmp/pytest-of-USER directories, whose retention
# would delete a running tier's files. Run alone, a tier uses pytest's default.
TIER_TMP = $(if $(TIER_BASE),--basetemp=$(TIER_BASE)/$@)

# What the tool itself needs (libvirt-python builds against libvirt-dev).
APT_RUNTIME := python3-venv python3-dev gcc pkg-config libvirt-dev openssh-server openssh-client
# What the tests need on top: real libudev under umockdev, libvirt's schemas and daemon, a
# real sshd, network namespaces, clang-22 for the HIP device-code tier, Chromium for the HTML reports in a real
# headless browser (tests/e2e/test_report_browser.py).
APT_TEST := umockdev libxml2-utils libvirt-clients openssh-server openssh-client iproute2 \
            clang-22 lld-22 llvm-22 chromium
UMOCKDEV_PRELOAD := libumockdev-preload.so.0
# Tier 4: a QEMU TCG guest with a real kernel (emulated SR-IOV NVMe + Intel IOMMU) and a Debian
# root that debootstrap builds once into /var/cache/vgpu-realkernel (the guest's own packages,
# linux-image-amd64 udev kmod pciutils python3 python3-pyudev, come from the mirror, not from apt here).
APT_REALKERNEL := qemu-system-x86 debootstrap
# Tier 3 Molecule hosts: systemd-nspawn Debian 12 roots (debootstrap, cached in /var/cache/vgpu-molecule) and a
# local signed apt repository (dpkg-deb, apt-ftparchive, gpg).
APT_MOLECULE := systemd-container debootstrap apt-utils gpg iproute2 openssh-client
# The simulated ESXi 8 host (make demo and the ESXi tier): govmomi's vSphere API simulator, built offline from
# Debian's source of govmomi with Go (tools/vcsim/main.go, cached in ~/.cache/vgpu/vcsim).
APT_ESXI := golang-go golang-github-vmware-govmomi-dev


.PHONY: test-e2e test-esxi test-hostile test-ansible test-molecule deps-molecule deps-esxi collections \
        test-lane-main test-lane-hosts test-ansible-oldest ansible-oldest
.PHONY: demo test deps-runtime deps-test deps-realkernel venv test-unit test-udev test-integration test-hip \
        test-realkernel bench clean

demo: deps-runtime deps-esxi venv collections
	@tools/demo.sh "$(VENV)"

test: deps-test deps-molecule deps-realkernel venv collections
	$(MAKE) --no-print-directory -j2 --output-sync=recurse test-lane-main test-lane-hosts

# Two lanes side by side from the start: the suite stays under 20 minutes on 2 cores. The hosts lane keeps the
# three tiers that use network namespaces and real hosts (Molecule, the real kernel, SSH in namespaces) one after
# the other; they wait on package installs, SSH and a QEMU guest much of the time, so the main lane's tiers (which
# spread over every core with pytest-xdist) fill the cores meanwhile. Each lane's output is printed when it ends.
test-lane-main:
	@base=$$(mktemp -d /tmp/vgpu-lane.XXXXXX) && $(MAKE) -j1 --no-print-directory TIER_BASE=$$base \
	  test-unit test-hostile test-e2e test-esxi test-ansible test-ansible-oldest test-udev test-hip && rm -rf -- "$$base"

test-lane-hosts:
	@base=$$(mktemp -d /tmp/vgpu-lane.XXXXXX) && $(MAKE) -j1 --no-print-directory TIER_BASE=$$base \
	  test-molecule test-realkernel test-integration && rm -rf -- "$$base"

# ESXi 8 through the vSphere API: the real CLI against govmomi's simulator over HTTPS (pyVmomi is never mocked).
test-esxi: deps-esxi
	$(PYTEST) -q -n $(JOBS) tests/esxi

# End to end on simulated hosts: the real CLI and services, crashes, faults, races; the HTML reports in headless
# Chromium (VGPU_REQUIRE_BROWSER=1: a missing chromium fails instead of skipping).
test-e2e:
	VGPU_REQUIRE_BROWSER=1 $(PYTEST) -q -n $(JOBS) tests/e2e

test-unit:
	$(PYTEST) -q -n $(JOBS) tests/unit

# Hostile input, signals and non-root runs against the real CLI: exit code, one line, nothing outside changed.
test-hostile:
	VGPU_REQUIRE_NONROOT=1 $(PYTEST) -q -n $(JOBS) tests/hostile

# Tier 2: discovery through real libudev (pyudev) seeing simulated trees via umockdev.
test-udev:
	VGPU_REQUIRE_UMOCKDEV=1 LD_PRELOAD=$(UMOCKDEV_PRELOAD) $(PYTEST) $(TIER_TMP) -q -m udev tests/udev

# The Ansible collection (vgpu.instinct) and playbooks: syntax, ansible-lint (production, offline),
# argument specs, refusals, reboot gate, and the RHEL/Ubuntu files rendered by ansible's templar; ansible-doc on every
# plugin and ansible-test sanity (tools/ansible-sanity.sh, its virtualenvs cached in .cache/ansible-test).
# Collections come from the `ansible` wheel (tools/fetch-collections.sh); VGPU_REQUIRE_ANSIBLE=1
# turns a missing tool into a failure instead of a skip.
test-ansible: venv collections
	VGPU_REQUIRE_ANSIBLE=1 $(PYTEST) $(TIER_TMP) -q -n $(JOBS) tests/ansible

# The roles again on the OLDEST ansible-core the collection declares (meta/runtime.yml's requires_ansible; the
# venv has the newest pip gives this Python): its own venv, ansible-core only, from PyPI. The runs that execute
# role tasks (booleans and the reboot gate, refusals, check mode, the OS families' files).
RUNTIME_YML := collections/ansible_collections/vgpu/instinct/meta/runtime.yml
ANSIBLE_OLDEST = $(shell sed -n 's/^requires_ansible: *">=\([0-9]*\.[0-9]*\).*/\1/p' $(RUNTIME_YML))
OLDEST_VENV = .venv-ansible-$(ANSIBLE_OLDEST)
ROLE_TESTS := tests/ansible/test_booleans.py tests/ansible/test_refusals.py tests/ansible/test_check_mode.py \
              tests/ansible/test_render_os_families.py
test-ansible-oldest: venv collections ansible-oldest
	VGPU_ANSIBLE_BIN=$(OLDEST_VENV)/bin VGPU_ANSIBLE_EXPECT=$(ANSIBLE_OLDEST) VGPU_REQUIRE_ANSIBLE=1 \
	  $(PYTEST) $(TIER_TMP) -q $(ROLE_TESTS)

# The roles converged on real Debian 12 hosts (systemd-nspawn, SSH) from a local signed repository: create,
# converge, idempotence, verify (~1.5 min per scenario; the first run builds the root, ~1 min).
test-molecule: deps-molecule venv collections ansible-oldest
	VGPU_REQUIRE_MOLECULE=1 $(PYTEST) $(TIER_TMP) -q tests/molecule

ansible-oldest:
	@[ -n "$(ANSIBLE_OLDEST)" ] || { echo "no requires_ansible in $(RUNTIME_YML)" >&2; exit 1; }
	@[ -x $(OLDEST_VENV)/bin/ansible-playbook ] || { $(PYTHON) -m venv $(OLDEST_VENV) && \
	  $(OLDEST_VENV)/bin/python -m pip install -q "ansible-core==$(ANSIBLE_OLDEST).*"; }

deps-molecule:
	@tools/apt-ensure.sh $(APT_MOLECULE)

collections: venv
	@tools/fetch-collections.sh $(PY)

test-hip:
	$(PYTEST) $(TIER_TMP) -q tests/hip

test-integration:
	$(PYTEST) $(TIER_TMP) -q tests/integration

# Tier 4: vgpu's vfio binding against a real kernel (55-130 s; the first run builds the root, ~2.5 min).
# Skips with the reason where it cannot run; VGPU_REQUIRE_REALKERNEL=1 makes that a failure.
test-realkernel: deps-realkernel venv
	$(PYTEST) $(TIER_TMP) -q -m realkernel tests/realkernel

bench: venv
	$(PY) benchmarks/run.py

deps-runtime:
	@tools/apt-ensure.sh $(APT_RUNTIME)

deps-test: deps-runtime deps-esxi
	@tools/apt-ensure.sh $(APT_TEST)

deps-esxi:
	@tools/apt-ensure.sh $(APT_ESXI)

deps-realkernel:
	@tools/apt-ensure.sh $(APT_REALKERNEL)

venv: $(VENV)/.installed

# -qq: pip's errors only (its warnings, e.g. about an unreachable extra index, and setuptools' editable-install
# banner are noise before the demo's first step); a failed install still prints why and stops make.
$(VENV)/.installed: pyproject.toml
	@[ -x $(PY) ] || $(PYTHON) -m venv $(VENV)
	@echo "installing vgpu and its dependencies into $(VENV) (quiet; errors are shown)"
	@$(PY) -m pip install -qq --upgrade pip
	@$(PY) -m pip install -qq -e '.[test]'
	@touch $@

clean:
	rm -rf $(VENV) .venv-ansible-* build dist *.egg-info .pytest_cache
