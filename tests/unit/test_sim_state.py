"""vgpu.sim.state's own strict validator of state.json (read commands open a simulated host without
pydantic, issue #12): every damage it refuses is one clear error naming where, and nothing is written; a
state the pydantic models wrote still loads and is saved again byte for byte."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from simhelp import fresh_host
from vgpu.errors import InputError
from vgpu.sim import SimHost
from vgpu.sim.state import STATE_FILE, Bar, Fault, Function, SimState, load_state, save_state

PF = "0000:05:00.0"  # an MI300X of 8xmi300x, with SR-IOV and one VF enabled at boot
OLD_STATE = Path(__file__).parent / "data" / "sim-state-pydantic-v1.json"  # written by the pydantic models


def _set(*path, value):
    def edit(state: dict) -> None:
        for key in path[:-1]:
            state = state[key]
        state[path[-1]] = value
    return edit


def _del(*path):
    def edit(state: dict) -> None:
        for key in path[:-1]:
            state = state[key]
        del state[path[-1]]
    return edit


INT = "Input should be a valid integer"
ODD_KEY = "\x1b[2J" + "x" * 100  # a terminal escape, and long: quoted and cut where the error names it
# name: (edit of the saved state, the problem the error names)
DAMAGE = {
    "int-as-string": (_set("functions", PF, "vendor", value="0x1002"),
                      f"functions.{PF}.vendor: {INT}, not a string"),
    "bool-as-int": (_set("generation", value=True), f"generation: {INT}, not a boolean"),
    "nested-bool-as-int": (_set("functions", PF, "bars", 0, "size", value=False),
                           f"functions.{PF}.bars.0.size: {INT}, not a boolean"),
    "float-as-int": (_set("next_pid", value=4000.0), f"next_pid: {INT}, not a number"),
    "int-as-bool": (_set("iommu", value=1), "iommu: Input should be a valid boolean, not an integer"),
    "unknown-key": (_set("colour", value="blue"), "colour: Extra inputs are not permitted"),
    "schema_-key": (_set("schema_", value="vgpu.sim.state/v1"), "schema_: Extra inputs are not permitted"),
    "nested-wrong-type": (_set("functions", PF, "sriov", "vf_bars", 1, "start", value="0x0"),
                          f"functions.{PF}.sriov.vf_bars.1.start: {INT}, not a string"),
    "record-not-object": (_set("functions", PF, "sriov", value=[8]),
                          f"functions.{PF}.sriov: Input should be a valid dictionary, not a list"),
    "holder-wrong-type": (_set("holders", "4000", value={"pid": 4000, "comm": 7, "group": 1}),
                          "holders.4000.comm: Input should be a valid string, not an integer"),
    "param-not-string": (_set("modules", "gim", "vf_num", value=8),
                         "modules.gim.vf_num: Input should be a valid string, not an integer"),
    "list-not-list": (_set("available_modules", value="gim"),
                      "available_modules: Input should be a valid list, not a string"),
    "null-not-optional": (_set("cmdline", value=None), "cmdline: Input should be a valid string, not null"),
    "short-link": (_set("functions", PF, "link", value=["32.0 GT/s PCIe", 16]),
                   f"functions.{PF}.link: Input should be a list of 4 items (speed, width, max speed, "
                   "max width), not a list"),
    "link-item": (_set("functions", PF, "link", 1, value="16"),
                  f"functions.{PF}.link.1: {INT}, not a string"),
    "fault-kill": (_set("faults", value=[{"pattern": "x", "error": "y", "kill": "yes"}]),
                   "faults.0.kill: Input should be a valid boolean, not a string"),
    "missing-field": (_del("functions", PF, "vendor"), f"functions.{PF}.vendor: Field required"),
    "missing-parent": (_del("functions", PF, "parent"),  # may be null, but is never left out
                       f"functions.{PF}.parent: Field required"),
    "missing-machine": (_del("machine"), "machine: Field required"),
    "record-of-unknown-keys": (_set("functions", PF, "sriov", value={"\x1b[31m": 1}),
                               f"functions.{PF}.sriov.total_vfs: Field required"),
    "odd-key-in-path": (_set("hugepages", ODD_KEY, value="1"),
                        f"hugepages.{ODD_KEY[:64]!r}: {INT}, not a string"),
    "not-a-kernel-name": (_set("modules", "a/b", value={}),
                          "'a/b' is not a kernel name, pid or PCI address"),
    "lone-surrogate": (_set("cmdline", value="ro \ud800"),
                       "a string holds a lone surrogate (\\ud800-\\udfff)"),
    "wrong-schema": (_set("schema", value="vgpu.sim.state/v2"), "schema is not vgpu.sim.state/v1"),
}


def snapshot(root: Path) -> dict[str, tuple]:
    """Every entry under ``root``: kind, size, mtime; the contents of its top-level files."""
    out = {}
    for base, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(base, name)
            st = os.lstat(path)
            content = path.read_bytes() if base == str(root) and path.is_file() else None
            out[str(path.relative_to(root))] = (st.st_mode, st.st_size, st.st_mtime_ns, content)
    return out


@pytest.mark.parametrize("name", sorted(DAMAGE))
def test_a_damaged_state_is_refused_by_name_and_nothing_is_written(tmp_path, name):
    host = fresh_host(tmp_path)
    path = host.state_dir / STATE_FILE
    state = json.loads(path.read_text())
    edit, problem = DAMAGE[name]
    edit(state)
    text = json.dumps(state).replace("\\ud800", "\\uD800")  # json.dumps escapes; either case is a surrogate
    path.write_text(text)
    (host.state_dir / "tree-generation").write_text("-1")  # a state that loaded would be rendered again
    before = snapshot(host.state_dir)
    with pytest.raises(InputError) as exc:
        SimHost.open(host.state_dir)
    assert exc.value.message == f"simulated host state {path} is corrupt ({problem})"
    assert exc.value.hint == "rebuild it with `vgpu sim reset`"
    assert "\x1b" not in exc.value.message
    assert snapshot(host.state_dir) == before


def test_unknown_keys_inside_a_record_are_dropped_as_before(tmp_path):
    """Only the top level forbids unknown keys (pydantic's SimState had extra="forbid", the records the
    default "ignore"): a state with one loads, and the next save leaves it out."""
    host = fresh_host(tmp_path)
    path = host.state_dir / STATE_FILE
    state = json.loads(path.read_text())
    state["functions"][PF]["sriov"]["colour"] = "blue"
    path.write_text(json.dumps(state))
    assert load_state(host.state_dir).functions[PF].sriov.total_vfs == 8
    host.kernel.clear_faults()  # a transaction: loads, changes nothing, saves
    assert "colour" not in path.read_text()
    assert json.loads(path.read_text())["functions"][PF]["sriov"]["total_vfs"] == 8


def test_a_state_the_pydantic_models_wrote_loads_and_saves_byte_for_byte(tmp_path):
    text = OLD_STATE.read_text()
    (tmp_path / STATE_FILE).write_text(text)
    state = load_state(tmp_path)
    assert state.schema_ == "vgpu.sim.state/v1" and state.machine["name"] == "tiny"
    vf = state.functions["0000:85:02.0"]
    assert (vf.physfn, vf.vf_index, vf.driver, vf.link) == ("0000:85:00.0", 0, "vfio-pci",
                                                             ("32.0 GT/s PCIe", 16, "32.0 GT/s PCIe", 16))
    assert state.faults == [Fault(pattern="write_attr:*/drivers_probe", error="probe refused", skip=1),
                            Fault(pattern="unload_module:gim", error="injected fault", kill=True)]
    assert (state.holders["4000"].comm, state.gim_saved["0000:85:00.0"].memory) == ("qemu-system-x86", "NPS1")
    out = tmp_path / "again"
    out.mkdir()
    save_state(out, state)
    assert (out / STATE_FILE).read_text() == text


def test_defaults_fill_what_an_older_state_left_out(tmp_path):
    (tmp_path / STATE_FILE).write_text(json.dumps({"schema": "vgpu.sim.state/v1", "machine": {"name": "x"}}))
    state = load_state(tmp_path)
    assert (state.generation, state.functions, state.iommu, state.next_pid, state.clock_us, state.faults) == \
        (0, {}, True, 4000, 5_000_000, [])
    assert state == SimState(machine={"name": "x"})
    assert state.functions is not SimState(machine={}).functions  # each state its own containers


def test_records_compare_by_value_and_refuse_unknown_or_missing_fields():
    bar = Bar(index=0, start=0, size=4096, flags=0x40200)
    assert bar == Bar(index=0, start=0, size=4096, flags=0x40200) != Bar(index=2, start=0, size=4096, flags=0)
    assert repr(bar) == "Bar(index=0, start=0, size=4096, flags=262656)"
    with pytest.raises(TypeError, match="no field colour"):
        Bar(index=0, start=0, size=1, flags=0, colour=1)
    with pytest.raises(TypeError, match="needs parent"):
        Function(address=PF, kind="gpu", vendor=1, device=1, subsystem_vendor=1, subsystem_device=1,
                 class_code=1)
    with pytest.raises(TypeError):
        hash(bar)
