# vgpu: the two commands a newcomer runs are `make demo` and `make test`.
# Both work on a fresh Debian 12 / Ubuntu 24.04 machine as root (or with sudo): they install
# the apt packages they need when missing, create .venv, install vgpu into it, and run.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PYTEST := $(VENV)/bin/pytest
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

# What the tool itself needs (libvirt-python builds against libvirt-dev).
APT_RUNTIME := python3-venv python3-dev gcc pkg-config libvirt-dev
# What the tests need on top: real libudev under umockdev, libvirt's schemas and daemon, a
# real sshd, network namespaces, clang-22 for the HIP device-code tier.
APT_TEST := umockdev libxml2-utils libvirt-clients openssh-server openssh-client iproute2 \
            clang-22 lld-22 llvm-22
UMOCKDEV_PRELOAD := libumockdev-preload.so.0

.PHONY: demo test deps-runtime deps-test venv test-unit test-udev test-integration test-hip bench clean

demo: deps-runtime venv
	@tools/demo.sh "$(VENV)"

test: deps-test venv
	$(MAKE) --no-print-directory test-unit test-udev test-hip test-integration

test-unit:
	$(PYTEST) -q tests/unit

# Tier 2: discovery through real libudev (pyudev) seeing simulated trees via umockdev.
test-udev:
	VGPU_REQUIRE_UMOCKDEV=1 LD_PRELOAD=$(UMOCKDEV_PRELOAD) $(PYTEST) -q -m udev tests/udev

test-hip:
	$(PYTEST) -q tests/hip

test-integration:
	$(PYTEST) -q tests/integration

bench: venv
	$(PY) benchmarks/run.py

deps-runtime:
	@tools/apt-ensure.sh $(APT_RUNTIME)

deps-test: deps-runtime
	@tools/apt-ensure.sh $(APT_TEST)

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	@[ -x $(PY) ] || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	@touch $@

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache
