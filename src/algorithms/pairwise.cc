// All-to-all: every pair of ranks exchanges its blocks directly, all at once; the executor
// interleaves the links. Rank r sends block j of sendbuff to rank j and receives rank j's
// block r into block j of recvbuff.
#include "algorithms/algorithm.h"
#include "algorithms/partition.h"

namespace loom {

void pairwiseAllToAll(const CollectiveArgs& a, Plan& plan) {
  const int n = a.nranks, r = a.rank;
  const size_t count = a.info.count, se = a.sliceElems(), es = a.elemSize();
  const Range block{0, count};
  for (size_t j = 0; j < sliceCount(block, se); ++j) {
    Range s = slice(block, se, j);
    int channel = static_cast<int>(j % static_cast<size_t>(a.channels));
    plan.add(copyStep(a.sendAt(r * count + s.begin), a.recvAt(r * count + s.begin), s.size() * es, false));
    // Offsets k = 1..n-1: send to r+k while receiving from r-k, so no rank is everyone's
    // first peer at once.
    for (int k = 1; k < n; ++k) {
      int to = (r + k) % n, from = (r - k + n) % n;
      plan.add(linkStep(Step::Kind::kSend, to, channel, a.sendAt(to * count + s.begin), nullptr, s.size() * es));
      plan.add(linkStep(Step::Kind::kRecv, from, channel, nullptr, a.recvAt(from * count + s.begin), s.size() * es));
    }
  }
}

}  // namespace loom
