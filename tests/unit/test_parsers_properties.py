"""Property tests for every table parser (issue 9): random column subsets and orders, N/A cells,
noise lines before and after; the parser never raises on valid output and never invents a value:
every value it returns is the input cell it came from.

Each generator renders a table the way the tool does (sources: ROCm/amdsmi amdsmi_cli
``amdsmi_commands.py``/``amdsmi_logger.py`` for monitor and partition widths, rocm_smi.py's
concise table and banners, hipblaslt-bench's "[0]:" CSV block), with values of the tool's shapes.
"""

from __future__ import annotations

import csv
import io

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vgpu.guest.agent.parsers.amdsmi import parse_amdsmi_csv
from vgpu.guest.agent.parsers.amdsmi_misc import parse_amdsmi_monitor, parse_amdsmi_partition
from vgpu.guest.agent.parsers.common import parse_scalar
from vgpu.guest.agent.parsers.hipblaslt import parse_hipblaslt_bench
from vgpu.guest.agent.parsers.rocmsmi import parse_rocmsmi

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Lines that captures carry around a tool's output (never part of it).
LEADING_NOISE = ["", "$ {cmd}", "user@gpu-host:~$ sudo {cmd}", "[root@gpu-host ~]# {cmd}", "...",
                 "---- snipped ----"]
TRAILING_NOISE = ["", "user@gpu-host:~$", "[root@gpu-host ~]#", "...", "\u2026", "$ "]


def noise(draw, pool, cmd):
    return [line.format(cmd=cmd) for line in draw(st.lists(st.sampled_from(pool), max_size=3))]


def na_or(strategy):
    return st.one_of(st.just("N/A"), strategy)


def number(lo, hi, unit=""):
    return st.integers(lo, hi).map(lambda n: f"{n} {unit}".strip())


def decimal(unit):
    return st.tuples(st.integers(0, 999), st.integers(0, 9)).map(lambda p: f"{p[0]}.{p[1]} {unit}")


# --- amd-smi monitor ------------------------------------------------------------------------------

# name: (cell strategy, amd-smi's rjust width for the column)
MONITOR_COLUMNS = {
    "XCP": (st.integers(0, 7).map(str), 5),
    "POWER": (na_or(number(0, 1000, "W")), 7),
    "GPU_TEMP": (na_or(number(0, 110, "\u00b0C")), 10),
    "MEM_TEMP": (na_or(number(0, 110, "\u00b0C")), 10),
    "GFX_UTIL": (na_or(number(0, 100, "%")), 10),
    "GFX_CLOCK": (na_or(number(0, 2100, "MHz")), 11),
    "MEM_UTIL": (na_or(number(0, 100, "%")), 10),
    "MEM_CLOCK": (na_or(number(0, 1300, "MHz")), 11),
    "ENC_UTIL": (na_or(number(0, 100, "%")), 10),
    "DEC_UTIL": (na_or(number(0, 100, "%")), 10),
    "SINGLE_ECC": (na_or(number(0, 99999)), 12),
    "DOUBLE_ECC": (na_or(number(0, 99999)), 12),
    "PCIE_REPLAY": (na_or(number(0, 999)), 13),
    "VRAM_USED": (na_or(number(0, 196300, "MB")), 11),
    "VRAM_TOTAL": (na_or(number(0, 262144, "MB")), 12),
    "PCIE_BW": (na_or(number(0, 64000, "Mb/s")), 12),
    "VRAM_USAGE": (na_or(st.tuples(decimal(""), decimal("GB")).map(lambda p: f"{p[0].strip()}/{p[1]}")), 16),
}


