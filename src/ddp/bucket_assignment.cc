// Gradients into buckets by size, as torch assigns them (bucket_assignment.h).
#include "ddp/bucket_assignment.h"

#include <algorithm>
#include <map>

#include "algorithms/plan.h"

namespace loom::ddp {

std::vector<std::vector<int>> assignBuckets(const std::vector<TensorShape>& shapes,
                                            const std::vector<int>& order, const BucketCaps& caps) {
  struct OpenBucket {
    std::vector<int> members;
    size_t bytes = 0;
    bool closedOne = false;  // a bucket of this type has closed: later ones get caps.bytes
  };
  std::map<loomDataType_t, OpenBucket> open;
  std::vector<std::vector<int>> buckets;
  for (int index : order) {
    const TensorShape& shape = shapes[index];
    OpenBucket& bucket = open[shape.type];
    bucket.members.push_back(index);
    bucket.bytes += shape.count * typeSize(shape.type);
    if (bucket.bytes >= (bucket.closedOne ? caps.bytes : caps.firstBytes)) {
      buckets.push_back(std::move(bucket.members));
      bucket.members.clear();
      bucket.bytes = 0;
      bucket.closedOne = true;
    }
  }
  for (auto& [type, bucket] : open) {
    if (!bucket.members.empty()) buckets.push_back(std::move(bucket.members));
  }

  std::vector<size_t> position(shapes.size());
  for (size_t i = 0; i < order.size(); ++i) position[order[i]] = i;
  std::stable_sort(buckets.begin(), buckets.end(),
                   [&](const std::vector<int>& a, const std::vector<int>& b) {
                     return position[a.front()] < position[b.front()];
                   });
  return buckets;
}

std::vector<int> reverseOrder(int n) {
  std::vector<int> order(n);
  for (int i = 0; i < n; ++i) order[i] = n - 1 - i;
  return order;
}

}  // namespace loom::ddp
