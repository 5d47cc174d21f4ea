"""The guest HIP source compiles for gfx942 and gfx950 with clang-22, and the ISA has what the kernels need.

No ROCm here, so the device code is built with ``-nogpulib -nogpuinc``
(clang builtins only) and disassembled with llvm-objdump-22; the host part is syntax-checked
against a declarations-only stub header (tests/hip/stub). On a real guest hipcc builds the same
file with hip_runtime.h (the agent's hip.compile check).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from vgpu.guest import agent

pytestmark = pytest.mark.hipcompile

CLANG = shutil.which("clang++-22")
OBJDUMP = shutil.which("llvm-objdump-22")
SOURCE = Path(agent.__file__).resolve().parent / "hip" / "vgpu_checks.hip"
STUB = Path(__file__).resolve().parent / "stub"
ARCHS = ("gfx942", "gfx950")

needs_clang = pytest.mark.skipif(CLANG is None or OBJDUMP is None,
                                 reason="clang++-22 / llvm-objdump-22 not installed (make deps-test installs them)")


def compile_device(arch: str, out: Path) -> str:
    cmd = [CLANG, "-x", "hip", f"--offload-arch={arch}", "-nogpulib", "-nogpuinc", "--cuda-device-only",
           "--no-gpu-bundle-output", "-O3", "-Werror", "-o", str(out), str(SOURCE)]
    subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=120)
    dis = subprocess.run([OBJDUMP, "-d", f"--mcpu={arch}", str(out)], check=True, capture_output=True,
                         text=True, timeout=60)
    return dis.stdout


@pytest.fixture(scope="module", params=ARCHS)
def isa(request, tmp_path_factory) -> tuple[str, str]:
    if CLANG is None or OBJDUMP is None:
        pytest.skip("clang++-22 / llvm-objdump-22 not installed (make deps-test installs them)")
    out = tmp_path_factory.mktemp(request.param) / "k.co"
    return request.param, compile_device(request.param, out)


def kernel_body(disassembly: str, name: str) -> str:
    """The instructions of one kernel symbol ("<name>:" up to the next symbol)."""
    match = re.search(rf"^[0-9a-f]+ <{name}>:\n(.*?)(?=^[0-9a-f]+ <|\Z)", disassembly, re.S | re.M)
    assert match, f"kernel {name} not in the code object"
    return match.group(1)


def mnemonics(body: str) -> set[str]:
    return {line.split()[0] for line in body.splitlines() if line.strip() and not line.strip().startswith("<")}


def test_all_three_kernels_are_in_the_code_object(isa):
    arch, dis = isa
    for name in ("vgpu_vector_add", "vgpu_copy", "vgpu_fp8_mfma"):
        kernel_body(dis, name)


def test_vector_add_loads_and_stores_global_memory(isa):
    ops = mnemonics(kernel_body(isa[1], "vgpu_vector_add"))
    assert "global_load_dword" in ops and "global_store_dword" in ops and "v_add_f32_e32" in ops


def test_copy_kernel_moves_16_bytes_per_access(isa):
    ops = mnemonics(kernel_body(isa[1], "vgpu_copy"))
    assert {"global_load_dwordx4", "global_store_dwordx4"} <= ops


def test_fp8_kernel_uses_hardware_fp8_conversion_and_mfma(isa):
    arch, dis = isa
    ops = mnemonics(kernel_body(dis, "vgpu_fp8_mfma"))
    assert "v_cvt_pk_fp8_f32" in ops
    assert "v_mfma_f32_16x16x32_fp8_fp8" in ops
    assert any(op.startswith("v_cvt_f32_fp8") for op in ops), sorted(ops)
    # the FNUZ/OCP probe 1.25 * 2^-10 (f32 0x3aa00000) is converted by the hardware, not folded away
    assert "0x3aa00000" in kernel_body(dis, "vgpu_fp8_mfma")


@needs_clang
def test_older_target_without_fp8_builds_with_an_empty_fp8_kernel(tmp_path):
    # gfx90a (MI210/MI250) has no FP8 instructions: the program must still build there.
    dis = compile_device("gfx90a", tmp_path / "k.co")
    assert "global_load_dwordx4" in kernel_body(dis, "vgpu_copy")
    assert not [op for op in mnemonics(kernel_body(dis, "vgpu_fp8_mfma")) if "fp8" in op]


@needs_clang
def test_host_code_is_valid_against_the_hip_runtime_api(tmp_path):
    proc = subprocess.run([CLANG, "-x", "hip", "--offload-arch=gfx942", "-nogpulib", "-nogpuinc", "--cuda-host-only",
                           "-fsyntax-only", "-Wall", "-Werror", "-I", str(STUB), str(SOURCE)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
