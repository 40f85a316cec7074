// float32 sum bandwidth of loom::kernels::reduce on each instruction-set path, beside memcpy
// and a plain c[i] = a[i] + b[i] loop compiled into this binary with the build's own flags.
//
//   kernel_bench [repeats [KiB per array ...]]     (defaults: 11; 65536 1024 128 16)
//
// Prints the median of the repeats. Bandwidth counts the bytes the operation must move:
// reduce reads two arrays and writes one (3 x size), memcpy reads one and writes one
// (2 x size). 64 MiB per array is far past the caches; 1 MiB per array (3 MiB in all) is
// in the last-level cache; 128 KiB per array is in L2 and 16 KiB in L1, where the vector
// width shows. Each timed repeat runs the operation enough times to last about 0.1 s.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "kernels/reduce.h"

namespace {

using Clock = std::chrono::steady_clock;

// Not inlined, so the compiler cannot fold repeated calls together; no __restrict, as a user
// would write it.
__attribute__((noinline)) void plainSum(float* c, const float* a, const float* b, size_t n) {
  for (size_t i = 0; i < n; ++i) c[i] = a[i] + b[i];
}

// Median seconds per call over `repeats` timed batches, after one warm-up batch.
double medianSeconds(const std::function<void()>& op, int repeats) {
  op();
  const auto start = Clock::now();
  int calls = 0;
  while (Clock::now() - start < std::chrono::milliseconds(50)) {
    op();
    ++calls;
  }
  const int perBatch = std::max(1, calls * 2);  // ~0.1 s per batch
  std::vector<double> times;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = Clock::now();
    for (int i = 0; i < perBatch; ++i) op();
    times.push_back(std::chrono::duration<double>(Clock::now() - t0).count() / perBatch);
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

struct Row {
  std::string name;
  double gbps;
};

void benchSize(size_t bytes, int repeats) {
  const size_t n = bytes / sizeof(float);
  std::vector<float> a(n), b(n), c(n);
  for (size_t i = 0; i < n; ++i) {
    a[i] = static_cast<float>(i % 1000) * 0.5f;
    b[i] = static_cast<float>(i % 777) * 0.25f;
  }
  const double reduceBytes = 3.0 * bytes, copyBytes = 2.0 * bytes;
  auto gbps = [&](double moved, const std::function<void()>& op) {
    return moved / medianSeconds(op, repeats) / 1e9;
  };
  std::vector<Row> rows;
  rows.push_back({"memcpy", gbps(copyBytes, [&] { std::memcpy(c.data(), a.data(), bytes); })});
  rows.push_back(
      {"plain loop", gbps(reduceBytes, [&] { plainSum(c.data(), a.data(), b.data(), n); })});
  for (loom::kernels::Isa isa : loom::kernels::availableIsas()) {
    loom::kernels::forceIsaForTesting(isa);
    rows.push_back({std::string("reduce ") + loom::kernels::isaName(isa), gbps(reduceBytes, [&] {
                      loom::kernels::reduce(c.data(), a.data(), b.data(), n, loomFloat32, loomSum);
                    })});
  }
  loom::kernels::forceIsaForTesting(loom::kernels::availableIsas().back());

  const double memcpyGbps = rows[0].gbps, plainGbps = rows[1].gbps;
  std::printf("\n%zu KiB per array\n", bytes / 1024);
  std::printf("  %-16s %8s %14s %10s\n", "", "GB/s", "x plain loop", "x memcpy");
  for (const Row& row : rows) {
    std::printf("  %-16s %8.2f %14.2f %10.2f\n", row.name.c_str(), row.gbps, row.gbps / plainGbps,
                row.gbps / memcpyGbps);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int repeats = argc > 1 ? std::max(1, std::atoi(argv[1])) : 11;
  std::printf("float32 sum, median of %d; default path: %s; plain loop built with%s%s\n", repeats,
              loom::kernels::isaName(),
#if defined(__OPTIMIZE__)
              " optimisation",
#else
              "out optimisation",
#endif
#if defined(__AVX2__)
              ", AVX2");
#else
              " the baseline ISA");
#endif
  std::vector<size_t> kib = {64 * 1024, 1024, 128, 16};
  if (argc > 2) kib.clear();
  for (int i = 2; i < argc; ++i) kib.push_back(std::strtoul(argv[i], nullptr, 10));
  for (size_t k : kib) benchSize(k * 1024, repeats);
  return 0;
}
