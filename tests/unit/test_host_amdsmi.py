"""The host amd-smi (GIM build) reader, on real-shaped outputs (tests/fixtures/amd-smi, from AMD's GIM docs
and public captures) and on its documented return codes."""

from __future__ import annotations

from pathlib import Path

import pytest

from vgpu.host.amdsmi import (AmdSmiError, AmdSmiNoDevice, AmdSmiNotSupported, AmdSmiPermission, error_for,
                              parse_list_json, parse_static, read_amdsmi)
from vgpu.model.pci import PciAddress

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "amd-smi"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


def test_list_json_of_a_gim_host_gives_pfs_and_their_vfs():
    gpu, = parse_list_json(fixture("gim-host-list-json-mi300x.txt"))
    assert (gpu.index, gpu.bdf, gpu.uuid) == (0, PciAddress.parse("0000:0c:00.0"),
                                             "10ff74a1-0000-1000-8000-000000001010")
    assert [(vf.index, str(vf.bdf)) for vf in gpu.vfs] == [(0, "0000:0c:02.0")]


def test_static_text_gives_the_vbios_and_says_1vf():
    fw, = parse_static(fixture("gim-host-static-mi300x-doc-v32.txt"))
    assert (str(fw.bdf), fw.name, fw.version) == ("0000:0c:00.0", "AMD MI300X_PRODUCTION_1VF",
                                                  "022.040.003.036.000001")
    assert fw.single_vf


def test_static_json_gives_the_ifwi_of_every_gpu():
    fws = parse_static(fixture("dell-static-json-8x-mi300x-root.txt"))
    assert len(fws) == 8 and all(f.name == "AMD MI300X_HW_SRIOV_CVS_1VF" and f.single_vf for f in fws)
    assert str(fws[0].bdf) == "0000:1b:00.0" and fws[0].part_number == "113-M3000108-103"


@pytest.mark.parametrize("status, cls, words", [
    (253, AmdSmiNoDevice, "device not found"), (-3, AmdSmiNoDevice, "device not found"),
    (249, AmdSmiNotSupported, "command not supported"), (248, AmdSmiNotSupported, "parameter not supported"),
    (245, AmdSmiPermission, "permission denied"), (156, AmdSmiError, "unknown error"),
    (23, AmdSmiError, "exit 23")])
def test_return_codes_map_to_typed_errors(status, cls, words):
    exc = error_for(status, ["static", "--ifwi"], "Permission denied. This action requires elevated privileges.\n")
    assert type(exc) is cls and words in exc.message and exc.message.startswith("amd-smi static --ifwi failed:")
    assert (exc.hint is not None) == (cls is AmdSmiPermission)


def test_no_amdsmi_and_a_failing_amdsmi_say_what_could_not_be_read():
    assert read_amdsmi(None).unavailable == "amd-smi (GIM build) is not installed on this host"
    view = read_amdsmi(lambda args: (245, "", "Permission denied. This action requires elevated privileges."))
    assert view.unavailable.startswith("amd-smi list --json failed: permission denied")
    garbage = read_amdsmi(lambda args: (0, "not json", ""))
    assert garbage.unavailable.startswith("amd-smi printed something vgpu cannot read")


def test_a_working_amdsmi_is_read_through_the_runner():
    outputs = {"list": fixture("gim-host-list-json-mi300x.txt"), "static": fixture("gim-host-static-mi300x-doc-v32.txt")}
    seen = []

    def runner(args):
        seen.append(list(args))
        return 0, outputs[args[0]], ""
    view = read_amdsmi(runner)
    assert view.unavailable is None and view.firmware[PciAddress.parse("0000:0c:00.0")].single_vf
    assert seen == [["list", "--json"], ["static", "--bus", "--ifwi", "--json"]]