@st.composite
def monitor_outputs(draw):
    names = draw(st.lists(st.sampled_from(sorted(MONITOR_COLUMNS)), min_size=1, unique=True))
    names.insert(draw(st.integers(0, len(names))), "GPU")
    watch = draw(st.booleans())
    if watch:
        names.insert(0, "TIMESTAMP")
    # amd-smi's widths; a column it never prints after another (GPU) gets two spaces of padding there
    widths = {"GPU": 3 if names[0] == "GPU" else 5, **{n: w for n, (_, w) in MONITOR_COLUMNS.items()}}
    samples = draw(st.integers(1, 3)) if watch else 1
    gpus = draw(st.integers(1, 4))
    compact = draw(st.booleans())  # a publisher collapsed the padding and bolded some headers
    rows, lines = [], noise(draw, LEADING_NOISE, "amd-smi monitor")
    if watch:
        lines.append("'CTRL' + 'C' to stop watching output:")
    for sample in range(samples):
        header = [f"**{n}**" if compact and draw(st.booleans()) else n for n in names]
        lines.append(" ".join(header) if compact else "".join(
            (n.rjust(10) + "  ") if n == "TIMESTAMP" else n.rjust(widths[n]) for n in names))
        for gpu in range(gpus):
            row = {n: str(gpu) if n == "GPU" else str(1733226101 + sample) if n == "TIMESTAMP"
                   else draw(MONITOR_COLUMNS[n][0]) for n in names}
            rows.append(row)
            lines.append(" ".join(row[n] for n in names) if compact else "".join(
                (row[n].rjust(10) + "  ") if n == "TIMESTAMP" else row[n].rjust(widths[n]) for n in names))
        lines += ["", ""] if watch else []
    return "\n".join(lines + noise(draw, TRAILING_NOISE, "")) + "\n", rows


@SETTINGS
@given(monitor_outputs())
def test_monitor_reads_every_row_and_only_printed_cells(case):
    text, rows = case
    parsed = parse_amdsmi_monitor(text)
    assert [row.cells for row in parsed] == rows
    for row, expected in zip(parsed, rows):
        assert str(row.gpu) == expected["GPU"]
        assert row.timestamp is None if "TIMESTAMP" not in expected else str(row.timestamp) == expected["TIMESTAMP"]
        for name, cell in row.cells.items():
            value = row.value(name)
            assert value is None or cell.startswith(str(int(value)) if value.is_integer() else str(value))


# --- amd-smi partition (left-aligned tables) -------------------------------------------------------

PARTITION_TABLES = {
    "CURRENT_PARTITION": {
        "MEMORY": st.sampled_from(["NPS1", "NPS2", "NPS4", "N/A"]),
        "ACCELERATOR_TYPE": st.sampled_from(["SPX", "DPX", "QPX", "CPX", "N/A"]),
        "ACCELERATOR_PROFILE_INDEX": na_or(st.integers(0, 4).map(str)),
        "PARTITION_ID": st.sampled_from(["0", "1", "0,1", "0,1,2,3,4,5,6,7", "N/A"]),
    },
    "MEMORY_PARTITION": {
        "MEMORY_PARTITION_CAPS": st.sampled_from(["N/A", "NPS1", "NPS1, NPS4", "NPS1, NPS2, NPS4"]),
        "CURRENT_MEMORY_PARTITION": st.sampled_from(["NPS1", "NPS4", "N/A"]),
    },
}


@st.composite
def partition_outputs(draw):
    titles = draw(st.lists(st.sampled_from(sorted(PARTITION_TABLES)), min_size=1, unique=True))
    lines = noise(draw, LEADING_NOISE, "amd-smi partition")
    expected = {}
    for title in titles:
        columns = PARTITION_TABLES[title]
        names = draw(st.permutations(draw(st.lists(st.sampled_from(sorted(columns)), min_size=1, unique=True))))
        names = list(names)
        names.insert(draw(st.integers(0, len(names))), "GPU_ID")
        rows = [{n: str(gpu) if n == "GPU_ID" else draw(columns[n]) for n in names}
                for gpu in range(draw(st.integers(1, 4)))]
        widths = {n: max([len(n)] + [len(r[n]) for r in rows]) + draw(st.integers(2, 6)) for n in names}
        lines += [title + ":", "".join(n.ljust(widths[n]) for n in names).rstrip()]
        lines += ["".join(r[n].ljust(widths[n]) for n in names).rstrip() for r in rows] + [""]
        expected[title] = rows
    if draw(st.booleans()):
        lines += ["", "Legend:", "  * = Current mode", ""]
    return "\n".join(lines + noise(draw, TRAILING_NOISE, "")) + "\n", expected


