// Which gradients share a bucket: torch's compute_bucket_assignment_by_size, as a pure
// function of shapes, an expected ready order and the size caps.
#pragma once

#include <cstddef>
#include <vector>

#include "loom/loom.h"

namespace loom::ddp {

struct TensorShape {
  size_t count = 0;
  loomDataType_t type = loomFloat32;
};

struct BucketCaps {
  size_t firstBytes = 1 << 20;  // the first bucket of each type closes at this size
  size_t bytes = 25 << 20;      // every later one at this size
};

// Buckets of gradient indices. `order` lists every gradient once, first-ready first. Walking
// it, each gradient joins the open bucket of its type, and a bucket closes once it holds at
// least its cap (so one gradient larger than the cap gets a bucket of its own). Buckets come
// back in the order their first gradient appears in `order`, gradients in `order` within one.
std::vector<std::vector<int>> assignBuckets(const std::vector<TensorShape>& shapes,
                                            const std::vector<int>& order, const BucketCaps& caps);

// n-1, n-2, ..., 0: backward produces the last layer's gradients first.
std::vector<int> reverseOrder(int n);

}  // namespace loom::ddp
