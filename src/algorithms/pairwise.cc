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
    Step own{Step::Kind::kCopy};
    own.src = a.sendAt(r * count + s.begin);
    own.dst = a.recvAt(r * count + s.begin);
    own.bytes = s.size() * es;
    plan.add(own);
    // Offsets k = 1..n-1: send to r+k while receiving from r-k, so no rank is everyone's
    // first peer at once.
    for (int k = 1; k < n; ++k) {
      int to = (r + k) % n, from = (r - k + n) % n;
      Step send{Step::Kind::kSend};
      send.peer = to;
      send.channel = channel;
      send.src = a.sendAt(to * count + s.begin);
      send.bytes = s.size() * es;
      plan.add(send);
      Step recv{Step::Kind::kRecv};
      recv.peer = from;
      recv.channel = channel;
      recv.dst = a.recvAt(from * count + s.begin);
      recv.bytes = s.size() * es;
      plan.add(recv);
    }
  }
}

}  // namespace loom
