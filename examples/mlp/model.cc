#include "model.h"

#include <algorithm>
#include <cmath>

#include "dataset.h"

namespace mlp {

Model::Model(const std::vector<int>& widths, uint64_t seed, size_t gradientGap) : widths_(widths) {
  size_t offset = 0, gradOffset = 0;
  for (size_t l = 1; l < widths.size(); ++l) {
    const size_t in = widths[l - 1], out = widths[l];
    for (int part = 0; part < 2; ++part) {
      Tensor t;
      t.name = "layer" + std::to_string(l) + (part == 0 ? ".weight" : ".bias");
      t.offset = offset;
      t.count = part == 0 ? in * out : out;
      tensors_.push_back(t);
      gradOffsets_.push_back(gradOffset);
      offset += t.count;
      gradOffset += t.count + gradientGap;
    }
  }
  params_.assign(offset, 0.0f);
  grads_.assign(gradOffset, 0.0f);
  Random random(seed);
  for (size_t l = 1; l < widths.size(); ++l) {
    const Tensor& weight = tensors_[2 * (l - 1)];
    const float scale = std::sqrt(2.0f / static_cast<float>(widths[l - 1]));
    for (size_t k = 0; k < weight.count; ++k) params_[weight.offset + k] = scale * random.normal();
  }
  acts_.resize(widths.size());
}

void Model::zeroGradients() { std::fill(grads_.begin(), grads_.end(), 0.0f); }

// Weights are stored input-major (in x out), so every inner loop runs over contiguous outputs.
void Model::forward(const float* x, int batch) {
  acts_[0].assign(x, x + static_cast<size_t>(batch) * widths_[0]);
  const size_t layers = widths_.size() - 1;
  for (size_t l = 1; l <= layers; ++l) {
    const size_t in = widths_[l - 1], out = widths_[l];
    const float* w = param(2 * (l - 1));
    const float* bias = param(2 * (l - 1) + 1);
    std::vector<float>& z = acts_[l];
    z.resize(static_cast<size_t>(batch) * out);
    for (int b = 0; b < batch; ++b) {
      float* zb = z.data() + b * out;
      std::copy(bias, bias + out, zb);
      const float* ab = acts_[l - 1].data() + b * in;
      for (size_t i = 0; i < in; ++i) {
        const float a = ab[i];
        const float* wi = w + i * out;
        for (size_t o = 0; o < out; ++o) zb[o] += a * wi[o];
      }
      if (l < layers) {
        for (size_t o = 0; o < out; ++o) zb[o] = std::max(zb[o], 0.0f);
      }
    }
  }
}

float Model::forwardBackward(const float* x, const int* labels, int batch, float lossScale,
                             const std::function<void(int tensor)>& onReady) {
  forward(x, batch);
  const size_t layers = widths_.size() - 1;
  const size_t classes = widths_.back();

  // Softmax cross-entropy: delta = (softmax - onehot) * lossScale / batch.
  double loss = 0.0;
  delta_.resize(static_cast<size_t>(batch) * classes);
  for (int b = 0; b < batch; ++b) {
    const float* z = acts_[layers].data() + b * classes;
    const float top = *std::max_element(z, z + classes);
    double sum = 0.0;
    for (size_t c = 0; c < classes; ++c) sum += std::exp(static_cast<double>(z[c] - top));
    for (size_t c = 0; c < classes; ++c) {
      const double p = std::exp(static_cast<double>(z[c] - top)) / sum;
      delta_[b * classes + c] =
          static_cast<float>((p - (static_cast<int>(c) == labels[b] ? 1.0 : 0.0)) * lossScale / batch);
    }
    loss -= static_cast<double>(z[labels[b]] - top) - std::log(sum);
  }

  for (size_t l = layers; l >= 1; --l) {
    const size_t in = widths_[l - 1], out = widths_[l];
    const int weight = static_cast<int>(2 * (l - 1)), bias = weight + 1;
    float* gw = grad(weight);
    float* gb = grad(bias);
    const std::vector<float>& a = acts_[l - 1];
    for (int b = 0; b < batch; ++b) {
      const float* db = delta_.data() + b * out;
      for (size_t o = 0; o < out; ++o) gb[o] += db[o];
    }
    onReady(bias);
    for (int b = 0; b < batch; ++b) {
      const float* db = delta_.data() + b * out;
      const float* ab = a.data() + b * in;
      for (size_t i = 0; i < in; ++i) {
        const float ai = ab[i];
        if (ai == 0.0f) continue;  // ReLU zeros contribute nothing
        float* gwi = gw + i * out;
        for (size_t o = 0; o < out; ++o) gwi[o] += ai * db[o];
      }
    }
    onReady(weight);
    if (l == 1) break;
    // delta of the layer below, through this layer's weights and the ReLU.
    const float* w = param(weight);
    deltaPrev_.assign(static_cast<size_t>(batch) * in, 0.0f);
    for (int b = 0; b < batch; ++b) {
      const float* db = delta_.data() + b * out;
      const float* ab = a.data() + b * in;
      float* dp = deltaPrev_.data() + b * in;
      for (size_t i = 0; i < in; ++i) {
        if (ab[i] <= 0.0f) continue;
        const float* wi = w + i * out;
        float sum = 0.0f;
        for (size_t o = 0; o < out; ++o) sum += db[o] * wi[o];
        dp[i] = sum;
      }
    }
    delta_.swap(deltaPrev_);
  }
  return static_cast<float>(loss / batch);
}

int Model::correct(const float* x, const int* labels, int batch) {
  forward(x, batch);
  const size_t classes = widths_.back();
  int right = 0;
  for (int b = 0; b < batch; ++b) {
    const float* z = acts_.back().data() + b * classes;
    right += static_cast<int>(std::max_element(z, z + classes) - z) == labels[b];
  }
  return right;
}

Optimizer::Optimizer(Kind kind, float learningRate, size_t parameters)
    : kind_(kind), lr_(learningRate), m_(parameters, 0.0f), v_(kind == Kind::kAdam ? parameters : 0, 0.0f) {}

void Optimizer::step(Model& model) {
  ++steps_;
  const float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;
  const float correction1 = 1.0f - std::pow(beta1, static_cast<float>(steps_));
  const float correction2 = 1.0f - std::pow(beta2, static_cast<float>(steps_));
  for (size_t t = 0; t < model.tensors().size(); ++t) {
    const Tensor& tensor = model.tensors()[t];
    float* p = model.param(t);
    const float* g = model.grad(t);
    float* m = m_.data() + tensor.offset;
    if (kind_ == Kind::kSgd) {
      for (size_t k = 0; k < tensor.count; ++k) {
        m[k] = 0.9f * m[k] + g[k];
        p[k] -= lr_ * m[k];
      }
    } else {
      float* v = v_.data() + tensor.offset;
      for (size_t k = 0; k < tensor.count; ++k) {
        m[k] = beta1 * m[k] + (1.0f - beta1) * g[k];
        v[k] = beta2 * v[k] + (1.0f - beta2) * g[k] * g[k];
        p[k] -= lr_ * (m[k] / correction1) / (std::sqrt(v[k] / correction2) + eps);
      }
    }
  }
}

}  // namespace mlp
