// A generated classification set: `classes` Gaussian clusters in `dim` dimensions, the same
// bits on every machine for the same seed (own generator, no std:: distributions).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace mlp {

struct Dataset {
  int dim = 0;
  int classes = 0;
  std::vector<float> x;  // size() rows of dim floats
  std::vector<int> y;
  int size() const { return static_cast<int>(y.size()); }
  const float* row(int i) const { return x.data() + static_cast<size_t>(i) * dim; }
};

// Cluster centres come from centresSeed (so a training and a test set can share them), the
// samples from samplesSeed.
Dataset makeClusters(int samples, int dim, int classes, float spread, uint64_t centresSeed,
                     uint64_t samplesSeed);

// A small deterministic generator (xorshift64*), shared with the model's initialisation.
class Random {
 public:
  explicit Random(uint64_t seed) : state_(seed * 0x9E3779B97F4A7C15ull + 1) {}
  uint64_t next();
  float uniform();  // [0, 1)
  float normal();   // Box-Muller
 private:
  uint64_t state_;
};

}  // namespace mlp
