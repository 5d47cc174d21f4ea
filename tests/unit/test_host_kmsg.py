"""vgpu.host.kmsg: GIM's kernel-log lines in every format, read from the right log, said in plan terms."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from vgpu.errors import HostError, VgpuError
from vgpu.host import kmsg
from vgpu.host.paths import HostPaths
from vgpu.host.steps import Context, verify_with_gim_log, with_gim_log
from vgpu.model.pci import PciAddress

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
PF = PciAddress.parse("0000:c6:00.0")
REFUSAL = "VF number 8 to be enabled exceeds the vf limit 1."


def fixture_lines(name: str) -> list[str]:
    return (FIXTURES / "system" / name).read_text(encoding="utf-8").split("\n", 1)[1].splitlines()


def test_every_line_of_the_real_gim_dmesg_capture_is_read():
    lines = fixture_lines("dmesg-gim-libgv-mi210-issue8-excerpt.txt")
    found = kmsg.gim_lines(lines)
    assert len(found) == len(lines)
    warning = next(ln for ln in found if ln.level == "warning")
    assert warning.device == PciAddress.parse("0000:b7:00.0")
    assert (warning.where, warning.message) == ("mi200_ecc_hw_init:157", "RAS ECC is not supported")
    hostwide = next(ln for ln in found if ln.device is None)
    assert (hostwide.level, hostwide.message) == ("info", "atom post costs 2 usec")


@pytest.mark.parametrize("prefix", [
    "",
    "[  429.121239] ",
    "[Wed Oct 15 16:04:04 2025] ",  # dmesg -T, as issue 13 of amd/MxGPU-Virtualization shows it
    "[  429.121239] gpuhost kernel: ",  # journalctl -k -o short-monotonic
    "Oct 15 16:04:04 gpuhost kernel: ",  # journalctl -k
    "[  429.121239] <error> ",  # a /dev/kmsg record as this module renders it
])
def test_the_libgv_line_is_read_behind_any_prefix(prefix):
    (line,) = kmsg.gim_lines([prefix + "gim error libgv: [0:c6:0:0][amdgv_parse_config_opt:1020] " + REFUSAL])
    assert (line.level, line.device, line.where, line.message) == (
        "error", PF, "amdgv_parse_config_opt:1020", REFUSAL)


def test_the_shim_and_old_gim_formats_and_other_lines():
    shim = kmsg.parse_gim_line("[  428.831197] [gim][gim_alloc_dma_mem:1118] Allocate iova method memory failed.")
    assert (shim.level, shim.device, shim.where) == (None, None, "gim_alloc_dma_mem:1118")
    leveled = kmsg.parse_gim_line("[  428.8] <error> [gim][gim_alloc_dma_mem:1121] Allocate system memory failed")
    assert leveled.level == "error"
    old = kmsg.parse_gim_line("[   23.7] gim error:(set_new_adapter:617) asic does not support SRIOV")
    assert (old.level, old.where, old.message) == ("error", "set_new_adapter:617", "asic does not support SRIOV")
    for other in ("[ 1.0] amdgpu 0000:05:00.0: amdgpu: SRIOV is not supported", "vfio-pci 0000:05:02.0: enabling",
                  "[ 2.0] pcieport 0000:00:01.1: AER: enabled", ""):
        assert kmsg.parse_gim_line(other) is None


def test_explain_groups_the_pfs_in_plan_terms_and_prefers_errors():
    pfs = {PciAddress.parse(a): 8 for a in ("0000:05:00.0", "0000:26:00.0", "0000:c6:00.0")}
    lines = kmsg.gim_lines(
        [f"gim info libgv: [0:{bus:x}:0:0][amdgv_device_init:1187] GPU" for bus in (5, 0x26)]
        + [f"gim error libgv: [0:{bus:x}:0:0][amdgv_parse_config_opt:1020] {REFUSAL}" for bus in (5, 0x26, 0xc6)]
        + ["gim error libgv: [0:e5:0:0][amdgv_parse_config_opt:1020] not in the plan",
           "gim warning libgv: [0:5:0:0][x:1] a warning"])
    assert kmsg.explain(lines, pfs) == ("gim's kernel log: 0000:05:00.0 and 2 more GPU(s) (vf_num 8 in the plan): "
                                        "VF number 8 to be enabled exceeds the vf limit 1")
    warnings_only = kmsg.gim_lines(["gim warning libgv: [0:5:0:0][x:1] a warning\x1b[31m"])
    assert kmsg.explain(warnings_only, pfs) == "gim's kernel log: 0000:05:00.0 (vf_num 8 in the plan): a warning [31m"
    assert kmsg.explain(kmsg.gim_lines(["gim info libgv: [0:5:0:0][x:1] fine"]), pfs) is None
    many = kmsg.gim_lines([f"gim error libgv: reason {i}" for i in range(5)])
    assert kmsg.explain(many, pfs) == "gim's kernel log: reason 0; reason 1; reason 2 (+2 more)"


def tree(tmp_path: Path) -> HostPaths:
    (tmp_path / "sys" / "bus" / "pci").mkdir(parents=True)
    return HostPaths.under(tmp_path)


def test_a_tree_host_reads_its_own_log_from_the_mark_on(tmp_path):
    paths = tree(tmp_path)
    log = tmp_path / kmsg.LOG_FILE
    log.write_text("[    1.000000] gim error libgv: [0:c6:0:0][a:1] before the mark\n")
    since = kmsg.mark(paths)
    with open(log, "a") as fh:
        fh.write(f"[    2.000000] gim error libgv: [0:c6:0:0][amdgv_parse_config_opt:1020] {REFUSAL}\n")
    assert [ln.message for ln in kmsg.gim_since(paths, since)] == [REFUSAL]
    log.unlink()
    assert kmsg.gim_since(paths, since) == []  # an unreadable log: no lines, no error


def test_a_tree_host_never_reads_this_machines_log(tmp_path, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("read the real kernel log for a simulated host")
    monkeypatch.setattr(kmsg, "_kmsg_records", refuse)
    monkeypatch.setattr(subprocess, "run", refuse)
    paths = tree(tmp_path)
    assert kmsg.lines_since(paths, kmsg.mark(paths)) == []


def test_kmsg_records_keep_sequence_level_and_text():
    assert kmsg._kmsg_record("3,1234,429121239,-;gim error libgv: [0:c6:0:0][a:1] x\n SUBSYSTEM=pci\n") == (
        1234, "[  429.121239] <error> gim error libgv: [0:c6:0:0][a:1] x")
    assert kmsg._kmsg_record("6,7,1,c;[gim][f:1] y\n") == (7, "[    0.000001] <info> [gim][f:1] y")
    for bad in ("", "no header", "a,b,c;text", "3;text"):
        assert kmsg._kmsg_record(bad) is None


def test_this_machine_reads_the_ring_buffer_after_the_mark_by_sequence(monkeypatch):
    records = [(10, "[ 1.0] <error> gim error libgv: old"), (11, "[ 2.0] <info> other")]
    monkeypatch.setattr(kmsg, "_kmsg_records", lambda: list(records))
    since = kmsg.mark(HostPaths.system())
    records.append((12, f"[ 3.0] <error> gim error libgv: [0:c6:0:0][f:1] {REFUSAL}"))
    assert [ln.message for ln in kmsg.gim_since(HostPaths.system(), since)] == [REFUSAL]


def test_without_the_ring_buffer_the_journal_is_asked_with_an_argv_list(monkeypatch):
    monkeypatch.setattr(kmsg, "_kmsg_records", lambda: [])
    calls = []

    def journal(argv, **kwargs):
        calls.append((argv, kwargs))
        out = f"[  429.121239] gpuhost kernel: gim error libgv: [0:c6:0:0][f:1] {REFUSAL}\n".encode()
        return subprocess.CompletedProcess(argv, 0, out, b"")
    monkeypatch.setattr(subprocess, "run", journal)
    since = kmsg.Mark(wall=1760544244.9)
    assert [ln.device for ln in kmsg.gim_since(HostPaths.system(), since)] == [PF]
    ((argv, kwargs),) = calls
    assert argv == ["journalctl", "-k", "-b", "-o", "short-monotonic", "--no-pager", "-q", "--since", "@1760544244"]
    assert "shell" not in kwargs and kwargs["timeout"] > 0


def test_a_failing_journal_gives_no_lines(monkeypatch):
    monkeypatch.setattr(kmsg, "_kmsg_records", lambda: [])
    monkeypatch.setattr(subprocess, "run", lambda argv, **kw: subprocess.CompletedProcess(argv, 1, b"x", b"denied"))
    assert kmsg.gim_since(HostPaths.system(), kmsg.Mark()) == []

    def missing(argv, **kw):
        raise FileNotFoundError("journalctl")
    monkeypatch.setattr(subprocess, "run", missing)
    assert kmsg.gim_since(HostPaths.system(), kmsg.Mark()) == []


def test_a_failed_verification_after_a_reload_quotes_gim(tmp_path):
    paths = tree(tmp_path)
    ctx = Context(paths, kernel=None, files=None)

    def fails():
        raise VgpuError("verification failed: after applying, the host still differs (x)")
    with pytest.raises(VgpuError) as plain:
        verify_with_gim_log(ctx, fails)  # no reload in this run: the error as it was
    assert plain.value.message.endswith("(x)")
    ctx.gim_reload = (kmsg.mark(paths), {PF: 8})
    (tmp_path / kmsg.LOG_FILE).write_text(f"gim error libgv: [0:c6:0:0][amdgv_parse_config_opt:1020] {REFUSAL}\n")
    with pytest.raises(VgpuError) as explained:
        verify_with_gim_log(ctx, fails)
    assert explained.value.message == ("verification failed: after applying, the host still differs (x); "
                                       "gim's kernel log: 0000:c6:00.0 (vf_num 8 in the plan): "
                                       "VF number 8 to be enabled exceeds the vf limit 1")
    assert "dmesg | grep gim" in explained.value.hint
    again = with_gim_log(HostError("gim did not create 8 VF(s)", subject="s"), ctx)
    assert isinstance(again, HostError) and again.subject == "s"


def test_the_simulated_gim_writes_its_refusal_in_gims_real_format(tmp_path):
    import yaml

    from vgpu.sim import SimHost, load_spec

    data = load_spec("8xmi300x").model_dump(mode="json", exclude_none=True)
    data["name"] = "vflimit"
    for function in data["functions"]:
        if function.get("kind") == "gpu":
            function["sriov"]["vf_limit"] = 1
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(data))
    host = SimHost.create(tmp_path / "host", machine=str(tmp_path / "spec.yaml"))
    paths = HostPaths.under(host.root)
    since = kmsg.mark(paths)
    host.kernel.unload_module("gim")
    host.kernel.load_module("gim", {"vf_num": "8"})
    errors = [ln for ln in kmsg.gim_since(paths, since) if ln.level == "error"]
    assert len(errors) == 8 and errors[0].device == PciAddress.parse("0000:05:00.0")
    assert (errors[0].where, errors[0].message) == ("amdgv_parse_config_opt:1020", REFUSAL)
    # the same shape as the real capture: "gim <level> libgv: [d:b:s:f][function:line] text"
    real = kmsg.gim_lines(fixture_lines("dmesg-gim-libgv-mi210-issue8-excerpt.txt"))[0]
    assert {type(real.device), type(real.where)} == {type(errors[0].device), type(errors[0].where)}
