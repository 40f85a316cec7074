// Data-parallel training without LibTorch: an MLP on a generated classification set, its
// gradients averaged by Loom's DDP reducer while backward runs. Launch with loomrun:
//
//   loomrun -n 4 build/examples/ddp_train --epochs 5
//
// Every rank builds the same data set and model; rank 0's parameters are broadcast anyway
// (as a real job loading a checkpoint on one rank would need). Each global batch is split
// across the ranks; each rank's mean loss gradient, averaged over ranks, is the full batch's.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "loom/ddp.hpp"
#include "loom/loom.hpp"
#include "mlp/dataset.h"
#include "mlp/model.h"

namespace {

// Cluster spread against unit-normal centres: classes overlap enough that accuracy climbs
// over several epochs instead of jumping to 100%.
constexpr float kSpread = 2.5f;

struct Options {
  int epochs = 5;
  int batch = 256;  // global: split across ranks
  int samples = 16384;
  int dim = 32;
  int classes = 10;
  int hidden = 256;
  int layers = 3;  // hidden layers
  float lr = 0.01f;
  bool adam = false;
  size_t bucketCapBytes = 25u << 20;
  loomDdpCompression_t compression = loomDdpAllReduce;
};

[[noreturn]] void usage(const char* message) {
  std::fprintf(stderr,
               "ddp_train: %s\n"
               "usage: ddp_train [--epochs N] [--batch N] [--samples N] [--dim N] [--classes N]\n"
               "                 [--hidden N] [--layers N] [--lr X] [--optimizer sgd|adam]\n"
               "                 [--bucket-cap-mb N] [--compression none|fp16|bf16]\n",
               message);
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) usage(("missing value after " + flag).c_str());
    const char* value = argv[++i];
    auto number = [&](long low) {
      char* end = nullptr;
      const long v = std::strtol(value, &end, 10);
      if (*end != '\0' || v < low) usage((flag + " takes an integer >= " + std::to_string(low)).c_str());
      return v;
    };
    if (flag == "--epochs") o.epochs = static_cast<int>(number(1));
    else if (flag == "--batch") o.batch = static_cast<int>(number(1));
    else if (flag == "--samples") o.samples = static_cast<int>(number(1));
    else if (flag == "--dim") o.dim = static_cast<int>(number(1));
    else if (flag == "--classes") o.classes = static_cast<int>(number(2));
    else if (flag == "--hidden") o.hidden = static_cast<int>(number(1));
    else if (flag == "--layers") o.layers = static_cast<int>(number(0));
    else if (flag == "--lr") o.lr = std::strtof(value, nullptr);
    else if (flag == "--bucket-cap-mb") o.bucketCapBytes = static_cast<size_t>(number(1)) << 20;
    else if (flag == "--optimizer") {
      if (std::strcmp(value, "sgd") != 0 && std::strcmp(value, "adam") != 0) usage("--optimizer is sgd or adam");
      o.adam = std::strcmp(value, "adam") == 0;
    } else if (flag == "--compression") {
      if (std::strcmp(value, "none") == 0) o.compression = loomDdpAllReduce;
      else if (std::strcmp(value, "fp16") == 0) o.compression = loomDdpFp16Compress;
      else if (std::strcmp(value, "bf16") == 0) o.compression = loomDdpBf16Compress;
      else usage("--compression is none, fp16 or bf16");
    } else {
      usage(("unknown flag " + flag).c_str());
    }
  }
  return o;
}

std::vector<loomDdpTensor_t> describe(mlp::Model& model, bool gradients) {
  std::vector<loomDdpTensor_t> list;
  for (size_t t = 0; t < model.tensors().size(); ++t) {
    float* data = gradients ? model.grad(t) : model.param(t);
    list.push_back({data, model.tensors()[t].count, loomFloat32, model.tensors()[t].name.c_str()});
  }
  return list;
}

// The mean over ranks of one number (for the printed loss).
double meanOverRanks(loom::cxx::Comm& comm, double value) {
  loom::cxx::check(loomAllReduce(&value, &value, 1, loomFloat64, loomAvg, comm.get(), nullptr), comm.get());
  return value;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  try {
    loom::cxx::Comm comm = loom::cxx::Comm::fromEnv();
    const int rank = comm.rank(), nranks = comm.size();
    if (o.batch % nranks != 0) usage("--batch must be a multiple of the number of ranks");
    const int local = o.batch / nranks;

    const mlp::Dataset train = mlp::makeClusters(o.samples, o.dim, o.classes, kSpread, 1, 2);
    const mlp::Dataset test = mlp::makeClusters(o.samples / 4, o.dim, o.classes, kSpread, 1, 3);
    std::vector<int> widths{o.dim};
    for (int l = 0; l < o.layers; ++l) widths.push_back(o.hidden);
    widths.push_back(o.classes);
    mlp::Model model(widths, 7);
    loom::cxx::broadcastTensors(comm.get(), describe(model, false));

    loomDdpOptions_t options = LOOM_DDP_OPTIONS_INITIALIZER;
    options.bucketCapBytes = o.bucketCapBytes;
    options.compression = o.compression;
    loom::cxx::Reducer reducer(comm.get(), describe(model, true), options);
    mlp::Optimizer optimizer(o.adam ? mlp::Optimizer::Kind::kAdam : mlp::Optimizer::Kind::kSgd, o.lr,
                             model.parameterCount());
    if (rank == 0) {
      std::printf("ddp_train: %d ranks, %zu parameters, global batch %d (%d per rank), %s\n", nranks,
                  model.parameterCount(), o.batch, local, o.adam ? "adam" : "sgd");
    }

    std::vector<int> order(train.size());
    std::vector<float> x(static_cast<size_t>(local) * o.dim);
    std::vector<int> y(local);
    for (int epoch = 1; epoch <= o.epochs; ++epoch) {
      // The same shuffle on every rank; rank r takes its slice of each global batch.
      mlp::Random shuffle(100 + epoch);
      std::iota(order.begin(), order.end(), 0);
      for (int i = train.size() - 1; i > 0; --i) std::swap(order[i], order[shuffle.next() % (i + 1)]);
      double lossSum = 0.0;
      int steps = 0;
      for (int start = 0; start + o.batch <= train.size(); start += o.batch, ++steps) {
        for (int k = 0; k < local; ++k) {
          const int row = order[start + rank * local + k];
          std::copy(train.row(row), train.row(row) + o.dim, x.data() + static_cast<size_t>(k) * o.dim);
          y[k] = train.y[row];
        }
        model.zeroGradients();
        lossSum += model.forwardBackward(x.data(), y.data(), local, 1.0f,
                                         [&](int tensor) { reducer.markReady(tensor); });
        reducer.finish();
        optimizer.step(model);
      }
      const double loss = meanOverRanks(comm, lossSum / steps);
      const int right = model.correct(test.x.data(), test.y.data(), test.size());
      if (rank == 0) {
        std::printf("epoch %d  loss %.4f  test accuracy %.2f%%\n", epoch, loss, 100.0 * right / test.size());
        std::fflush(stdout);
      }
    }
  } catch (const loom::cxx::Error& e) {
    std::fprintf(stderr, "ddp_train: %s\n", e.what());
    return 1;
  }
  return 0;
}
