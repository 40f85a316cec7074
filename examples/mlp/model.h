// A small multilayer perceptron with its forward and backward passes written out: ReLU
// hidden layers, a softmax cross-entropy output, float32 throughout. Parameters and
// gradients each live in one flat buffer, tensor after tensor (like torch's
// gradient_as_bucket_view), so a DDP reducer can reduce its buckets where they lie.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace mlp {

// One parameter tensor: a range of the flat buffers.
struct Tensor {
  std::string name;  // "layer1.weight", "layer1.bias", ...
  size_t offset = 0; // in floats
  size_t count = 0;
};

class Model {
 public:
  // widths: input size, hidden sizes..., number of classes. Weights are drawn from `seed`
  // (He initialisation), biases are zero. `gradientGap` floats of padding between gradient
  // tensors (0: back to back) exist only to exercise reducers that must copy.
  Model(const std::vector<int>& widths, uint64_t seed, size_t gradientGap = 0);

  const std::vector<Tensor>& tensors() const { return tensors_; }
  float* param(size_t t) { return params_.data() + tensors_[t].offset; }
  float* grad(size_t t) { return grads_.data() + gradOffsets_[t]; }
  std::vector<float>& params() { return params_; }
  size_t parameterCount() const { return params_.size(); }

  // Adds the gradient of lossScale * (mean cross-entropy over the batch) to the gradients,
  // calling onReady(t) as soon as tensor t's gradient is final (last layer first). Returns
  // the mean loss. x: batch rows of widths[0] floats; labels: batch class indices.
  float forwardBackward(const float* x, const int* labels, int batch, float lossScale,
                        const std::function<void(int tensor)>& onReady);

  // How many of the batch's rows the model classifies correctly.
  int correct(const float* x, const int* labels, int batch);

  void zeroGradients();

 private:
  void forward(const float* x, int batch);

  std::vector<int> widths_;
  std::vector<Tensor> tensors_;     // weight then bias of each layer
  std::vector<size_t> gradOffsets_; // of each tensor in grads_
  std::vector<float> params_;
  std::vector<float> grads_;
  // Activations of the last forward pass: acts_[0] is the input, acts_[l] layer l's output
  // (pre-activation for the last layer, whose softmax is taken in the loss).
  std::vector<std::vector<float>> acts_;
  std::vector<float> delta_, deltaPrev_;
};

// Plain SGD with momentum, or Adam, over a flat parameter buffer.
class Optimizer {
 public:
  enum class Kind { kSgd, kAdam };
  Optimizer(Kind kind, float learningRate, size_t parameters);
  void step(Model& model);

 private:
  Kind kind_;
  float lr_;
  int steps_ = 0;
  std::vector<float> m_, v_;
};

}  // namespace mlp
