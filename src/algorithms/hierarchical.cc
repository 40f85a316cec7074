// Hierarchical allreduce, for communicators that span hosts. The ranks of each host
// reduce-scatter the buffer around their host's ring (shared memory), so each holds one shard
// reduced over its host; each then allreduces its shard around a ring of the ranks holding
// the same shard on the other hosts, all shards at once, so every rank of a host drives the
// network with its own connections; last, each host's ring allgathers the shards.
//
//   network bytes a host sends per allreduce of S bytes, H hosts of L ranks:
//     flat ring      2 (HL-1)/(HL) S      (4 x 2: 1.75 S)
//     hierarchical   L x 2 (H-1)/H S/L    (4 x 2: 1.5 S, the least any allreduce sends)
//   and a slice crosses 2(H-1) host boundaries instead of about 2H, in 2(L-1) + 2(H-1) hops
//   instead of 2(HL-1).
//
// Hosts of unequal size: K, the fewest ranks any host has, is the number of shards. The
// first K ranks of a host on the ring ("leaders") hold them; every other rank (an "extra")
// first folds its buffer into leader (its local index mod K) and at the end receives the
// result from it.
//
// Phases hand over slice by slice: a step that reads or writes part of the receive buffer
// waits (`after`) for the step that last wrote it (WriteLog). Each such wait spans one shard,
// whose latest writes all came over one link, which delivers in plan order: waiting for the
// latest of them waits for all of them.
#include <algorithm>
#include <map>
#include <utility>
#include <vector>

#include "algorithms/algorithm.h"
#include "algorithms/partition.h"
#include "algorithms/ring_pass.h"

namespace loom {
namespace {

// The step that last wrote each element of the receive buffer, as the plan is built.
class WriteLog {
 public:
  // The elements of `r` are now written by `step`.
  void record(const Range& r, int step) {
    if (r.size() == 0 || step == Step::kNone) return;
    cutAt(r.begin);
    cutAt(r.end);
    spans_.erase(spans_.lower_bound(r.begin), spans_.lower_bound(r.end));
    spans_[r.begin] = {r.end, step};
  }

  // The latest of the steps that last wrote some element of `r` (kNone: none did).
  int latest(const Range& r) const {
    int step = Step::kNone;
    auto it = spans_.upper_bound(r.begin);
    if (it != spans_.begin()) --it;
    for (; it != spans_.end() && it->first < r.end; ++it) {
      if (it->second.first > r.begin) step = std::max(step, it->second.second);
    }
    return step;
  }

 private:
  // Splits the span that straddles `at`, so that spans start there.
  void cutAt(size_t at) {
    auto it = spans_.upper_bound(at);
    if (it == spans_.begin()) return;
    --it;
    const auto [end, step] = it->second;
    if (it->first < at && end > at) {
      it->second.first = at;
      spans_[at] = {end, step};
    }
  }

  std::map<size_t, std::pair<size_t, int>> spans_;  // begin -> (end, step), disjoint
};

// Where this rank sits among the hosts (ring positions, as RingOrder's hostStarts).
struct HostLayout {
  int hosts = 1;
  int host = 0;    // this rank's
  int local = 0;   // this rank's index on its host
  int shards = 1;  // K: the fewest ranks on any host
  std::vector<int> firsts, sizes;

