"""Ansible inventories (INI and YAML) read by the real ansible-inventory (vgpu.automation.inventory): hosts,
groups, group_vars, variables, precedence, --limit patterns, and the guards vgpu adds."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from vgpu.errors import InputError
from vgpu.guest.targets import ExpectSpec, targets_from_inventory

INI = """
# GPU guests of rack 7
standalone ansible_host=10.0.0.5

[gpu_guests]
vm[01:03] ansible_user=ubuntu
10.0.0.9:2222 vgpu_model=MI325X vgpu_is_vf=false
quoted ansible_host="10.0.0.42" ansible_ssh_private_key_file='{key}'

[gpu_guests:vars]
ansible_port=2200
vgpu_profile=mi300x-4vf

[mi300:children]
gpu_guests

[mi300:vars]
ansible_user=admin
ansible_python_interpreter=/usr/bin/python3.11

[all:vars]
ansible_user=root
"""


def parse(text: str, tmp_path, limit=None, name=None):
    key = tmp_path / "id_ed25519"
    key.write_text("k")
    text = textwrap.dedent(text).replace("{key}", str(key))
    path = tmp_path / (name or ("hosts.yml" if text.lstrip().startswith("all:") else "hosts"))
    path.write_text(text)
    return {t.name: t for t in targets_from_inventory(path, limit=limit)}


def test_ini_hosts_get_group_vars_with_deeper_groups_and_host_vars_winning(tmp_path):
    t = parse(INI, tmp_path)
    assert sorted(t) == ["10.0.0.9", "quoted", "standalone", "vm01", "vm02", "vm03"]
    assert (t["vm02"].endpoint.user, t["vm02"].endpoint.port) == ("ubuntu", 2200)  # host var beats groups
    assert t["quoted"].endpoint.user == "admin"  # mi300's vars beat all's
    assert t["standalone"].endpoint.user == "root" and t["standalone"].endpoint.port == 22
    assert t["quoted"].python == "/usr/bin/python3.11" and t["standalone"].python == "python3"


def test_ini_host_port_form_and_quoted_values(tmp_path):
    t = parse(INI, tmp_path)
    assert t["10.0.0.9"].endpoint.port == 2222
    assert t["quoted"].endpoint.host == "10.0.0.42"
    assert t["quoted"].endpoint.identity == tmp_path / "id_ed25519"


def test_vgpu_variables_give_the_expectation_and_a_host_model_beats_a_group_profile(tmp_path):
    t = parse(INI, tmp_path)
    assert t["10.0.0.9"].expect == ExpectSpec(model="MI325X", compute=None, memory=None, is_vf=False)
    assert t["10.0.0.9"].profile is None
    assert t["vm01"].profile == "mi300x-4vf" and t["standalone"].profile is None


def test_limit_selects_groups_and_hosts(tmp_path):
    assert sorted(parse(INI, tmp_path, limit="mi300")) == ["10.0.0.9", "quoted", "vm01", "vm02", "vm03"]
    assert sorted(parse(INI, tmp_path, limit="standalone,vm03")) == ["standalone", "vm03"]


def test_limit_takes_ansible_patterns(tmp_path):
    assert sorted(parse(INI, tmp_path, limit="mi300:!vm02")) == ["10.0.0.9", "quoted", "vm01", "vm03"]
    assert sorted(parse(INI, tmp_path, limit="vm0*")) == ["vm01", "vm02", "vm03"]


def test_limit_naming_nothing_known_is_refused(tmp_path):
    with pytest.raises(InputError, match="no hosts match --limit nope"):
        parse(INI, tmp_path, limit="nope")


def test_group_vars_and_host_vars_beside_the_file_apply_as_in_ansible(tmp_path):
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "group_vars" / "gpu.yml").write_text("ansible_user: gv\nansible_port: 2201\n")
    (tmp_path / "host_vars").mkdir()
    (tmp_path / "host_vars" / "vm2.yml").write_text("ansible_port: 2202\n")
    t = parse("[gpu]\nvm1\nvm2\n", tmp_path)
    assert (t["vm1"].endpoint.user, t["vm1"].endpoint.port) == ("gv", 2201)
    assert t["vm2"].endpoint.port == 2202


def test_ipv6_host_with_a_port_in_ini_form(tmp_path):
    t = parse("[gpu]\n[::1]:2222\n", tmp_path)
    assert (t["::1"].endpoint.host, t["::1"].endpoint.port) == ("::1", 2222)


def test_callers_ansible_settings_cannot_enable_other_inventory_plugins(tmp_path, monkeypatch):
    monkeypatch.setenv("ANSIBLE_INVENTORY_ENABLED", "script,auto,yaml,ini")
    script = tmp_path / "hosts"
    script.write_text("#!/bin/sh\ntouch %s\necho '{}'\n" % (tmp_path / "ran"))
    script.chmod(0o755)
    with pytest.raises(InputError, match="Ansible cannot parse it"):
        targets_from_inventory(script)
    assert not (tmp_path / "ran").exists()


YAML = """
all:
  vars:
    ansible_user: cloud
  hosts:
    lonely:
      ansible_host: 10.0.1.1
  children:
    mi355:
      vars: {ansible_port: 2022, vgpu_model: MI355X, vgpu_compute_partition: CPX, vgpu_memory_partition: NPS1}
      hosts:
        g[a:c]:
        special: {ansible_port: 22, ansible_ssh_user: legacy}
