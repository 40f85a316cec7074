// assignBuckets against assignments worked out by hand.
#include "ddp/bucket_assignment.h"

#include <gtest/gtest.h>

namespace loom::ddp {
namespace {

using Buckets = std::vector<std::vector<int>>;

TEST(AssignBuckets, FirstBucketSmallLaterOnesAtTheCapLargeGradientsAlone) {
  // Bytes: 400, 400, 4000, 100, 100 (float32); caps 500 then 1000; reverse order.
  const std::vector<TensorShape> shapes{{100, loomFloat32}, {100, loomFloat32}, {1000, loomFloat32},
                                        {25, loomFloat32}, {25, loomFloat32}};
  EXPECT_EQ(assignBuckets(shapes, reverseOrder(5), {500, 1000}), (Buckets{{4, 3, 2}, {1, 0}}));
  EXPECT_EQ(assignBuckets(shapes, reverseOrder(5), {100, 1000}), (Buckets{{4}, {3, 2}, {1, 0}}));
  EXPECT_EQ(assignBuckets(shapes, {2, 0, 1, 3, 4}, {100, 300}), (Buckets{{2}, {0}, {1}, {3, 4}}));
}

TEST(AssignBuckets, TypesNeverShareABucketAndBucketsFollowTheirFirstGradient) {
  // float16 gradients 1 and 3 interleave with float32 ones; each type fills its own buckets.
  const std::vector<TensorShape> shapes{{10, loomFloat32}, {10, loomFloat16}, {10, loomFloat32},
                                        {10, loomFloat16}, {10, loomFloat32}};
  EXPECT_EQ(assignBuckets(shapes, reverseOrder(5), {1000, 1000}), (Buckets{{4, 2, 0}, {3, 1}}));
  EXPECT_EQ(assignBuckets(shapes, {1, 0, 2, 3, 4}, {20, 1000}), (Buckets{{1}, {0}, {2, 4}, {3}}));
}

TEST(AssignBuckets, EmptyAndZeroCountGradients) {
  EXPECT_TRUE(assignBuckets({}, {}, {}).empty());
  const std::vector<TensorShape> shapes{{0, loomFloat32}, {0, loomFloat32}};
  EXPECT_EQ(assignBuckets(shapes, reverseOrder(2), {1, 1}), (Buckets{{1, 0}}));
}

}  // namespace
}  // namespace loom::ddp
