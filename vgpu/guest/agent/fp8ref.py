"""FP8 reference math: quantize with clipping, dequantize, GEMM, error against float32.

Written once for any array type that has ``abs()``, ``.max()``, ``.clip()``, ``@``, ``**`` and
``.sum()`` (numpy arrays and torch tensors both do): the guest judges ``torch._scaled_mm`` with
these functions (fp8_torch.py), and tests/unit/test_fp8_reference.py checks the same functions
with ml_dtypes' float8_e4m3fnuz / float8_e4m3fn on the CPU. Casting is passed in, since numpy
spells it ``astype`` and torch ``to``.

Why clip: casting an out-of-range value to these FP8 types gives NaN, not saturation
(ml_dtypes casts), so values are clipped to the format's largest finite value first.
Standard library only, Python >= 3.8.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Optional, Tuple

# Largest finite value of each E4M3 flavour: FNUZ (gfx942) 240, OCP (gfx950) 448.
FP8_MAX: Dict[str, float] = {"float8_e4m3fnuz": 240.0, "float8_e4m3fn": 448.0}
# E4M3 keeps 3 mantissa bits: rounding to nearest moves a value by at most 2**-4 of itself.
FP8_UNIT_ROUNDOFF = 2.0 ** -4
# Error of the FP8 GEMM output against float32 math on the *dequantized* inputs: only the
# accumulation order and the bf16 output rounding (8 significant bits, 2**-9 relative) differ,
# so anything above 1% means wrong arithmetic, not rounding.
GEMM_ERROR_BOUND = 0.01
# Error of the FP8 GEMM against float32 math on the *original* inputs: quantization error of
# both operands (random-sign sums grow like sqrt(k) while the result does too).
QUANT_ERROR_BOUND = 0.08


def scale_for(amax: float, fp8_max: float) -> float:
    """Per-tensor scale that maps the largest magnitude onto the format's largest value."""
    return amax / fp8_max if amax > 0 else 1.0


def quantize(x: Any, dtype_name: str, cast: Callable[[Any], Any], scale: Optional[float] = None) -> Tuple[Any, float]:
    """(fp8 array, scale) with ``x ~= fp8 * scale``; values beyond the range saturate, never NaN."""
    fp8_max = FP8_MAX[dtype_name]
    if scale is None:
        scale = scale_for(float(abs(x).max()), fp8_max)
    return cast((x / scale).clip(-fp8_max, fp8_max)), scale


def dequantize(q: Any, scale: float, to_float32: Callable[[Any], Any]) -> Any:
    return to_float32(q) * scale


def relative_error(out: Any, ref: Any) -> float:
    """Frobenius norm of (out - ref) over that of ref."""
    num = float((((out - ref) ** 2).sum()) ** 0.5)
    den = float(((ref ** 2).sum()) ** 0.5)
    return num / den if den > 0 else (0.0 if num == 0 else float("inf"))


def reference_gemm(a: Any, b_t: Any, dtype_name: str, cast: Callable[[Any], Any],
                   to_float32: Callable[[Any], Any]) -> Dict[str, Any]:
    """Quantize ``a`` (m x k) and ``b_t`` (n x k, i.e. B transposed) and the float32 references.

    Returns qa, scale_a, qb_t, scale_b, ``ref_q`` = dequant(a) @ dequant(b_t).T (what exact FP8
    hardware would compute) and ``ref_f32`` = a @ b_t.T (the unquantized product).
    """
    qa, sa = quantize(a, dtype_name, cast)
    qb, sb = quantize(b_t, dtype_name, cast)
    ref_q = dequantize(qa, sa, to_float32) @ dequantize(qb, sb, to_float32).T
    return {"qa": qa, "scale_a": sa, "qb_t": qb, "scale_b": sb, "ref_q": ref_q, "ref_f32": a @ b_t.T}


def judge(out_f32: Any, ref: Dict[str, Any]) -> Dict[str, Any]:
    """Errors of a GEMM output (as float32) against both references, and whether they are acceptable."""
    gemm = relative_error(out_f32, ref["ref_q"])
    quant = relative_error(out_f32, ref["ref_f32"])
    return {"rel_error": gemm, "quant_error": quant, "bound": GEMM_ERROR_BOUND, "quant_bound": QUANT_ERROR_BOUND,
            "ok": gemm <= GEMM_ERROR_BOUND and quant <= QUANT_ERROR_BOUND}