"""


def test_yaml_inventory_with_children_ranges_and_legacy_variable_names(tmp_path):
    t = parse(YAML, tmp_path)
    assert sorted(t) == ["ga", "gb", "gc", "lonely", "special"]
    assert (t["gb"].endpoint.port, t["gb"].endpoint.user) == (2022, "cloud")
    assert (t["special"].endpoint.port, t["special"].endpoint.user) == (22, "legacy")
    assert t["gc"].expect == ExpectSpec("MI355X", "CPX", "NPS1", True)
    assert t["lonely"].endpoint.host == "10.0.1.1" and t["lonely"].expect is None


@pytest.mark.parametrize("text, message", [
    ("[g]\nvm 'ansible_port={{ port }}'", r"ansible_port is templated"),
    ("[g]\nvm vgpu_profile=p vgpu_model=MI300X", r"set vgpu_profile or vgpu_model, not both"),
    ("[g]\nvm ansible_port=http", r"ansible_port 'http' is not a number"),
    ("[g]\nvm ansible_port=0", r"ansible_port 0 is out of range"),
    ("[g]\nvm flag", r"Ansible cannot parse it: .*flag"),
    ("[g:vars]\njustaword", r"Ansible cannot parse it: .*justaword"),
    ("[g]\nvm[3:1]", r"empty host range"),
    ("[g]\nvm[1:b]", r"bad host range"),
    ("[g]\nvm ansible_ssh_private_key_file=/nonexistent/key", r"identity file /nonexistent/key does not exist"),
    ("all:\n  hosts:\n    vm: [1, 2]", r"Ansible cannot parse it"),
    ("[empty]\n", r"no hosts"),
])
def test_bad_inventory_is_one_input_error(tmp_path, text, message):
    with pytest.raises(InputError, match=message):
        parse(text, tmp_path)


def test_duplicate_host_in_two_groups_is_one_target(tmp_path):
    t = parse("[a]\nvm ansible_port=2201\n[b]\nvm ansible_user=x\n", tmp_path)
    assert list(t) == ["vm"] and (t["vm"].endpoint.port, t["vm"].endpoint.user) == (2201, "x")


def test_a_relative_key_is_taken_from_the_current_directory_not_the_inventorys(tmp_path, monkeypatch):
    """Ansible's rule (ssh opens a relative IdentityFile from ansible-playbook's directory): docs/validate.md,
    "Paths in an inventory"."""
    (tmp_path / "inv").mkdir()
    (tmp_path / "ctl" / "keys").mkdir(parents=True)
    (tmp_path / "ctl" / "keys" / "id").write_text("k")
    inv = tmp_path / "inv" / "hosts"
    inv.write_text("[g]\nvm ansible_ssh_private_key_file=keys/id\n")
    monkeypatch.chdir(tmp_path / "ctl")
    assert targets_from_inventory(inv)[0].endpoint.identity == tmp_path / "ctl" / "keys" / "id"
    monkeypatch.chdir(tmp_path / "inv")  # where the inventory is: no keys/ here, as ssh would not find one
    with pytest.raises(InputError, match=f"identity file {tmp_path / 'inv' / 'keys' / 'id'} does not exist"):
        targets_from_inventory(inv)


def test_validate_known_hosts_of_the_selected_guests_is_read_like_any_inventory_path(tmp_path, monkeypatch):
    from vgpu.guest.targets import read_inventory_targets

    inv = tmp_path / "hosts"
    inv.write_text("[g]\nvm1\nvm2\n[g:vars]\nvalidate_known_hosts=kh/known_hosts\n[h]\nother validate_known_hosts=~/kh\n"
                   "[i]\nbare\n")
    monkeypatch.chdir(tmp_path)
    assert read_inventory_targets(inv, limit="g")[1] == tmp_path / "kh" / "known_hosts"
    assert read_inventory_targets(inv, limit="other")[1] == Path("~/kh").expanduser()
    assert read_inventory_targets(inv, limit="bare")[1] is None  # then --known-hosts' default, ~/.ssh/known_hosts
    with pytest.raises(InputError, match=r"different validate_known_hosts files: kh/known_hosts \(vm1\), ~/kh \(other\)"):
        read_inventory_targets(inv, limit="g,other")


@pytest.mark.parametrize("value", ["'{{ kh }}'", "[1]", "''"])
def test_a_validate_known_hosts_that_is_no_literal_path_is_refused(tmp_path, value):
    from vgpu.guest.targets import read_inventory_targets

    inv = tmp_path / "hosts.yml"
    inv.write_text(f"all:\n  hosts:\n    vm:\n      validate_known_hosts: {value}\n")
    with pytest.raises(InputError, match=r"host vm: validate_known_hosts must be a literal path"):
        read_inventory_targets(inv)


def test_an_empty_key_is_no_key_and_a_key_that_is_no_string_is_refused(tmp_path):
    assert parse("[g]\nvm ansible_ssh_private_key_file=''\n", tmp_path)["vm"].endpoint.identity is None
    with pytest.raises(InputError, match=r"host vm: ansible_ssh_private_key_file must be a path, not \[1\]"):
        parse("all:\n  hosts:\n    vm:\n      ansible_ssh_private_key_file: [1]\n", tmp_path)