  HostLayout(const std::vector<int>& starts, int nranks, int position) : hosts(static_cast<int>(starts.size())) {
    for (int h = 0; h < hosts; ++h) {
      firsts.push_back(starts[static_cast<size_t>(h)]);
      sizes.push_back((h + 1 < hosts ? starts[static_cast<size_t>(h + 1)] : nranks) - firsts.back());
      if (firsts.back() <= position) host = h;
    }
    local = position - firsts[static_cast<size_t>(host)];
    shards = *std::min_element(sizes.begin(), sizes.end());
  }
  int first(int h) const { return firsts[static_cast<size_t>(h)]; }
  int size(int h) const { return sizes[static_cast<size_t>(h)]; }
};

}  // namespace

void hierarchicalAllReduce(const CollectiveArgs& a, Plan& plan) {
  if (a.order == nullptr || a.order->hostStarts().size() < 2) return ringAllReduce(a, plan);
  const HostLayout hosts(a.order->hostStarts(), a.nranks, a.position());
  const int K = hosts.shards, H = hosts.hosts, local = hosts.local, first = hosts.first(hosts.host);
  const bool avg = a.info.op == loomAvg;
  const size_t se = a.sliceElems(), es = a.elemSize();
  auto shard = [&](int c, int k) { return part(part(a.info.count, a.channels, c), K, k); };
  const size_t shardSlices = sliceCount(shard(0, 0), se);
  // Every slice of every shard of every channel, slice-major: the order of the folds' steps
  // on both ends of a link.
  auto forEachShardSlice = [&](auto f) {
    for (size_t j = 0; j < shardSlices; ++j) {
      for (int c = 0; c < a.channels; ++c) {
        for (int k = 0; k < K; ++k) {
          const Range s = slice(shard(c, k), se, j);
          if (s.size() > 0) f(c, s);
        }
      }
    }
  };

  if (local >= K) {  // an extra: fold in, take the result back
    const int leader = a.rankAt(first + local % K);
    std::vector<int> sends;
    forEachShardSlice([&](int c, const Range& s) {
      sends.push_back(plan.add(linkStep(Step::Kind::kSend, leader, c, a.sendAt(s.begin), nullptr, s.size() * es)));
    });
    size_t i = 0;
    forEachShardSlice([&](int c, const Range& s) {
      // In place, the result overwrites what was sent: not before the leader has read it.
      Step st = linkStep(Step::Kind::kRecv, leader, c, nullptr, a.recvAt(s.begin), s.size() * es, sends[i++]);
      st.viaFifo = true;  // the leader reduces into this range again in its next allreduce
      plan.add(st);
    });
    return;
  }

  WriteLog written;
  std::vector<int> extras;
  for (int q = local + K; q < hosts.size(hosts.host); q += K) extras.push_back(a.rankAt(first + q));
  for (size_t e = 0; e < extras.size(); ++e) {
    forEachShardSlice([&](int c, const Range& s) {
      const void* src = e == 0 ? a.sendAt(s.begin) : a.recvAt(s.begin);
      written.record(s, plan.add(linkStep(Step::Kind::kRecvReduce, extras[e], c, src, a.recvAt(s.begin),
                                          s.size() * es, written.latest(s))));
    });
  }
  // What this rank contributes: its own buffer, or that with its extras' folded in.
  const bool folded = !extras.empty();
  auto mine = [&](size_t e) -> const void* { return folded ? a.recvAt(e) : a.sendAt(e); };
  // Before each pass, every slice waits for what last wrote it; afterwards the log learns
  // what the pass wrote.
  auto forEachSlot = [&](int chunks, size_t slices, auto f) {
    for (int c = 0; c < a.channels; ++c) {
      for (int k = 0; k < chunks; ++k) {
        for (size_t j = 0; j < slices; ++j) f(c, k, j);
      }
    }
  };
  auto lastWrites = [&](int chunks, size_t slices, auto range) {
    LastWrite last(a.channels, chunks, slices);
    forEachSlot(chunks, slices, [&](int c, int k, size_t j) { last.at(c, k, j) = written.latest(slice(range(c, k), se, j)); });
    return last;
  };
  auto learn = [&](LastWrite& last, int chunks, size_t slices, auto range) {
    forEachSlot(chunks, slices, [&](int c, int k, size_t j) { written.record(slice(range(c, k), se, j), last.at(c, k, j)); });
  };

  // The host's leaders, around their own ring; afterwards this rank holds shard `own`
  // reduced over its host.
  std::vector<int> leaders;
  for (int q = 0; q < K; ++q) leaders.push_back(a.rankAt(first + q));
  const RingOrder hostRing(leaders);
  CollectiveArgs inHost = a;
  inHost.nranks = K;
  inHost.order = &hostRing;
  const int own = (local + 1) % K;
  if (K > 1) {
    LastWrite last = lastWrites(K, shardSlices, shard);
    ringPass(inHost, plan, last, shardSlices, local, shard,
             [&](int s, const Range& out) { return s == 0 ? mine(out.begin) : a.recvAt(out.begin); },
             [&](int, const Range& in) {
               Step st{Step::Kind::kRecvReduce};
               st.src = mine(in.begin);
               st.dst = a.recvAt(in.begin);
               st.after = written.latest(in);
               return st;
             });
    learn(last, K, shardSlices, shard);
  }

  // Shard `own` around the ring of this local index on every host: reduce-scatter, then
  // allgather, as ringAllReduce.
  const bool hostReducedInRecv = folded || K > 1;
  auto hostReduced = [&](size_t e) -> const void* { return hostReducedInRecv ? a.recvAt(e) : a.sendAt(e); };
  std::vector<int> across;
  for (int h = 0; h < H; ++h) across.push_back(a.rankAt(hosts.first(h) + local));
  const RingOrder acrossRing(across);
  CollectiveArgs acrossHosts = a;
  acrossHosts.nranks = H;
  acrossHosts.order = &acrossRing;
  auto chunk = [&](int c, int i) { return part(shard(c, own), H, i); };
  const size_t chunkSlices = sliceCount(part(shard(0, own), H, 0), se);
  {
    LastWrite last = lastWrites(H, chunkSlices, chunk);
    ringPass(acrossHosts, plan, last, chunkSlices, hosts.host, chunk,
             [&](int s, const Range& out) { return s == 0 ? hostReduced(out.begin) : a.recvAt(out.begin); },
             [&](int s, const Range& in) {
               Step st{Step::Kind::kRecvReduce};
               st.src = hostReduced(in.begin);
               st.dst = a.recvAt(in.begin);
               st.finalize = avg && s == H - 2;
               st.after = written.latest(in);
               return st;
             });
    ringPass(acrossHosts, plan, last, chunkSlices, hosts.host + 1, chunk,
             [&](int, const Range& out) -> const void* { return a.recvAt(out.begin); },
             [&](int, const Range& in) { return fifoReceiveInto(a, in); });
    learn(last, H, chunkSlices, chunk);
  }

  if (K > 1) {  // the shards around the host's ring
    LastWrite last = lastWrites(K, shardSlices, shard);
    ringPass(inHost, plan, last, shardSlices, local + 1, shard,
             [&](int, const Range& out) -> const void* { return a.recvAt(out.begin); },
             [&](int, const Range& in) { return fifoReceiveInto(a, in); });
    learn(last, K, shardSlices, shard);
  }

  for (int extra : extras) {
    forEachShardSlice([&](int c, const Range& s) {
      plan.add(linkStep(Step::Kind::kSend, extra, c, a.recvAt(s.begin), nullptr, s.size() * es, written.latest(s)));
    });
  }
}

}  // namespace loom
