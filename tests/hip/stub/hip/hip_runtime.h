// A declarations-only stand-in for ROCm's hip_runtime.h, for a syntax check of vgpu_checks.hip's host
// code where ROCm is not installed (tests/hip). Signatures follow the HIP runtime API as the program uses
// it; nothing here runs. On a real guest hipcc uses the real header.
#pragma once
#include <stddef.h>
#define __global__ __attribute__((global))
#define __device__ __attribute__((device))
typedef int hipError_t;
enum { hipSuccess = 0 };
typedef struct { char name[256]; char gcnArchName[256]; int multiProcessorCount; size_t totalGlobalMem; } hipDeviceProp_t;
typedef struct ihipEvent_t* hipEvent_t;
typedef struct ihipStream_t* hipStream_t;
typedef enum { hipMemcpyHostToDevice = 1, hipMemcpyDeviceToHost = 2 } hipMemcpyKind;
struct dim3 { unsigned x, y, z; dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {} };
hipError_t hipGetDeviceProperties(hipDeviceProp_t*, int);
const char* hipGetErrorString(hipError_t);
hipError_t hipMalloc(void**, size_t);
template <class T> hipError_t hipMalloc(T** p, size_t n) { return hipMalloc((void**)p, n); }
hipError_t hipFree(void*);
hipError_t hipMemcpy(void*, const void*, size_t, hipMemcpyKind);
hipError_t hipMemset(void*, int, size_t);
hipError_t hipGetLastError();
hipError_t hipEventCreate(hipEvent_t*);
hipError_t hipEventRecord(hipEvent_t, hipStream_t);
hipError_t hipEventSynchronize(hipEvent_t);
hipError_t hipEventElapsedTime(float*, hipEvent_t, hipEvent_t);
template <class... P, class... A> void vgpu_stub_launch(void (*)(P...), dim3, dim3, unsigned, hipStream_t, A...) {}
#define hipLaunchKernelGGL(k, g, b, s, st, ...) vgpu_stub_launch(k, g, b, s, st, __VA_ARGS__)
