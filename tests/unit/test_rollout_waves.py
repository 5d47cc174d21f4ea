"""Which hosts go in which wave: Ansible's serial semantics, the canary apart, the unavailability cap."""
from __future__ import annotations

import pytest

from vgpu.errors import InputError
from vgpu.rollout import waves as W

HOSTS = [f"kvm-{i:02d}" for i in range(1, 11)]


def cut(hosts=HOSTS, **kw):
    return [(w.canary, list(w.hosts)) for w in W.plan_waves(hosts, {h: ["g"] for h in hosts}, **kw).waves]


def test_serial_counts_and_percentages_of_all_hosts_with_the_last_repeating():
    # 10 hosts, serial 1,20%,50%: canary 1, then 2 (20% of 10), then 5, then 5 (the last repeats) -> 1+2+5+2
    assert [len(h) for _, h in cut(serial=("1", "20%", "50%"), max_unavailable="100%")] == [1, 2, 5, 2]
    assert cut(serial=("2", "3"), max_unavailable="100%")[:2] == [(True, HOSTS[:2]), (False, HOSTS[2:5])]


def test_percentages_round_down_but_never_to_zero():
    assert W.resolve("25%", 10) == 2 and W.resolve("5%", 10) == 1 and W.resolve("100%", 3) == 3


def test_the_canary_is_named_hosts_and_never_mixes_with_later_waves():
    waves = cut(canary=["kvm-05", "kvm-07"], serial=("1", "4"), max_unavailable="100%")
    assert waves[0] == (True, ["kvm-05", "kvm-07"])
    later = [h for _, hosts in waves[1:] for h in hosts]
    assert "kvm-05" not in later and "kvm-07" not in later and sorted(later + waves[0][1]) == HOSTS
    assert [c for c, _ in waves] == [True] + [False] * (len(waves) - 1)


def test_waves_are_capped_by_max_unavailable_and_the_cap_is_reported():
    plan = W.plan_waves(HOSTS, {}, serial=("1", "50%"), max_unavailable="2")
    assert [len(w.hosts) for w in plan.waves] == [1, 2, 2, 2, 2, 1] and plan.max_unavailable == 2
    assert any("capped at 2" in w for w in plan.warnings)


def test_a_canary_larger_than_the_budget_and_unknown_canaries_are_refused():
    with pytest.raises(InputError, match="canary has 3 hosts but at most 2"):
        W.plan_waves(HOSTS, {}, canary=HOSTS[:3], max_unavailable="2")
    with pytest.raises(InputError, match="--canary kvm-99: not one of the roll-out's 10"):
        W.plan_waves(HOSTS, {}, canary=["kvm-99"])
    with pytest.raises(InputError, match="no hosts"):
        W.plan_waves([], {})


@pytest.mark.parametrize("bad", ["0", "-1", "0%", "101%", "abc", "", "1.5", "25 %", "1e3", "%", "9999999"])
def test_sizes_that_are_not_counts_or_percentages_are_refused(bad):
    with pytest.raises(InputError):
        W.check_size(bad, "--max-unavailable")
    with pytest.raises(InputError):
        W.parse_serial(f"1,{bad}")


def test_hosts_without_guests_and_guests_without_a_host_are_warned_about():
    guests, warnings = W.guests_by_host(["kvm-1", "kvm-2"], {"vm-1": {"vgpu_host": "kvm-1"}, "vm-x": {},
                                                             "vm-y": {"vgpu_host": "elsewhere"}})
    assert guests == {"kvm-1": ["vm-1"], "kvm-2": []}
    assert len(warnings) == 2 and "vm-x has no vgpu_host" in warnings[0] and "not a host of this" in warnings[1]
    plan = W.plan_waves(["kvm-1", "kvm-2"], guests, max_unavailable="100%")
    assert any(w.startswith("kvm-2 (wave 2) has no guests") for w in plan.warnings)


def test_split_batches():
    assert W.split(["a", "b", "c"], 2) == [["a", "b"], ["c"]] and W.split([], 3) == []


@pytest.mark.parametrize("value", [["kvm-1"], 7, True, "{{ groups.gim_hosts[0] }}", "all", "kvm-*", ""])
def test_a_vgpu_host_that_is_not_a_literal_host_name_is_refused(value):
    with pytest.raises(InputError, match="guest vm-1: vgpu_host .* is not a host name"):
        W.guests_by_host(["kvm-1"], {"vm-1": {"vgpu_host": value}})