@SETTINGS
@given(partition_outputs())
def test_partition_tables_are_read_by_header_name_without_invented_cells(case):
    text, expected = case
    parts = parse_amdsmi_partition(text)
    assert {title: parts.tables[title] for title in expected} == expected
    for gpu in range(4):
        compute, memory = parts.compute_partition(gpu), parts.memory_partition(gpu)
        cells = {c for rows in expected.values() for r in rows if r["GPU_ID"] == str(gpu) for c in r.values()}
        assert compute is None or compute in cells
        assert memory is None or memory in cells


# --- rocm-smi concise table -----------------------------------------------------------------------

CONCISE = {  # name: (second header line, cell)
    "Node": ("", st.integers(0, 64).map(str)),
    "IDs": ("(DID,     GUID)", st.tuples(st.sampled_from(["0x74a1", "0x74A5", "0x74b5"]), st.integers(0, 65535))
            .map(lambda p: f"{p[0]},   {p[1]}")),
    "Temp": ("(Junction)", na_or(decimal("").map(lambda t: t.strip() + "\u00b0C"))),
    "Power": ("(Socket)", na_or(decimal("").map(lambda t: t.strip() + "W"))),
    "Partitions": ("(Mem, Compute, ID)", st.sampled_from(["NPS1, SPX, 0", "NPS4, CPX, 3", "N/A, N/A, N/A"])),
    "SCLK": ("", na_or(number(0, 2100).map(lambda c: c + "Mhz"))),
    "MCLK": ("", na_or(number(0, 1300).map(lambda c: c + "Mhz"))),
    "Fan": ("", st.sampled_from(["0%", "N/A"])),
    "Perf": ("", st.sampled_from(["auto", "manual", "N/A"])),
    "PwrCap": ("", na_or(decimal("").map(lambda t: t.strip() + "W"))),
    "VRAM%": ("", number(0, 100).map(lambda c: c + "%")),
    "GPU%": ("", number(0, 100).map(lambda c: c + "%")),
}
WIDTH = 116


def banner(title: str) -> str:
    side = (WIDTH - len(title) - 2) // 2
    return "=" * side + f" {title} " + "=" * (WIDTH - side - len(title) - 2)


@st.composite
def concise_outputs(draw):
    names = list(draw(st.permutations(draw(st.lists(st.sampled_from(sorted(CONCISE)), min_size=2, unique=True)))))
    names.insert(draw(st.integers(0, len(names))), "Device")
    rows = [{n: str(gpu) if n == "Device" else draw(CONCISE[n][1]) for n in names}
            for gpu in range(draw(st.integers(1, 8)))]
    widths = {n: max([len(n), len(CONCISE.get(n, ("",))[0])] + [len(r[n]) for r in rows]) + 2 for n in names}
    wrapper = ["=== rocm-smi on gpu-node-07 ===", "+ rocm-smi"]
    lines = noise(draw, LEADING_NOISE + wrapper, "rocm-smi")
    lines += [banner("ROCm System Management Interface"), banner("Concise Info"),
              "".join(n.ljust(widths[n]) for n in names).rstrip(),
              "".join(("" if n == "Device" else CONCISE[n][0]).ljust(widths[n]) for n in names).rstrip(),
              "=" * WIDTH]
    lines += ["".join(r[n].ljust(widths[n]) for n in names).rstrip() for r in rows]
    lines += ["=" * WIDTH, banner("End of ROCm SMI Log")]
    return "\n".join(lines + noise(draw, TRAILING_NOISE + ["=== done ==="], "")) + "\n", rows


