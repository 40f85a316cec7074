// loom-ddp-bench: what overlapping gradient reduction with backward buys. For each bucket
// cap it times a training step (forward, backward, reduction; no optimizer) three ways:
//
//   compute   backward only, no reduction: the floor
//   after     backward, then every gradient marked ready: reduction after backward
//   overlap   gradients marked ready as backward produces them (what DDP does)
//
// --sleep-backward-ms N replaces the MLP's arithmetic by sleeping N ms per backward, shared
// among the tensors by size: a model of backward running on an accelerator, which leaves
// the CPU free for the reduction (the real arithmetic competes with it for the cores).
//
// Each step's time is the slowest rank's; the table shows the median over the timed steps.
// Run under loomrun:  loomrun -n 2 build/perf/ddp_bench/loom-ddp-bench
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "loom/ddp.hpp"
#include "loom/loom.hpp"
#include "mlp/dataset.h"
#include "mlp/model.h"

namespace {

struct Options {
  int dim = 256, hidden = 1024, layers = 4, classes = 10;
  int batch = 32;  // per rank
  int warmup = 3, steps = 20;
  std::vector<int> capsMiB{1, 5, 25, 100};
  bool csv = false;
  int sleepBackwardMs = 0;  // 0: the MLP's real forward and backward
};

[[noreturn]] void usage(const std::string& message) {
  std::fprintf(stderr,
               "loom-ddp-bench: %s\n"
               "usage: loom-ddp-bench [--dim N] [--hidden N] [--layers N] [--classes N] [--batch N]\n"
               "                      [--warmup N] [--steps N] [--bucket-caps-mb A,B,...] [--csv]\n"
               "                      [--sleep-backward-ms N]\n",
               message.c_str());
  std::exit(2);
}

int positive(const std::string& flag, const char* text) {
  char* end = nullptr;
  const long v = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || v < 1 || v > 1000000) usage(flag + " takes a positive integer, not '" + text + "'");
  return static_cast<int>(v);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--csv") {
      o.csv = true;
      continue;
    }
    if (i + 1 >= argc) usage("missing value after " + flag);
    const char* value = argv[++i];
    if (flag == "--dim") o.dim = positive(flag, value);
    else if (flag == "--hidden") o.hidden = positive(flag, value);
    else if (flag == "--layers") o.layers = positive(flag, value);
    else if (flag == "--classes") o.classes = std::max(2, positive(flag, value));
    else if (flag == "--batch") o.batch = positive(flag, value);
    else if (flag == "--warmup") o.warmup = positive(flag, value);
    else if (flag == "--steps") o.steps = positive(flag, value);
    else if (flag == "--sleep-backward-ms") o.sleepBackwardMs = positive(flag, value);
    else if (flag == "--bucket-caps-mb") {
      o.capsMiB.clear();
      std::string list = value;
      for (size_t start = 0; start <= list.size();) {
        const size_t comma = std::min(list.find(',', start), list.size());
        o.capsMiB.push_back(positive(flag, list.substr(start, comma - start).c_str()));
        start = comma + 1;
      }
    } else {
      usage("unknown flag " + flag);
    }
  }
  return o;
}

enum class Mode { kCompute, kAfter, kOverlap };

