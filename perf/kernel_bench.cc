// Sum bandwidth of loom::kernels::reduce on each instruction-set path, beside memcpy and a
// plain float32 c[i] = a[i] + b[i] loop compiled into this binary with the build's own flags.
//
//   kernel_bench [-d TYPE[,TYPE...]] [repeats [KiB per array ...]]
//       defaults: float; 11; 65536 1024 128 16. TYPE: loom-perf's names (float, half,
//       bfloat16, f8e4m3, ...), to time the narrow floats' conversions beside float32.
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
#include "loom_perf/datatypes.h"

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

// Two inputs and an output of `bytes` each, of `type`; input i holds (i % 1000) / 2 and
// (i % 777) / 4 as `type` rounds them.
struct Arrays {
  size_t count;
  std::vector<unsigned char> a, b, c;
  Arrays(loomDataType_t type, size_t bytes) : count(bytes / loomperf::typeSize(type)), a(bytes), b(bytes), c(bytes) {
    std::vector<float> fa(count), fb(count);
    for (size_t i = 0; i < count; ++i) {
      fa[i] = static_cast<float>(i % 1000) * 0.5f;
      fb[i] = static_cast<float>(i % 777) * 0.25f;
    }
    if (!loom::kernels::convert(a.data(), type, fa.data(), loomFloat32, count) ||
        !loom::kernels::convert(b.data(), type, fb.data(), loomFloat32, count)) {
      std::fprintf(stderr, "kernel_bench: %s is not converted from float32 here\n", loomperf::typeName(type));
      std::exit(2);
    }
  }
};

void benchSize(size_t bytes, int repeats, const std::vector<loomDataType_t>& types) {
  Arrays floats(loomFloat32, bytes);
  auto* a = reinterpret_cast<const float*>(floats.a.data());
  auto* b = reinterpret_cast<const float*>(floats.b.data());
  auto* c = reinterpret_cast<float*>(floats.c.data());
  const double reduceBytes = 3.0 * bytes, copyBytes = 2.0 * bytes;
  auto gbps = [&](double moved, const std::function<void()>& op) {
    return moved / medianSeconds(op, repeats) / 1e9;
  };
  std::vector<Row> rows;
  rows.push_back({"memcpy", gbps(copyBytes, [&] { std::memcpy(c, a, bytes); })});
  rows.push_back({"plain loop", gbps(reduceBytes, [&] { plainSum(c, a, b, floats.count); })});
  for (loomDataType_t type : types) {
    Arrays arrays(type, bytes);
    for (loom::kernels::Isa isa : loom::kernels::availableIsas()) {
      loom::kernels::forceIsaForTesting(isa);
      rows.push_back({std::string(loomperf::typeName(type)) + " " + loom::kernels::isaName(isa), gbps(reduceBytes, [&] {
                        loom::kernels::reduce(arrays.c.data(), arrays.a.data(), arrays.b.data(), arrays.count, type,
                                              loomSum);
                      })});
    }
  }
  loom::kernels::forceIsaForTesting(loom::kernels::availableIsas().back());

  const double memcpyGbps = rows[0].gbps, plainGbps = rows[1].gbps;
  std::printf("\n%zu KiB per array\n", bytes / 1024);
  std::printf("  %-20s %8s %14s %10s\n", "", "GB/s", "x plain loop", "x memcpy");
  for (const Row& row : rows) {
    std::printf("  %-20s %8.2f %14.2f %10.2f\n", row.name.c_str(), row.gbps, row.gbps / plainGbps,
                row.gbps / memcpyGbps);
  }
}

// "-d a,b,c" -> the types named; exits on an unknown name.
std::vector<loomDataType_t> parseTypes(const std::string& list) {
  std::vector<loomDataType_t> types;
  for (size_t start = 0; start <= list.size();) {
    const size_t end = std::min(list.find(',', start), list.size());
    loomDataType_t type;
    if (!loomperf::parseType(list.substr(start, end - start).c_str(), &type)) {
      std::fprintf(stderr, "kernel_bench: unknown type '%s'\n", list.substr(start, end - start).c_str());
      std::exit(2);
    }
    types.push_back(type);
    start = end + 1;
  }
  return types;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<loomDataType_t> types = {loomFloat32};
  if (argc > 2 && std::strcmp(argv[1], "-d") == 0) {
    types = parseTypes(argv[2]);
    argc -= 2;
    argv += 2;
  }
  const int repeats = argc > 1 ? std::max(1, std::atoi(argv[1])) : 11;
  std::printf("sum, median of %d; default path: %s; plain loop (float32) built with%s%s\n", repeats,
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
  for (size_t k : kib) benchSize(k * 1024, repeats, types);
  return 0;
}
