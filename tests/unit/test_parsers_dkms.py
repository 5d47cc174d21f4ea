"""dkms status parser. No fixture exists: the samples follow dkms(8)'s status format, as printed by
dkms >= 2.8 ("module/version, kernel, arch: state") and older 2.x ("module, version, kernel, arch:
state"), with the amdgpu-dkms versions of the ROCm guest fixtures (6.16.13, 6.14.14)."""

import pytest

from vgpu.guest.agent.parsers.common import ParseError
from vgpu.guest.agent.parsers.dkms import find_module, parse_dkms_status

NEW_FORM = "amdgpu/6.16.13-2278356.24.04, 6.8.0-79-generic, x86_64: installed\n"
OLD_FORM = "amdgpu, 6.8.5-2041575.22.04, 5.15.0-119-generic, x86_64: installed\n"


def test_new_slash_form_installed():
    (entry,) = parse_dkms_status(NEW_FORM)
    assert (entry.module, entry.version) == ("amdgpu", "6.16.13-2278356.24.04")
    assert (entry.kernel, entry.arch, entry.state, entry.status) == (
        "6.8.0-79-generic", "x86_64", "installed", "installed")
    assert entry.installed


def test_old_comma_form_installed():
    (entry,) = parse_dkms_status(OLD_FORM)
    assert (entry.module, entry.version) == ("amdgpu", "6.8.5-2041575.22.04")
    assert entry.kernel == "5.15.0-119-generic"


def test_added_and_built_states():
    text = ("amdgpu/6.14.14-2193512.24.04: added\n"
            "amdgpu/6.16.13-2278356.24.04, 6.14.0-29-generic, x86_64: built\n")
    added, built = parse_dkms_status(text)
    assert (added.state, added.kernel, added.arch) == ("added", None, None)
    assert (built.state, built.kernel) == ("built", "6.14.0-29-generic") and not built.installed


def test_state_notes_are_kept():
    text = ("amdgpu/6.16.13-2278356.24.04, 6.8.0-79-generic, x86_64: installed (original_module exists)\n"
            "amdgpu/6.16.13-2278356.24.04, 6.8.0-80-generic, x86_64: installed "
            "(WARNING! Diff between built and installed module!)\n")
    first, second = parse_dkms_status(text)
    assert first.installed and first.note == "original_module exists"
    assert second.status.startswith("installed (WARNING!")


def test_several_modules_crlf_tabs_and_error_lines():
    text = ("Error! Could not locate dkms.conf file.\r\n"
            "File: /var/lib/dkms/foo/1.0/source/dkms.conf does not exist.\r\n"
            "nvidia/550.54.14, 6.8.0-79-generic, x86_64: installed  \r\n"
            "\tamdgpu/6.16.13-2278356.24.04, 6.8.0-79-generic, x86_64: installed\r\n")
    entries = parse_dkms_status(text)
    assert [e.module for e in entries] == ["nvidia", "amdgpu"]
    assert find_module(entries, "amdgpu", "6.8.0-79-generic")[0].version == "6.16.13-2278356.24.04"
    assert find_module(entries, "amdgpu", "6.14.0-29-generic") == []


def test_empty_output_means_no_modules():
    assert parse_dkms_status("") == [] and parse_dkms_status("\n  \n") == []


def test_foreign_output_raises_parse_error():
    with pytest.raises(ParseError):
        parse_dkms_status("bash: dkms: command not found\n")
