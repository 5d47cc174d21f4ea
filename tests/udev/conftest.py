"""Tier 2: real libudev (pyudev) seeing simulated sysfs trees through umockdev's preload.

`make test-udev` runs this directory with LD_PRELOAD=libumockdev-preload.so.0 and
VGPU_REQUIRE_UMOCKDEV=1, so a missing preload fails there instead of skipping.
"""

import os

import pytest


def _preloaded() -> bool:
    return "umockdev-preload" in os.environ.get("LD_PRELOAD", "")


@pytest.fixture
def testbed(monkeypatch):
    """Point libudev at a simulated host: returns a function taking the SimHost."""
    if not _preloaded():
        if os.environ.get("VGPU_REQUIRE_UMOCKDEV"):
            pytest.fail("VGPU_REQUIRE_UMOCKDEV is set but libumockdev-preload is not in LD_PRELOAD")
        pytest.skip("needs LD_PRELOAD=libumockdev-preload.so.0 (run `make test-udev`)")

    def use(host):
        monkeypatch.setenv("UMOCKDEV_DIR", str(host.root))
        return host
    return use
