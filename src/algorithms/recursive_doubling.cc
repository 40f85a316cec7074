// Recursive doubling allreduce: log2(n) rounds in which partners (rank ^ mask) swap their
// whole partial results and both reduce, so small messages finish in log2(n) latencies
// instead of a ring's 2(n-1). Partners compute op(x, y) and op(y, x), which the kernels make
// bit-identical, so every rank ends with the same bits.
//
// n not a power of two: with p the largest power of two <= n and rem = n - p, the first
// 2*rem ranks pair up (even -> odd) before the rounds, the odd ones carry on for both, and
// hand the result back at the end.
//
//   n = 6 (p = 4, rem = 2):  0 -> 1, 2 -> 3 fold;  rounds among {1, 3, 4, 5};  1 -> 0, 3 -> 2
//
// The numbers are ring positions (CollectiveArgs::order): the early rounds, with the nearest
// partners, stay among neighbours in the machine. Slices are independent of each other, so
// slice j goes over channel j % channels on every rank: each link carries the same slices,
// in the same order, at both of its ends.
#include "algorithms/algorithm.h"
#include "algorithms/partition.h"

namespace loom {

void recursiveDoublingAllReduce(const CollectiveArgs& a, Plan& plan) {
  const int n = a.nranks, r = a.position();
  const bool avg = a.info.op == loomAvg;
  const size_t se = a.sliceElems(), es = a.elemSize();
  if (n == 1) return copyAlone(a, plan, a.info.count);
  int p = 1;
  while (p * 2 <= n) p *= 2;
  const int rem = n - p;
  // Rank in the power-of-two group, or -1 for the even ranks that folded into r + 1.
  const int vr = r < 2 * rem ? (r % 2 == 1 ? r / 2 : -1) : r - rem;
  auto real = [&](int v) { return a.rankAt(v < rem ? 2 * v + 1 : v + rem); };

  const Range all{0, a.info.count};
  for (size_t j = 0; j < sliceCount(all, se); ++j) {
    Range s = slice(all, se, j);
    const size_t bytes = s.size() * es;
    const char* own = a.sendAt(s.begin);
    char* out = a.recvAt(s.begin);
    const int channel = static_cast<int>(j % static_cast<size_t>(a.channels));
    auto step = [&](Step::Kind kind, int peer, const void* src, void* dst) {
      return linkStep(kind, peer, channel, src, dst, bytes);
    };
    if (vr < 0) {
      Step fold = step(Step::Kind::kSend, a.rankAt(r + 1), own, nullptr);
      fold.viaFifo = true;  // r + 1 reduces it as it arrives (its kRecvReduce has no writeAfter)
      plan.add(fold);
      plan.add(step(Step::Kind::kRecv, a.rankAt(r + 1), nullptr, out));
      continue;
    }
    const void* current = own;
    int ready = Step::kNone;
    if (r < 2 * rem) {
      ready = plan.add(step(Step::Kind::kRecvReduce, a.rankAt(r - 1), own, out));
      current = out;
    }
    for (int mask = 1; mask < p; mask <<= 1) {
      const int partner = real(vr ^ mask);
      Step send = step(Step::Kind::kSend, partner, current, nullptr);
      send.after = ready;
      // A range this rank writes again below (in place, or round 2 on) goes through the FIFO:
      // read directly, its lines would be shared with the partner's cache when this rank's
      // reduction rewrites them, each write an invalidation (1.7-1.9x the time at 256 KiB-4 MiB).
      send.viaFifo = current == out;
      int sent = plan.add(send);
      Step reduce = step(Step::Kind::kRecvReduce, partner, current, out);
      // out may be what this round sends (round 2 on, or in place): write it only once sent.
      reduce.writeAfter = sent;
      reduce.finalize = avg && mask * 2 == p;
      ready = plan.add(reduce);
      current = out;
    }
    if (r < 2 * rem) {
      Step back = step(Step::Kind::kSend, a.rankAt(r - 1), out, nullptr);
      back.after = ready;
      plan.add(back);
    }
  }
}

}  // namespace loom
