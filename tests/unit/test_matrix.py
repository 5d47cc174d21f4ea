"""The GIM capability matrix (vgpu/data/gim-matrix.json, docs/hardware.md §9): the data, its verdicts, the doc table.

The expectations in HOLD_OUT are written from the release facts in docs/hardware.md §9, not read from the
data file, so a wrong row in the data fails here."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from vgpu import matrix
from vgpu.capability import HostView, assess
from vgpu.catalog import DEFAULT as CATALOG
from vgpu.catalog import ComputePartition, MemoryPartition

REPO = Path(__file__).resolve().parents[2]

U2204, U2404, U2604 = ("ubuntu", "22.04", "6.8.0-79-generic"), ("ubuntu", "24.04", "6.14.0-27-generic"), \
    ("ubuntu", "26.04", "7.0.0-12-generic")
RHEL94, RHEL101 = ("rhel", "9.4", "5.14.0-427.13.1.el9_4.x86_64"), ("rhel", "10.1", "6.12.0-124.8.1.el10_1.x86_64")

# (GIM, host, GPU, VFs, compute, memory) -> level, or "refused"
HOLD_OUT = [
    ("8.4.0.K", U2204, "MI300X", 1, "SPX", "NPS1", "supported"),
    ("8.4.0.K", U2204, "MI300X", 8, "CPX", "NPS4", "preview"),
    ("8.4.0.K", U2204, "MI300X", 4, "QPX", "NPS1", "unlisted"),  # the driver accepts it, no table lists it
    ("8.4.0.K", U2204, "MI355X", 1, "SPX", "NPS1", "refused"),  # MI35x arrived in 8.5.0.K
    ("8.5.0.K", U2404, "MI355X", 1, "SPX", "NPS1", "supported"),
    ("8.5.0.K", U2404, "MI355X", 8, "CPX", "NPS2", "refused"),  # multi-VF from 9.1.0.K
    ("8.5.0.K", U2204, "MI325X", 1, "SPX", "NPS1", "supported"),
    ("8.7.1.K", U2404, "MI350X", 1, "SPX", "NPS1", "supported"),
    ("9.1.0.K", U2404, "MI355X", 2, "DPX", "NPS2", "firmware-gated"),
    ("9.1.0.K", U2404, "MI355X", 8, "CPX", "NPS2", "firmware-gated"),
    ("9.1.0.K", U2404, "MI350X", 8, "CPX", "NPS2", "firmware-gated"),
    ("9.1.0.K", ("ubuntu", "24.04", "6.8.0-79-generic"), "MI355X", 8, "CPX", "NPS2", "refused"),  # 6.14 only
    ("9.1.0.K", U2204, "MI355X", 1, "SPX", "NPS1", "supported"),  # OS not named: warned, planned on its rows
    ("9.1.0.K", U2204, "MI300X", 8, "CPX", "NPS4", "firmware-gated"),
    ("9.1.0.K", RHEL94, "MI300X", 8, "CPX", "NPS4", "firmware-gated"),
    ("9.1.0.K", U2404, "MI325X", 1, "SPX", "NPS1", "supported"),
    ("9.1.0.K", RHEL101, "MI325X", 1, "SPX", "NPS1", "supported"),
    ("9.2.0.K", ("rhel", "10.2", "6.12.0-211.el10_2.x86_64"), "MI300X", 1, "SPX", "NPS1", "supported"),
    ("9.3.0.K", U2604, "MI300X", 1, "SPX", "NPS1", "supported"),
    ("9.3.0.K", U2604, "MI300X", 8, "CPX", "NPS4", "refused"),  # 1-SPX-NPS1 only on 26.04
    ("9.3.0.K", U2604, "MI300X", 4, "QPX", "NPS1", "refused"),
    ("9.3.0.K", U2604, "MI355X", 8, "CPX", "NPS2", "refused"),
    ("9.3.0.K", U2404, "MI355X", 8, "CPX", "NPS2", "firmware-gated"),
    ("9.4.0.K", U2404, "MI350P", 1, "SPX", "NPS1", "supported"),
    ("9.4.0.K", U2404, "MI300X", 8, "CPX", "NPS4", "firmware-gated"),
    ("9.4.0.K", U2404, "MI355X", 2, "DPX", "NPS2", "firmware-gated"),
    ("9.4.0.K", U2604, "MI300X", 8, "CPX", "NPS4", "refused"),
    ("9.4.0.K", U2404, "MI308X", 8, "CPX", "NPS4", "unknown"),  # in no release's table
]


def host(gim: str, where: tuple[str, str, str] | None) -> HostView:
    return HostView(gim, *(where or (None, None, None)))


@pytest.mark.parametrize("gim, where, gpu, vfs, compute, memory, level", HOLD_OUT,
                         ids=[f"{c[0]}-{c[1][0]}{c[1][1]}-{c[2]}-{c[3]}vf-{c[4]}{c[5]}" for c in HOLD_OUT])
def test_hold_out_facts(gim, where, gpu, vfs, compute, memory, level):
    verdict = assess(gpu, vfs, compute, memory, host(gim, where))
    assert verdict.level == level, (verdict.problems, verdict.warnings)
    assert bool(verdict.problems) == (level == "refused")


def test_every_release_from_8_4_to_9_4_is_in_the_matrix():
    names = [r.name for r in matrix.releases()]
    for wanted in ("8.4.0.K", "8.5.0.K", "8.7.1.K", "9.1.0.K", "9.2.0.K", "9.3.0.K", "9.4.0.K"):
        assert wanted in names


def test_every_mode_in_the_matrix_is_one_gims_driver_accepts():
    """A row may only allow what the catalog (GIM's driver rules) accepts: else a plan would pass the
    matrix and be refused, or worse, silently fall back on the host."""
    for release in matrix.releases():
        for row in release.rows:
            model = CATALOG.by_name(row.gpu)
            for m in row.modes:
                assert model.combo(m.vfs, ComputePartition(m.compute), MemoryPartition(m.memory)) is not None, \
                    (release.name, row.gpu, m)
            assert row.source.startswith("https://github.com/amd/MxGPU-Virtualization/releases/tag/mainline%2F")


def test_each_row_plans_each_of_its_modes_at_its_level_on_its_own_host():
    count = 0
    for release in matrix.releases():
        for row in release.rows:
            if row.host is None:
                continue
            kernel = (row.host.kernel + ".0-1-generic") if row.host.kernel else "6.8.0-1-generic"
            for m in row.modes:
                verdict = assess(row.gpu, m.vfs, m.compute, m.memory,
                                 HostView(release.name, row.host.os, row.host.version, kernel))
                assert (verdict.level, verdict.row.label()) == (m.level, row.label())
                count += 1
    assert count > 50


def test_the_ubuntu_2604_refusal_is_one_sentence_naming_the_row_and_what_works():
    verdict = assess("MI300X", 8, "CPX", "NPS4", host("9.3.0.K", U2604))
    (sentence, fix), = verdict.problems
    assert sentence.startswith("8 VFs CPX/NPS4 on MI300X is not allowed by matrix row GIM 9.3.0.K / ubuntu 26.04 "
                               "(kernel 7.0) / MI300X, which allows only 1 VF SPX/NPS1")
    assert "mainline%2F9.3.0.K" in sentence and sentence.count(". ") == 0
    assert fix.startswith("use 1 VF SPX/NPS1 here, or run it on a host GIM 9.3.0.K allows it on:")
    assert "ubuntu 24.04 (kernel 6.14)" in fix


def test_a_kernel_the_row_does_not_name_is_refused_with_the_kernel_to_boot():
    verdict = assess("MI355X", 8, "CPX", "NPS2", host("9.4.0.K", ("ubuntu", "24.04", "6.8.0-79-generic")))
    (sentence, fix), = verdict.problems
    assert "only with kernel 6.14, and this host runs 6.8.0-79-generic" in sentence
    assert fix == "boot a 6.14 kernel and plan again"


def test_a_gim_the_gpu_is_too_new_for_names_the_release_to_upgrade_to():
    (sentence, fix), = assess("MI355X", 1, "SPX", "NPS1", host("8.4.0.K", U2204)).problems
    assert sentence == "GIM 8.4.0.K lists no SR-IOV support for MI355X (the capability matrix has it from GIM 8.5.0.K)"
    assert fix == "upgrade gim-dkms to 8.5.0.K or later"


@pytest.mark.parametrize("version, used", [("9.9.0.K", "9.4.0.K"), ("10.0.0.K", "9.4.0.K"), ("8.6.0.K", "8.5.0.K"),
                                           ("9.4.1.K", "9.4.0.K")])
def test_an_unknown_newer_release_plans_with_the_newest_known_rows_and_a_warning(version, used):
    verdict = assess("MI300X", 8, "CPX", "NPS4", host(version, U2404))
    assert verdict.row.release == used and not verdict.problems
    assert any(f"GIM {version} is not in vgpu's capability matrix" in w and used in w for w in verdict.warnings)


@pytest.mark.parametrize("version", [None, "", "weird", "9.x"])
def test_an_unreadable_version_is_checked_against_the_newest_rows_and_says_so(version):
    verdict = assess("MI300X", 1, "SPX", "NPS1", host(version, U2404))
    assert verdict.row.release == matrix.releases()[-1].name
    assert any("cannot be read as a GIM release" in w for w in verdict.warnings)


def test_a_gim_older_than_the_matrix_is_refused():
    (sentence, fix), = assess("MI300X", 1, "SPX", "NPS1", host("8.3.0.K", U2204)).problems
    assert "older than every release" in sentence and fix == "upgrade gim-dkms to 8.4.0.K or later"


def test_an_unreadable_host_os_is_checked_against_every_row_and_says_so():
    verdict = assess("MI355X", 8, "CPX", "NPS2", HostView("9.4.0.K"))
    assert verdict.level == "firmware-gated"
    assert any("host OS could not be read" in w for w in verdict.warnings)


def test_the_doc_table_is_the_generated_one():
    text = (REPO / "docs" / "hardware.md").read_text(encoding="utf-8")  # §9
    found = re.search(re.escape(matrix.TABLE_BEGIN) + r".*?" + re.escape(matrix.TABLE_END), text, re.S)
    assert found, "docs/hardware.md §9 has no generated matrix table"
    assert found.group(0) == matrix.markdown_table(), "regenerate it: python -m vgpu.matrix"


def test_a_malformed_data_file_is_a_clear_error(tmp_path):
    bad = tmp_path / "m.json"
    bad.write_text('{"version": 1, "releases": [{"gim": "9.1.0.K", "source": "x", "adds": '
                   '[{"gpu": "MI999", "host": null, "modes": []}]}]}')
    with pytest.raises(matrix.MatrixError, match="MI999 is not in the catalog"):
        matrix.releases(bad)
    bad.write_text('{"version": 1, "releases": [{"gim": "9.1.0.K", "source": "x", "adds": '
                   '[{"gpu": "MI300X", "host": null, "modes": [[1, "SPX", "NPS1", "great"]]}]}]}')
    with pytest.raises(matrix.MatrixError, match="level 'great'"):
        matrix.releases(bad)