@SETTINGS
@given(concise_outputs())
def test_rocm_smi_concise_reads_every_gpu_and_only_printed_cells(case):
    text, rows = case
    smi = parse_rocmsmi(text)
    assert smi.sections == ["ROCm System Management Interface", "Concise Info", "End of ROCm SMI Log"]
    assert [str(g.index) for g in smi.gpus] == [r["Device"] for r in rows]
    for gpu, row in zip(smi.gpus, rows):
        assert gpu.fields == {n: c for n, c in row.items() if n != "Device"}
        printed = " ".join(row.values()).lower()
        for value in (gpu.temperature_c, gpu.power_w, gpu.power_cap_w, gpu.vram_percent, gpu.gpu_percent):
            assert value is None or f"{value:g}" in printed.replace(".0", "")
        for value in (gpu.compute_partition, gpu.memory_partition):
            assert value is None or value in row.get("Partitions", "")
        assert gpu.device_id is None or f"{gpu.device_id:04x}" in row.get("IDs", "").lower()


SHOWHW = {
    "NODE": st.integers(0, 64).map(str), "DID": st.sampled_from(["0x74a0", "0x74A1", "0x74b5"]),
    "GUID": st.integers(0, 65535).map(str), "GFX VER": st.sampled_from(["gfx942", "gfx950", "N/A"]),
    "GFX RAS": st.sampled_from(["ENABLED", "DISABLED", "N/A"]), "UMC RAS": st.sampled_from(["ENABLED", "DISABLED"]),
    "VBIOS": st.sampled_from(["N/A", "113-M3000100-102"]),
    "BUS": st.sampled_from(["0000:01:00.0", "0001:01:00.0", "0000:C6:00.0"]),
    "PARTITION ID": na_or(st.integers(0, 7).map(str)),
}


@st.composite
def showhw_outputs(draw):
    names = list(draw(st.permutations(draw(st.lists(st.sampled_from(sorted(SHOWHW)), min_size=2, unique=True)))))
    names.insert(draw(st.integers(0, len(names))), "GPU")
    rows = [{n: str(gpu) if n == "GPU" else draw(SHOWHW[n]) for n in names} for gpu in range(draw(st.integers(1, 12)))]
    widths = {n: max([len(n)] + [len(r[n]) for r in rows]) + 2 for n in names}
    lines = noise(draw, LEADING_NOISE, "rocm-smi --showhw")
    lines += [banner("ROCm System Management Interface"), banner("Concise Hardware Info"),
              "".join(n.ljust(widths[n]) for n in names).rstrip()]
    lines += ["".join(r[n].ljust(widths[n]) for n in names).rstrip() for r in rows]
    lines += ["=" * WIDTH, banner("End of ROCm SMI Log")]
    return "\n".join(lines + noise(draw, TRAILING_NOISE, "")) + "\n", rows


@SETTINGS
@given(showhw_outputs())
def test_rocm_smi_showhw_reads_every_gpu_by_header_name(case):
    text, rows = case
    smi = parse_rocmsmi(text)
    assert [str(g.index) for g in smi.gpus] == [r["GPU"] for r in rows]
    for gpu, row in zip(smi.gpus, rows):
        assert gpu.fields == row
        assert gpu.device_id is None or int(row["DID"], 16) == gpu.device_id
        assert gpu.bdf is None or gpu.bdf == row["BUS"].lower()
        assert gpu.gfx_version is None or gpu.gfx_version == row["GFX VER"]
        assert gpu.partition_id is None or str(gpu.partition_id) == row["PARTITION ID"]


# --- hipblaslt-bench result block ------------------------------------------------------------------

HIPBLASLT = {
    "transA": st.sampled_from(["N", "T"]), "transB": st.sampled_from(["N", "T"]),
    "batch_count": st.just("1"), "m": st.integers(1, 131072).map(str), "n": st.integers(1, 131072).map(str),
    "k": st.integers(1, 131072).map(str), "alpha": st.just("1"), "beta": st.just("0"),
    "a_type": st.sampled_from(["f8_fnuz_r", "f8_r", "bf16_r", "f32_r"]),
    "bias_type": st.sampled_from(["non-supported type", "f32_r"]),
    "activation_type": st.just("none"),
    "hipblaslt-Gflops": st.floats(1, 3e6, allow_nan=False).map(lambda f: f"{f:g}"),
    "hipblaslt-GB/s": st.floats(0.1, 9000, allow_nan=False).map(lambda f: f"{f:g}"),
    "us": st.floats(1, 1e6, allow_nan=False).map(lambda f: f"{f:g}"),
    "norm_error": st.sampled_from(["2.44879e-07", "0", "N/A"]),
    "avg-MCLK": st.integers(100, 1900).map(str),
}


