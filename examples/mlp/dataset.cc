#include "dataset.h"

#include <cmath>

namespace mlp {

uint64_t Random::next() {
  state_ ^= state_ >> 12;
  state_ ^= state_ << 25;
  state_ ^= state_ >> 27;
  return state_ * 0x2545F4914F6CDD1Dull;
}

float Random::uniform() { return static_cast<float>(next() >> 40) * 0x1p-24f; }

float Random::normal() {
  const float u1 = uniform() + 0x1p-25f;  // never log(0)
  const float u2 = uniform();
  return std::sqrt(-2.0f * std::log(u1)) * std::cos(6.2831853f * u2);
}

Dataset makeClusters(int samples, int dim, int classes, float spread, uint64_t centresSeed,
                     uint64_t samplesSeed) {
  Random centreRandom(centresSeed);
  std::vector<float> centers(static_cast<size_t>(classes) * dim);
  for (float& c : centers) c = centreRandom.normal();
  Random random(samplesSeed);
  Dataset data;
  data.dim = dim;
  data.classes = classes;
  data.x.resize(static_cast<size_t>(samples) * dim);
  data.y.resize(samples);
  for (int i = 0; i < samples; ++i) {
    const int label = static_cast<int>(random.next() % classes);
    data.y[i] = label;
    for (int d = 0; d < dim; ++d) {
      data.x[static_cast<size_t>(i) * dim + d] = centers[static_cast<size_t>(label) * dim + d] + spread * random.normal();
    }
  }
  return data;
}

}  // namespace mlp
