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
// The three modes take turns step by step, so a drift in the machine's speed (another
// process, a noisy neighbour) lands on all three alike.
// Run under loomrun:  loomrun -n 2 build/perf/ddp_bench/loom-ddp-bench
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
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

const char kUsage[] =
    "usage: loom-ddp-bench [--dim N] [--hidden N] [--layers N] [--classes N] [--batch N]\n"
    "                      [--warmup N] [--steps N] [--bucket-caps-mb A,B,...] [--csv]\n"
    "                      [--sleep-backward-ms N]\n"
    "Run under loomrun, e.g. loomrun -n 2 loom-ddp-bench (docs/PERF.md).\n";

[[noreturn]] void usage(const std::string& message) {
  std::fprintf(stderr, "loom-ddp-bench: %s\n%s", message.c_str(), kUsage);
  std::exit(2);
}

// The bound keeps every size the flags make (a layer is hidden² floats) far from overflow.
int number(const std::string& flag, const std::string& text, int low) {
  char* end = nullptr;
  const long v = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || v < low || v > 1000000) {
    usage(flag + " takes an integer from " + std::to_string(low) + " to 1000000, not '" + text + "'");
  }
  return static_cast<int>(v);
}

std::vector<int> capList(const std::string& flag, const std::string& list) {
  std::vector<int> caps;
  for (size_t start = 0; start <= list.size();) {
    const size_t comma = std::min(list.find(',', start), list.size());
    caps.push_back(number(flag, list.substr(start, comma - start), 1));
    start = comma + 1;
  }
  return caps;
}

Options parse(int argc, char** argv) {
  Options o;
  struct IntFlag {
    const char* name;
    int* value;
    int low;
  };
  const IntFlag ints[] = {{"--dim", &o.dim, 1},        {"--hidden", &o.hidden, 1},
                          {"--layers", &o.layers, 1},  {"--classes", &o.classes, 2},
                          {"--batch", &o.batch, 1},    {"--warmup", &o.warmup, 0},
                          {"--steps", &o.steps, 1},    {"--sleep-backward-ms", &o.sleepBackwardMs, 1}};
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    }
    if (flag == "--csv") {
      o.csv = true;
      continue;
    }
    const IntFlag* match = nullptr;
    for (const IntFlag& f : ints) {
      if (flag == f.name) match = &f;
    }
    if (match == nullptr && flag != "--bucket-caps-mb") usage("unknown flag " + flag);
    if (i + 1 >= argc) usage("missing value after " + flag);
    const std::string value = argv[++i];
    if (match != nullptr) {
      *match->value = number(flag, value, match->low);
    } else {
      o.capsMiB = capList(flag, value);
    }
  }
  return o;
}

enum class Mode { kCompute, kAfter, kOverlap };

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Runs the steps in turn, o.warmup + o.steps rounds; returns each one's median over the
// timed rounds of the slowest rank's time, in milliseconds. A barrier starts every step so
// that no rank's time includes waiting for a late peer's previous step.
std::vector<double> medianStepMs(loom::cxx::Comm& comm, const Options& o,
                                 const std::vector<std::function<void()>>& steps) {
  std::vector<std::vector<double>> times(steps.size());
  for (int round = 0; round < o.warmup + o.steps; ++round) {
    for (size_t k = 0; k < steps.size(); ++k) {
      loom::cxx::check(loomBarrier(comm.get(), nullptr), comm.get());
      const auto start = std::chrono::steady_clock::now();
      steps[k]();
      double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
      loom::cxx::check(loomAllReduce(&ms, &ms, 1, loomFloat64, loomMax, comm.get(), nullptr), comm.get());
      if (round >= o.warmup) times[k].push_back(ms);
    }
  }
  std::vector<double> medians;
  for (const std::vector<double>& t : times) medians.push_back(median(t));
  return medians;
}

// One allreduce of as many floats as the gradients, back to back: what the reduction would
// cost as a single message with nothing else running, to read the table's after - compute by.
double referenceAllReduceMs(loom::cxx::Comm& comm, const Options& o, size_t count) {
  std::vector<float> flat(count, 1.0f);
  auto allReduce = [&] {
    loom::cxx::check(loomAllReduce(flat.data(), flat.data(), count, loomFloat32, loomSum, comm.get(), nullptr),
                     comm.get());
  };
  return medianStepMs(comm, o, {allReduce})[0];
}

// One step of `mode`: zero the gradients, run (or simulate) forward and backward, reduce.
void step(Mode mode, const Options& o, mlp::Model& model, const mlp::Dataset& data,
          loom::cxx::Reducer& reducer) {
  const int ntensors = static_cast<int>(model.tensors().size());
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
}

void printHeader(const Options& o, int nranks, const std::vector<int>& widths, size_t parameters,
                 double referenceMs) {
  const double gradientMiB = static_cast<double>(parameters) * 4 / (1 << 20);
  std::printf("# loom-ddp-bench: %d ranks, MLP %d", nranks, widths[0]);
  for (size_t l = 1; l < widths.size(); ++l) std::printf("-%d", widths[l]);
  std::printf(", %zu parameters (%.1f MiB of float32 gradients), batch %d per rank, median of %d steps\n",
              parameters, gradientMiB, o.batch, o.steps);
  if (o.sleepBackwardMs > 0) {
    std::printf("# backward simulated: %d ms of sleep per step, shared among the tensors by size\n",
                o.sleepBackwardMs);
  }
  std::printf("# reference: one allreduce of %.1f MiB, back to back, %.2f ms\n", gradientMiB, referenceMs);
  std::printf(o.csv ? "cap_mib,buckets,compute_ms,after_ms,overlap_ms,after_over_overlap,hidden_share\n"
                    : "%10s %8s %11s %9s %11s %14s %13s\n",
              "cap MiB", "buckets", "compute ms", "after ms", "overlap ms", "after/overlap", "comm hidden");
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
    const double referenceMs = referenceAllReduceMs(comm, o, model.parameterCount());
    if (rank == 0) printHeader(o, comm.size(), widths, model.parameterCount(), referenceMs);

    for (int capMiB : o.capsMiB) {
      loomDdpOptions_t options = LOOM_DDP_OPTIONS_INITIALIZER;
      options.bucketCapBytes = static_cast<size_t>(capMiB) << 20;
      options.firstBucketCapBytes = std::min(options.firstBucketCapBytes, options.bucketCapBytes);
      loom::cxx::Reducer reducer(comm.get(), gradients, options);
      auto in = [&](Mode mode) { return [&, mode] { step(mode, o, model, data, reducer); }; };
      // The reducer rebuilds its buckets after its first synchronised iteration: do that one
      // untimed, so that every mode times the rebuilt buckets.
      in(Mode::kOverlap)();
      const std::vector<double> ms = medianStepMs(comm, o, {in(Mode::kCompute), in(Mode::kAfter), in(Mode::kOverlap)});
      const double compute = ms[0], after = ms[1], overlap = ms[2];
      int nbuckets = 0;
      loom::cxx::checkDdp(loomDdpGetBuckets(reducer.get(), nullptr, &nbuckets, nullptr), reducer.get());
      // The share of the reduction's time (after - compute) that overlapping hid.
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
  } catch (const std::exception& e) {  // the model's allocation, for one
    std::fprintf(stderr, "loom-ddp-bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
