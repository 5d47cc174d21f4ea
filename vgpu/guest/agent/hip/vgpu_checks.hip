// vgpu guest HIP workload: vector add (checked element by element), device-memory bandwidth, and
// an FP8 MFMA tile. Shipped inside the agent zipapp and compiled on the guest with
//     hipcc --offload-arch=<gfx target> -O3 -o vgpu_checks vgpu_checks.hip
// Every result is one JSON object per line on stdout; the agent parses those lines.
//
// The same file also compiles as device code only, without ROCm headers, with
//     clang++-22 -x hip --offload-arch=gfx942 -nogpulib -nogpuinc --cuda-device-only ...
// (no ROCm headers or runtime where the tests build it): the kernels use clang's amdgcn builtins for work-item ids
// and FP8, and the host part is guarded by VGPU_HAVE_RUNTIME (set when hip_runtime.h exists).

#if !defined(VGPU_DEVICE_ONLY) && defined(__has_include)
#if __has_include(<hip/hip_runtime.h>)
#include <hip/hip_runtime.h>
#define VGPU_HAVE_RUNTIME 1
#endif
#endif

#ifndef VGPU_HAVE_RUNTIME
#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
#endif

// FP8 conversion and FP8 MFMA exist on gfx942 (MI300X/MI325X) and gfx950 (MI350X/MI355X) only;
// older targets (gfx90a, gfx908) build the same program with an empty FP8 kernel, and the host
// reports the FP8 test as skipped there (docs/hardware.md §1: no FP8 in hardware).
#if defined(__gfx942__) || defined(__gfx950__)
#define VGPU_DEVICE_FP8 1
#endif

typedef float v4f __attribute__((ext_vector_type(4)));
typedef unsigned long long u64;

__device__ static inline u64 global_id() {
  return (u64)__builtin_amdgcn_workgroup_id_x() * __builtin_amdgcn_workgroup_size_x() +
         __builtin_amdgcn_workitem_id_x();
}

// grid_size_x is the total number of work-items in the dispatch (HSA dispatch packet).
__device__ static inline u64 grid_stride() { return (u64)__builtin_amdgcn_grid_size_x(); }

extern "C" __global__ void vgpu_vector_add(const float* a, const float* b, float* c, u64 n) {
  for (u64 i = global_id(); i < n; i += grid_stride()) c[i] = a[i] + b[i];
}

// Streams 16-byte vectors so the ISA uses global_load_dwordx4 / global_store_dwordx4.
extern "C" __global__ void vgpu_copy(const v4f* in, v4f* out, u64 n) {
  for (u64 i = global_id(); i < n; i += grid_stride()) out[i] = in[i];
}

// One wavefront (64 lanes) quantizes 16x32 A and 32x16 B float tiles to the arch's FP8 format
// (FNUZ on gfx942, OCP on gfx950: the same instructions, docs/hardware.md §8) and multiplies them
// with one MFMA 16x16x32. Lane l supplies 8 consecutive k values: a[l*8 .. l*8+7] and
// b[l*8 .. l*8+7]; the host fills every row of A and every column of B alike, so the result does
// not depend on how lanes map to rows and columns: every output is the same dot product.
#ifdef VGPU_DEVICE_FP8
__device__ static inline u64 pack8_fp8(const float* x) {
  int lo = __builtin_amdgcn_cvt_pk_fp8_f32(x[0], x[1], 0, false);
  lo = __builtin_amdgcn_cvt_pk_fp8_f32(x[2], x[3], lo, true);
  int hi = __builtin_amdgcn_cvt_pk_fp8_f32(x[4], x[5], 0, false);
  hi = __builtin_amdgcn_cvt_pk_fp8_f32(x[6], x[7], hi, true);
  return ((u64)(unsigned)hi << 32) | (u64)(unsigned)lo;
}

// 1.25 * 2^-10 tells the two e4m3 encodings apart (no tie in either): FNUZ (bias 8) has subnormals
// m * 2^-10 and rounds it to 2^-10; OCP e4m3fn (bias 7) has m * 2^-9 and rounds it to 2^-9.
#define VGPU_FORMAT_PROBE 0.001220703125f

