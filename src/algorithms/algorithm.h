// The algorithms a collective can run, and the arguments every plan builder takes. Each
// builder appends one call's steps to a plan (see plan.h); it reads only numbers and
// pointers, so it can be run and checked without a communicator.
#pragma once

#include <cstddef>
#include <vector>

#include "algorithms/plan.h"

namespace loom {

enum class Algorithm : uint8_t {
  kRing,
  kTree,               // double binary tree (allreduce), binary tree (broadcast, reduce)
  kRecursiveDoubling,  // latency-optimal small allreduce over links
  kOneShot,            // a small collective through one shared-memory board (one host)
  kPairwise,           // all-to-all: every pair exchanges directly
  kHierarchical,       // allreduce, broadcast, reduce across hosts: each rank of a host carries a shard between hosts
};
constexpr int kNumAlgorithms = 6;

// "ring", "tree", "rd", "oneshot", "pairwise", "hierarchical" (the LOOM_ALGO names).
const char* algorithmName(Algorithm algorithm);

// The ranks in the order they sit on rings and trees (docs/TOPOLOGY.md, "Rings"):
// position -> rank and back. Builders work in positions, so neighbours on the ring are
// neighbours in the machine; results do not depend on the order.
class RingOrder {
 public:
  // `ranks`: a permutation of 0..n-1, or distinct ranks of a bigger communicator (a ring
  // of some of its ranks: positionOf is -1 for the others). `hostStarts`: the first position of each host (hosts
  // are contiguous on the ring); empty or {0} for one host.
  explicit RingOrder(std::vector<int> ranks, std::vector<int> hostStarts = {});
  int rankAt(int position) const { return rankAt_[static_cast<size_t>(position)]; }
  int positionOf(int rank) const { return positionOf_[static_cast<size_t>(rank)]; }
  const std::vector<int>& ranks() const { return rankAt_; }
  const std::vector<int>& hostStarts() const { return hostStarts_; }
  // Rank order on one host: builders may take their plain paths.
  bool isIdentity() const;

 private:
  std::vector<int> rankAt_, positionOf_, hostStarts_;
};

struct CollectiveArgs {
  CallInfo info;
  const void* send = nullptr;
  void* recv = nullptr;
  int rank = 0;
  int nranks = 1;
  int channels = 1;           // independent rings / trees, each on its own link when it can
  size_t sliceBytes = 1 << 19;  // pipeline slice
  const RingOrder* order = nullptr;  // null: rank order
  // The ring allreduce takes each slice through all its steps before the next (ringPass):
  // host plans, whose executor forwards reduced bytes while they are in its cache.
  bool sliceBySlice = false;

  // This rank's position, and the rank at any position (taken modulo nranks).
  int position() const { return positionOf(rank); }
  int positionOf(int r) const { return order ? order->positionOf(r) : r; }
  int rankAt(int position) const {
    position = ((position % nranks) + nranks) % nranks;
    return order ? order->rankAt(position) : position;
  }

  size_t elemSize() const { return typeSize(info.type); }
  size_t sliceElems() const { return std::max<size_t>(1, sliceBytes / elemSize()); }
  const char* sendAt(size_t elem) const { return static_cast<const char*>(send) + elem * elemSize(); }
  char* recvAt(size_t elem) const { return static_cast<char*>(recv) + elem * elemSize(); }
};

// A rank alone: every collective's result is its input (an average over one rank divides by
// one), so in place there is nothing to do, and out of place one copy of `count` elements
// (an average's finalizing one) in one step: slices would each add a step's fixed cost and
// let no peer start sooner (a lone 512 MiB in-place allreduce spent 2.5 ms on an H200 in 256
// steps that copied nothing).
inline void copyAlone(const CollectiveArgs& a, Plan& plan, size_t count) {
  if (a.send != a.recv) plan.add(copyStep(a.send, a.recv, count * a.elemSize(), a.info.op == loomAvg));
}

// Builders, one call each. They use only the ranks' links (peer != rank) and local copies.
void ringAllReduce(const CollectiveArgs& a, Plan& plan);
void ringBroadcast(const CollectiveArgs& a, Plan& plan);
void ringReduce(const CollectiveArgs& a, Plan& plan);
void ringAllGather(const CollectiveArgs& a, Plan& plan);
void ringReduceScatter(const CollectiveArgs& a, Plan& plan);
void treeAllReduce(const CollectiveArgs& a, Plan& plan);
void treeBroadcast(const CollectiveArgs& a, Plan& plan);
void treeReduce(const CollectiveArgs& a, Plan& plan);
void recursiveDoublingAllReduce(const CollectiveArgs& a, Plan& plan);
void pairwiseAllToAll(const CollectiveArgs& a, Plan& plan);
// Need `order` with hostStarts (several hosts); on one host they are the ring's.
void hierarchicalAllReduce(const CollectiveArgs& a, Plan& plan);
void hierarchicalBroadcast(const CollectiveArgs& a, Plan& plan);
void hierarchicalReduce(const CollectiveArgs& a, Plan& plan);

}  // namespace loom