// The median over steps of the slowest rank's time for one step, in milliseconds.
double medianStepMs(loom::cxx::Comm& comm, const Options& o, const std::function<void()>& step) {
  std::vector<double> times;
  for (int s = 0; s < o.warmup + o.steps; ++s) {
    loom::cxx::check(loomBarrier(comm.get(), nullptr), comm.get());
    const auto start = std::chrono::steady_clock::now();
    step();
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    loom::cxx::check(loomAllReduce(&ms, &ms, 1, loomFloat64, loomMax, comm.get(), nullptr), comm.get());
    if (s >= o.warmup) times.push_back(ms);
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  try {
    loom::cxx::Comm comm = loom::cxx::Comm::fromEnv();
    const int rank = comm.rank();
    std::vector<int> widths{o.dim};
    for (int l = 0; l < o.layers; ++l) widths.push_back(o.hidden);
    widths.push_back(o.classes);
    mlp::Model model(widths, 7);
    const mlp::Dataset data = mlp::makeClusters(o.batch, o.dim, o.classes, 2.5f, 1, 10 + rank);

    std::vector<loomDdpTensor_t> gradients;
    for (size_t t = 0; t < model.tensors().size(); ++t) {
      gradients.push_back({model.grad(t), model.tensors()[t].count, loomFloat32, model.tensors()[t].name.c_str()});
    }
    const double gradientMiB = static_cast<double>(model.parameterCount()) * 4 / (1 << 20);
    if (rank == 0) {
      std::printf("# loom-ddp-bench: %d ranks, MLP %d", comm.size(), o.dim);
      for (size_t l = 1; l < widths.size(); ++l) std::printf("-%d", widths[l]);
      std::printf(", %zu parameters (%.1f MiB of float32 gradients), batch %d per rank, median of %d steps\n",
                  model.parameterCount(), gradientMiB, o.batch, o.steps);
      if (o.sleepBackwardMs > 0) {
        std::printf("# backward simulated: %d ms of sleep per step, shared among the tensors by size\n",
                    o.sleepBackwardMs);
      }
      std::printf(o.csv ? "cap_mib,buckets,compute_ms,after_ms,overlap_ms,after_over_overlap,hidden_share\n"
                        : "%10s %8s %11s %9s %11s %14s %13s\n",
                  "cap MiB", "buckets", "compute ms", "after ms", "overlap ms", "after/overlap", "comm hidden");
    }

    for (int capMiB : o.capsMiB) {
      loomDdpOptions_t options = LOOM_DDP_OPTIONS_INITIALIZER;
      options.bucketCapBytes = static_cast<size_t>(capMiB) << 20;
      options.firstBucketCapBytes = std::min(options.firstBucketCapBytes, options.bucketCapBytes);
      loom::cxx::Reducer reducer(comm.get(), gradients, options);
      const int ntensors = static_cast<int>(gradients.size());
      auto stepIn = [&](Mode mode) {
        return [&, mode] {
          model.zeroGradients();
          auto produced = [&](int t) {
            if (mode == Mode::kOverlap) reducer.markReady(t);
          };
          if (o.sleepBackwardMs == 0) {
            model.forwardBackward(data.x.data(), data.y.data(), o.batch, 1.0f, produced);
          } else {
            for (int t = ntensors - 1; t >= 0; --t) {
              const double share = static_cast<double>(model.tensors()[t].count) / model.parameterCount();
              std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(o.sleepBackwardMs * share));
              produced(t);
            }
          }
          if (mode == Mode::kAfter) {
            for (int t = ntensors - 1; t >= 0; --t) reducer.markReady(t);
          }
          if (mode != Mode::kCompute) reducer.finish();
        };
      };
      // One synchronised iteration first, so every mode times the rebuilt buckets.
      stepIn(Mode::kOverlap)();
      const double compute = medianStepMs(comm, o, stepIn(Mode::kCompute));
      const double after = medianStepMs(comm, o, stepIn(Mode::kAfter));
      const double overlap = medianStepMs(comm, o, stepIn(Mode::kOverlap));
      int nbuckets = 0;
      loom::cxx::checkDdp(loomDdpGetBuckets(reducer.get(), nullptr, &nbuckets, nullptr), reducer.get());
      // The share of the reduction time (after - compute) that overlapping hid.
      const double hidden = after > compute ? (after - overlap) / (after - compute) : 0.0;
      if (rank == 0) {
        std::printf(o.csv ? "%d,%d,%.3f,%.3f,%.3f,%.3f,%.3f\n" : "%10d %8d %11.2f %9.2f %11.2f %14.2f %12.0f%%\n",
                    capMiB, nbuckets, compute, after, overlap, after / overlap, o.csv ? hidden : 100 * hidden);
        std::fflush(stdout);
      }
    }
  } catch (const loom::cxx::Error& e) {
    std::fprintf(stderr, "loom-ddp-bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
