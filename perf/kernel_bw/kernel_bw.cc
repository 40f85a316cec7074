// loom-kernel-bw: the bandwidth of Loom's CUDA reduce and copy kernels against a
// device-to-device cudaMemcpy on the same GPU, the physical ceiling for a pass over memory.
// Bytes counted are read + written: 2N for a copy, 3N for a reduce of two inputs.
//
//   loom-kernel-bw [--min-bytes N] [--max-bytes N] [--iters N] [--types f32,f16,bf16,...]
//
// Prints one row per (size, type): memcpy, copy kernel and reduce kernel in GB/s (1e9),
// and reduce / memcpy. Without a CUDA device it says so and exits 0.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "algorithms/plan.h"
#include "kernels/cuda/device_reduce.h"

namespace {

struct TypeName {
  const char* name;
  loomDataType_t type;
};
constexpr TypeName kTypes[] = {{"i8", loomInt8},     {"u8", loomUint8},    {"i32", loomInt32},   {"u32", loomUint32},
                               {"i64", loomInt64},   {"u64", loomUint64},  {"f16", loomFloat16}, {"f32", loomFloat32},
                               {"f64", loomFloat64}, {"bf16", loomBfloat16}, {"f8e4m3", loomFloat8e4m3},
                               {"f8e5m2", loomFloat8e5m2}};

[[noreturn]] void die(const char* what, cudaError_t e) {
  std::fprintf(stderr, "loom-kernel-bw: %s: %s\n", what, cudaGetErrorString(e));
  std::exit(1);
}

// Median seconds per run of `launch`, timed with events around `iters` back-to-back runs.
double timeIt(const std::function<void()>& launch, int iters, cudaStream_t s) {
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  for (int i = 0; i < 3; ++i) launch();  // warm up
  std::vector<double> samples;
  for (int rep = 0; rep < 5; ++rep) {
    cudaEventRecord(start, s);
    for (int i = 0; i < iters; ++i) launch();
    cudaEventRecord(stop, s);
    cudaError_t e = cudaEventSynchronize(stop);
    if (e != cudaSuccess) die("cudaEventSynchronize", e);
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    samples.push_back(ms / 1e3 / iters);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(samples.begin(), samples.end());
  return samples[samples.size() / 2];
}

size_t parseBytes(const char* text) {
  char* end = nullptr;
  double v = std::strtod(text, &end);
  if (*end == 'K') v *= 1 << 10;
  if (*end == 'M') v *= 1 << 20;
  if (*end == 'G') v *= 1 << 30;
  return static_cast<size_t>(v);
}

}  // namespace

int main(int argc, char** argv) {
  size_t minBytes = 1 << 20, maxBytes = size_t{1} << 30;
  int iters = 20;
  std::string types = "f32,f16,bf16";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(stderr, "loom-kernel-bw: %s needs a value\n", a.c_str());
      return 2;
    }
    if (a == "--min-bytes") {
      minBytes = parseBytes(argv[++i]);
    } else if (a == "--max-bytes") {
      maxBytes = parseBytes(argv[++i]);
    } else if (a == "--iters") {
      iters = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--types") {
      types = argv[++i];
    } else {
      std::fprintf(stderr, "loom-kernel-bw: unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("skipped: no CUDA device\n");
    return 0;
  }
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  std::printf("# device 0: %s, %d SMs, kernels for %s\n", prop.name, prop.multiProcessorCount,
              loom::cuda::architectures());
  std::printf("# GB/s = 1e9 bytes read + written per second; memcpy and copy move 2N, reduce 3N\n");
  std::printf("#%12s %5s %12s %12s %12s %10s\n", "bytes", "type", "memcpy", "copy-kernel", "reduce", "red/memcpy");
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  void *a = nullptr, *b = nullptr, *d = nullptr;
  for (void** p : {&a, &b, &d}) {
    cudaError_t e = cudaMalloc(p, maxBytes);
    if (e != cudaSuccess) die("cudaMalloc", e);
    cudaMemset(*p, 0, maxBytes);  // zeros: finite values in every type
  }
  for (size_t bytes = minBytes; bytes <= maxBytes; bytes *= 4) {
    for (const TypeName& t : kTypes) {
      if (("," + types + ",").find("," + std::string(t.name) + ",") == std::string::npos) continue;
      const size_t n = bytes / loom::typeSize(t.type);
      // Fewer repetitions of big sizes: each timed batch is at least ~64 MiB of traffic.
      const int it = std::max(1, static_cast<int>(iters * (size_t{64} << 20) / std::max(bytes, size_t{64} << 20)));
      double memcpyS = timeIt([&] { cudaMemcpyAsync(d, a, bytes, cudaMemcpyDeviceToDevice, s); }, it, s);
      double copyS = timeIt([&] { loom::cuda::copy(d, a, bytes, s); }, it, s);
      double reduceS = timeIt([&] { loom::cuda::reduce(d, nullptr, a, b, n, t.type, loomSum, 0, s); }, it, s);
      double memcpyBw = 2.0 * bytes / memcpyS / 1e9, copyBw = 2.0 * bytes / copyS / 1e9,
             reduceBw = 3.0 * bytes / reduceS / 1e9;
      std::printf(" %12zu %5s %12.1f %12.1f %12.1f %10.2f\n", bytes, t.name, memcpyBw, copyBw, reduceBw,
                  reduceBw / memcpyBw);
    }
  }
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) die("a kernel launch", e);
  return 0;
}