extern "C" __global__ void vgpu_fp8_mfma(const float* a, const float* b, float* c, float* roundtrip) {
  unsigned lane = __builtin_amdgcn_workitem_id_x();
  u64 pa = pack8_fp8(a + lane * 8);
  u64 pb = pack8_fp8(b + lane * 8);
  // Decoding the first byte back checks the conversion on its own (v_cvt_f32_fp8).
  roundtrip[lane] = __builtin_amdgcn_cvt_f32_fp8((int)(unsigned)pa, 0);
  if (lane == 0) {  // roundtrip[64]: which FP8 encoding the hardware uses
    int probe = __builtin_amdgcn_cvt_pk_fp8_f32(VGPU_FORMAT_PROBE, 0.0f, 0, false);
    roundtrip[64] = __builtin_amdgcn_cvt_f32_fp8(probe, 0);
  }
  v4f acc = {0.0f, 0.0f, 0.0f, 0.0f};
  acc = __builtin_amdgcn_mfma_f32_16x16x32_fp8_fp8((long)pa, (long)pb, acc, 0, 0, 0);
  for (int i = 0; i < 4; ++i) c[lane * 4 + i] = acc[i];
}
#else
extern "C" __global__ void vgpu_fp8_mfma(const float* a, const float* b, float* c, float* roundtrip) {}
#endif

#ifdef VGPU_HAVE_RUNTIME
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(call)                                                                    \
  do {                                                                                 \
    hipError_t e_ = (call);                                                            \
    if (e_ != hipSuccess) {                                                            \
      printf("{\"test\":\"error\",\"call\":\"%s\",\"error\":\"%s\"}\n", #call,          \
             hipGetErrorString(e_));                                                   \
      exit(3);                                                                         \
    }                                                                                  \
  } while (0)

static void device_info() {
  hipDeviceProp_t p;
  CHECK(hipGetDeviceProperties(&p, 0));
  printf("{\"test\":\"device\",\"name\":\"%s\",\"arch\":\"%s\",\"cus\":%d,\"vram_bytes\":%llu}\n",
         p.name, p.gcnArchName, p.multiProcessorCount, (unsigned long long)p.totalGlobalMem);
}

static void vector_add(u64 n) {
  float *ha = (float*)malloc(n * 4), *hb = (float*)malloc(n * 4), *hc = (float*)malloc(n * 4);
  for (u64 i = 0; i < n; ++i) { ha[i] = (float)(i % 1024); hb[i] = 0.5f * (float)(i % 77); }
  float *da, *db, *dc;
  CHECK(hipMalloc(&da, n * 4)); CHECK(hipMalloc(&db, n * 4)); CHECK(hipMalloc(&dc, n * 4));
  CHECK(hipMemcpy(da, ha, n * 4, hipMemcpyHostToDevice));
  CHECK(hipMemcpy(db, hb, n * 4, hipMemcpyHostToDevice));
  hipLaunchKernelGGL(vgpu_vector_add, dim3(1024), dim3(256), 0, 0, da, db, dc, n);
  CHECK(hipGetLastError());
  CHECK(hipMemcpy(hc, dc, n * 4, hipMemcpyDeviceToHost));
  u64 bad = 0, first = n;
  for (u64 i = 0; i < n; ++i)  // exact: both addends and their sum are representable
    if (hc[i] != ha[i] + hb[i]) { if (!bad) first = i; ++bad; }
  printf("{\"test\":\"vector_add\",\"n\":%llu,\"mismatches\":%llu,\"first_bad\":%lld}\n",
         (unsigned long long)n, (unsigned long long)bad, bad ? (long long)first : -1LL);
  CHECK(hipFree(da)); CHECK(hipFree(db)); CHECK(hipFree(dc)); free(ha); free(hb); free(hc);
}

