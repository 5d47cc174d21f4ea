"""The vgpu guests file (YAML, version v1): what it yields and how it refuses bad input."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from vgpu.errors import ExitCode, InputError
from vgpu.guest.targets import ExpectSpec, parse_guests_file


def parse(text: str, base: Path):
    return parse_guests_file(textwrap.dedent(text), source="guests.yaml", base_dir=base)


def test_defaults_apply_to_every_guest_and_guest_fields_win(tmp_path):
    (tmp_path / "keys").mkdir()
    (tmp_path / "keys" / "id").write_text("k")
    (tmp_path / "other").write_text("k")
    targets = parse("""
        version: v1
        defaults: {user: ubuntu, port: 2222, identity: keys/id, profile: mi300x-4vf}
        guests:
          - {name: vm-a, host: 10.0.0.11}
          - {host: vm-b.example.com, port: 22, user: root, identity: %s,
             expect: {model: MI325X, compute: SPX, memory: NPS1, vf: false}}
        """ % (tmp_path / "other"), tmp_path)
    a, b = targets
    assert (a.name, a.endpoint.host, a.endpoint.port, a.endpoint.user) == ("vm-a", "10.0.0.11", 2222, "ubuntu")
    assert a.endpoint.identity == tmp_path / "keys" / "id" and a.profile == "mi300x-4vf" and a.expect is None
    assert (b.name, b.endpoint.port, b.endpoint.user) == ("vm-b.example.com", 22, "root")
    assert b.endpoint.identity == tmp_path / "other"
    assert b.profile is None and b.expect == ExpectSpec("MI325X", "SPX", "NPS1", False)


def test_guest_with_its_own_expect_block_does_not_inherit_the_default_profile(tmp_path):
    (t,) = parse("""
        version: v1
        guests:
          - {host: h, expect: {model: MI300X, compute: QPX}}
        """, tmp_path)
    assert t.expect == ExpectSpec(model="MI300X", compute="QPX", memory=None, is_vf=True)
    assert t.profile is None


def test_guests_share_an_expectation_through_a_yaml_anchor(tmp_path):
    """Anchors are how people (and yaml.safe_dump) write a shared block once; they are counted, not refused."""
    a, b = parse("""
        version: v1
        guests:
          - {host: h1, expect: &mi {model: MI300X, compute: CPX, memory: NPS4}}
          - {host: h2, expect: *mi}
        """, tmp_path)
    assert a.expect == b.expect == ExpectSpec("MI300X", "CPX", "NPS4", True)


def test_env_python_and_skip_workloads_are_carried(tmp_path):
    (t,) = parse("""
        version: v1
        guests:
          - {host: h, env: {HTTPS_PROXY: "http://p:3128"}, python: /usr/bin/python3.12, skip_workloads: true}
        """, tmp_path)
    assert t.env == (("HTTPS_PROXY", "http://p:3128"),) and t.python == "/usr/bin/python3.12"
    assert t.skip_workloads is True


@pytest.mark.parametrize("text, message", [
    ("version: v2\nguests: [{host: h}]", r"version: .*unsupported version 'v2'"),
    ("guests: [{host: h}]", r"version: Field required"),
    ("version: v1\nguests: []", r"guests: List should have at least 1 item"),
    ("version: v1\nguests: [{host: h, passwd: x}]", r"guests.0.passwd: Extra inputs are not permitted"),
    ("version: v1\nguests: [{host: h, port: 70000}]", r"guests.0.port: Input should be less than"),
    ("version: v1\nguests: [{name: x}]", r"guests.0: no host given"),
    ("version: v1\nguests: [{host: 'h; rm -rf /'}]", r"host 'h; rm -rf /' is not a host name"),
    ("version: v1\nguests: [{host: a}, {host: b, name: a}]", r"guest name 'a' appears twice"),
    ("version: v1\nguests: [{host: h, env: {'A B': x}}]", r"'A B' is not an environment variable name"),
    ("version: v1\nguests: [{host: h, profile: p, expect: {model: MI300X}}]", r"either a profile or an expect"),
    ("version: v1\nguests: [{host: h, identity: nope}]", r"identity file .*nope does not exist"),
    ("version: v1\nguests: [{host: h\n", r"line \d+, column \d+: not valid YAML"),
    ("- just\n- a list", r"top level: Input should be a valid dictionary"),
])
def test_bad_guests_file_is_one_input_error_naming_the_field(tmp_path, text, message):
    with pytest.raises(InputError, match=message) as info:
        parse(text, tmp_path)
    assert info.value.exit_code == ExitCode.BAD_INPUT
    assert "\n" not in info.value.message


def test_identity_with_tilde_is_expanded(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / ".ssh").mkdir()
    (tmp_path / ".ssh" / "id_ed25519").write_text("k")
    (t,) = parse("version: v1\nguests: [{host: h, identity: ~/.ssh/id_ed25519}]", Path("/nonexistent"))
    assert t.endpoint.identity == tmp_path / ".ssh" / "id_ed25519"


# issue 8 section 9: IPv6 literals are guest addresses; ports are strict integers

@pytest.mark.parametrize("written,host", [("::1", "::1"), ("[::1]", "::1"), ("2001:db8::5", "2001:db8::5"),
                                          ("[2001:db8::5]", "2001:db8::5"), ("fe80::1%eth0", "fe80::1%eth0"),
                                          ("[fe80::1%2]", "fe80::1%2")])
def test_ipv6_literal_hosts_are_accepted_without_brackets(tmp_path, written, host):
    (t,) = parse(f"""
        version: v1
        guests: [{{host: '{written}', port: 2222}}]
        """, tmp_path)
    assert t.endpoint.host == host
    assert t.endpoint.address == f"[{host}]:2222"


@pytest.mark.parametrize("host", ["-oProxyCommand=x", "fe80::1%-oX", "fe80::1%", "[-x]", "[::1]:22", "::1 x"])
def test_option_like_or_broken_hosts_are_refused(tmp_path, host):
    with pytest.raises(InputError, match="is not a host name or address"):
        parse(f"""
            version: v1
            guests: [{{host: '{host}'}}]
            """, tmp_path)


@pytest.mark.parametrize("port", ["true", "'22'", "22.0", "0", "65536"])
def test_port_is_a_strict_integer_in_range(tmp_path, port):
    with pytest.raises(InputError, match="guests.0.port"):
        parse(f"""
            version: v1
            guests: [{{host: h, port: {port}}}]
            """, tmp_path)