@st.composite
def hipblaslt_outputs(draw):
    # any subset in any order, of at least two columns (hipblaslt-bench prints a dozen or more)
    names = list(draw(st.permutations(draw(st.lists(st.sampled_from(sorted(HIPBLASLT)), min_size=2, unique=True)))))
    if "transA" not in names and "hipblaslt-Gflops" not in names:
        names.insert(draw(st.integers(0, len(names))), "hipblaslt-Gflops")
    values = {n: draw(HIPBLASLT[n]) for n in names}
    prefix = draw(st.sampled_from(["[0]:", ""]))
    lines = noise(draw, LEADING_NOISE, "hipblaslt-bench -m 4096 -n 4096 -k 4096")
    if draw(st.booleans()):
        lines += ["hipBLASLt version: 100200", "Query device success: there are 1 devices. (Target device ID is 0)",
                  "Device ID 0 : AMD Instinct MI300X gfx942:sramecc+:xnack-", "",
                  "Is supported 1 / Total solutions: 1"]
    lines += [prefix + ",".join(names), "    " + ",".join(values[n] for n in names)]
    return "\n".join(lines + noise(draw, TRAILING_NOISE, "")) + "\n", values


@SETTINGS
@given(hipblaslt_outputs())
def test_hipblaslt_result_row_keeps_every_column_as_printed(case):
    text, values = case
    (row,) = parse_hipblaslt_bench(text).rows
    assert row.values == {n: parse_scalar(c) for n, c in values.items()}
    for name, value in row.values.items():
        assert value is None or str(value) == values[name] or float(value) == float(values[name])


# --- amd-smi --csv ----------------------------------------------------------------------------------

CSV_COLUMNS = {
    "gpu_bdf": st.sampled_from(["0000:05:00.0", "0000:c6:00.0", "0000:0C:00.0"]),
    "gpu_uuid": st.just("00ff74a1-0000-1000-8000-000000000000"),
    "market_name": st.sampled_from(["AMD Instinct MI300X", "AMD Instinct MI300X VF", "N/A"]),
    "device_id": st.sampled_from(["0x74a1", "0x74A5", "0x74b5", "N/A"]),
    "num_compute_units": na_or(st.sampled_from(["304", "80", "38"])),
    "power_usage": na_or(number(0, 750)),
}


@st.composite
def csv_outputs(draw):
    names = list(draw(st.permutations(draw(st.lists(st.sampled_from(sorted(CSV_COLUMNS)), unique=True)))))
    names.insert(draw(st.integers(0, len(names))), "gpu")
    rows = [{n: str(gpu) if n == "gpu" else draw(CSV_COLUMNS[n]) for n in names}
            for gpu in range(draw(st.integers(1, 4)))]
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=names, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue(), rows


@SETTINGS
@given(csv_outputs())
def test_amd_smi_csv_keeps_every_column_and_invents_nothing(case):
    text, rows = case
    gpus = parse_amdsmi_csv(text)
    assert [str(g.index) for g in gpus] == [r["gpu"] for r in rows]
    for gpu, row in zip(gpus, rows):
        assert gpu.fields == {(n[4:] if n.startswith("gpu_") else n): c for n, c in row.items()}
        assert gpu.market_name is None or gpu.market_name == row.get("market_name")
        assert gpu.device_id is None or int(row["device_id"], 16) == gpu.device_id
        assert gpu.compute_units is None or str(gpu.compute_units) == row.get("num_compute_units")
        assert gpu.bdf is None or gpu.bdf == row["gpu_bdf"].lower()
