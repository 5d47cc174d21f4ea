"""A hand-edited simulator state.json whose functions do not form a tree (a parent or physfn naming a
function the state lacks or itself, a loop of parents, a key that is not the function's address, a BAR
outside its resource slots): the sysfs tree is rendered by following these, which crashed (exit 70) or
never ended; so did a machine section that is not a machine spec. Each is one `error:` naming the field, exit 5, and nothing under the simulator directory
changes."""

from __future__ import annotations

import json

import pytest

from .conftest import assert_refused, copy_sim, planned_sim, vgpu

PF = "0000:05:00.0"


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return planned_sim(tmp_path_factory, "links")


def _bridge_of(state: dict) -> str:
    return state["functions"][PF]["parent"]


CASES = {
    "parent-missing": (lambda s: s["functions"][PF].update(parent="0000:ff:1f.7"), "parent"),
    "parent-self": (lambda s: s["functions"][PF].update(parent=PF), "parent"),
    "parent-loop": (lambda s: s["functions"][_bridge_of(s)].update(parent=PF), "loops back"),
    "physfn-self": (lambda s: s["functions"][PF].update(physfn=PF), "physfn"),
    "address-not-key": (lambda s: s["functions"][PF].update(address="0000:06:00.0"), "not its key"),
    "bar-index-negative": (lambda s: s["functions"][PF]["bars"].append(
        {"index": -1, "start": 0, "size": 4096, "flags": 0}), "BAR -1"),
    "vf-bar-index-past-slots": (lambda s: s["functions"][PF]["sriov"]["vf_bars"].append(
        {"index": 7, "start": 0, "size": 4096, "flags": 0}), "BAR 7"),
    # the machine spec the host was built from (checked by the spec's own model when its name is not plain)
    "machine-not-a-spec": (lambda s: s.update(machine={"x": 1}), "machine:"),
    "machine-name-escape": (lambda s: s["machine"].update(name="\x1b[31mred"), "machine: name"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_state_whose_functions_are_not_a_tree_is_refused(base, tmp_path, watch, case):
    edit, needle = CASES[case]
    sim = copy_sim(base, tmp_path)
    state = json.loads((sim / "state.json").read_text())
    edit(state)
    if not case.startswith("machine"):  # (a hand edit of the machine section leaves the tree as it is)
        state["generation"] += 1  # the next open re-renders the whole tree from it
    (sim / "state.json").write_text(json.dumps(state))
    seen = watch(sim)
    for args in (("discover",), ("plan", "--profile", "mi300x-4vf")):
        proc = vgpu(*args, "--simulate", "--sim-dir", str(sim), timeout=600)
        line = assert_refused(proc, 5, "state.json is corrupt", needle)
        assert "\x1b" not in line
    seen.unchanged()