static void bandwidth(u64 bytes, int iters) {
  u64 n = bytes / sizeof(v4f);
  v4f *in, *out;
  CHECK(hipMalloc(&in, n * sizeof(v4f))); CHECK(hipMalloc(&out, n * sizeof(v4f)));
  CHECK(hipMemset(in, 1, n * sizeof(v4f)));
  hipEvent_t t0, t1;
  CHECK(hipEventCreate(&t0)); CHECK(hipEventCreate(&t1));
  hipLaunchKernelGGL(vgpu_copy, dim3(8192), dim3(256), 0, 0, in, out, n);  // warm-up
  CHECK(hipEventRecord(t0, 0));
  for (int i = 0; i < iters; ++i) hipLaunchKernelGGL(vgpu_copy, dim3(8192), dim3(256), 0, 0, in, out, n);
  CHECK(hipEventRecord(t1, 0));
  CHECK(hipEventSynchronize(t1));
  float ms = 0;
  CHECK(hipEventElapsedTime(&ms, t0, t1));
  double moved = 2.0 * (double)n * sizeof(v4f) * iters;  // each element read once, written once
  printf("{\"test\":\"bandwidth\",\"bytes\":%.0f,\"seconds\":%.6f,\"gbps\":%.1f}\n", moved, ms / 1e3,
         moved / (ms / 1e3) / 1e9);
  CHECK(hipFree(in)); CHECK(hipFree(out));
}

static void fp8_mfma() {
  hipDeviceProp_t p;
  CHECK(hipGetDeviceProperties(&p, 0));
  if (strncmp(p.gcnArchName, "gfx942", 6) != 0 && strncmp(p.gcnArchName, "gfx950", 6) != 0) {
    printf("{\"test\":\"fp8_mfma\",\"skipped\":\"no FP8 instructions on %s\"}\n", p.gcnArchName);
    return;
  }
  // Small integers are exact in both e4m3 formats, so the MFMA result must equal the host sum.
  float ha[512], hb[512], hc[256], hr[65], expect = 0;
  for (int i = 0; i < 512; ++i) {
    int k = (i / 128) * 8 + i % 8;  // lane = i / 8 holds k block lane / 16 = i / 128
    ha[i] = (float)(k % 5 - 2);
    hb[i] = (float)(k % 3 + 1);
  }
  for (int k = 0; k < 32; ++k) expect += (float)(k % 5 - 2) * (float)(k % 3 + 1);
  float *da, *db, *dc, *dr;
  CHECK(hipMalloc(&da, sizeof ha)); CHECK(hipMalloc(&db, sizeof hb));
  CHECK(hipMalloc(&dc, sizeof hc)); CHECK(hipMalloc(&dr, sizeof hr));
  CHECK(hipMemcpy(da, ha, sizeof ha, hipMemcpyHostToDevice));
  CHECK(hipMemcpy(db, hb, sizeof hb, hipMemcpyHostToDevice));
  hipLaunchKernelGGL(vgpu_fp8_mfma, dim3(1), dim3(64), 0, 0, da, db, dc, dr);
  CHECK(hipGetLastError());
  CHECK(hipMemcpy(hc, dc, sizeof hc, hipMemcpyDeviceToHost));
  CHECK(hipMemcpy(hr, dr, sizeof hr, hipMemcpyDeviceToHost));
  int bad = 0;
  for (int i = 0; i < 256; ++i) bad += hc[i] != expect;
  for (int l = 0; l < 64; ++l) bad += hr[l] != ha[l * 8];
  printf("{\"test\":\"fp8_mfma\",\"expected\":%.1f,\"got\":%.1f,\"mismatches\":%d,\"format_probe\":%.9g}\n",
         expect, hc[0], bad, hr[64]);
  CHECK(hipFree(da)); CHECK(hipFree(db)); CHECK(hipFree(dc)); CHECK(hipFree(dr));
}

int main(int argc, char** argv) {
  u64 mib = argc > 1 ? strtoull(argv[1], 0, 10) : 1024;  // bandwidth buffer size in MiB
  device_info();
  vector_add(1ull << 24);
  bandwidth(mib << 20, 20);
  fp8_mfma();
  return 0;
}
#endif
