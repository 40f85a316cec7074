// What lets one source run as CUDA device code and as host code: the device executor's
// FIFO protocol and plan interpreter are compiled by nvcc into the plan kernel and by the
// host compiler into the CPU emulation that CI runs (docs/ARCHITECTURE.md, "Device
// communicators").
#pragma once

#if defined(__CUDACC__)
#define LOOM_HD __host__ __device__ __forceinline__
// A function the plan kernel calls rather than inlines: the kernel holds a loop for every
// type x op, and inlining them all into one function costs ptxas tens of minutes and
// gigabytes (register allocation grows faster than the function).
#define LOOM_HD_CALLED __host__ __device__ __noinline__
// Before a __host__ __device__ template that calls what its arguments bring: a host-only
// callable then makes only the host instance, which nvcc would otherwise warn about.
#define LOOM_HD_TEMPLATE _Pragma("nv_exec_check_disable")
#else
#define LOOM_HD inline
#define LOOM_HD_CALLED inline
#define LOOM_HD_TEMPLATE
#endif

// True while nvcc compiles for the GPU (the device half of a __host__ __device__ function).
#if defined(__CUDA_ARCH__)
#define LOOM_ON_DEVICE 1
#else
#define LOOM_ON_DEVICE 0
#endif
