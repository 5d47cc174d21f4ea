"""FP8 GEMM through PyTorch's ``torch._scaled_mm`` (docs/hardware.md §8), run by the guest's python.

The agent starts this module as a separate process (``python -m vgpu.guest.agent.fp8_torch``
with the agent archive on PYTHONPATH) so that a missing or broken torch never touches the agent.
It prints one JSON object: {"status": "ok", "tflops", "rel_error", "quant_error", ...} or
{"status": "skip" | "error", "reason"}. The numerical judgement is fp8ref's, the same functions
tests/unit/test_fp8_reference.py checks with ml_dtypes.
"""

from __future__ import annotations

import argparse
import json
import sys
import time


def _load_torch():
    try:
        import torch
    except Exception as exc:  # ImportError, or a broken install raising anything
        return None, "no PyTorch importable by %s (%s: %s)" % (sys.executable, type(exc).__name__, exc)
    if getattr(torch.version, "hip", None) is None:
        return None, "PyTorch %s is not a ROCm build (torch.version.hip is None)" % torch.__version__
    if not torch.cuda.is_available():
        return None, "ROCm PyTorch %s sees no GPU (torch.cuda.is_available() is False)" % torch.__version__
    return torch, ""


def measure(torch, dtype_name: str, m: int, n: int, k: int, iters: int) -> dict:
    from vgpu.guest.agent import fp8ref

    dtype = getattr(torch, dtype_name)
    gen = torch.Generator(device="cpu").manual_seed(0)
    a = torch.randn(m, k, generator=gen).cuda()
    b_t = torch.randn(n, k, generator=gen).cuda()
    ref = fp8ref.reference_gemm(a, b_t, dtype_name, lambda x: x.to(dtype), lambda q: q.to(torch.float32))
    sa = torch.tensor(ref["scale_a"], device="cuda")
    sb = torch.tensor(ref["scale_b"], device="cuda")

    def gemm():
        # B must be column-major for _scaled_mm: pass the (n x k) row-major tensor transposed.
        return torch._scaled_mm(ref["qa"], ref["qb_t"].t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)

    out = gemm()
    verdict = fp8ref.judge(out.to(torch.float32), ref)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(iters):
        gemm()
    torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    verdict.update(status="ok", tflops=2.0 * m * n * k * iters / seconds / 1e12, seconds=seconds,
                   device=torch.cuda.get_device_name(0), torch=torch.__version__, hip=torch.version.hip,
                   dtype=dtype_name, shape=[m, n, k])
    return verdict


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="fp8_torch")
    parser.add_argument("--dtype", required=True, choices=["float8_e4m3fnuz", "float8_e4m3fn"])
    parser.add_argument("-m", type=int, default=4096)
    parser.add_argument("-n", type=int, default=4096)
    parser.add_argument("-k", type=int, default=4096)
    parser.add_argument("--iters", type=int, default=20)
    args = parser.parse_args(argv)
    torch, why = _load_torch()
    if torch is None:
        out = {"status": "skip", "reason": why}
    else:
        try:
            out = measure(torch, args.dtype, args.m, args.n, args.k, args.iters)
        except Exception as exc:  # report the failure as data; the agent turns it into an error check
            out = {"status": "error", "reason": "%s: %s" % (type(exc).__name__, exc)}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
