// Hierarchical allreduce, broadcast and reduce, for communicators that span hosts: every rank of a
// host drives the network with its own connections, each carrying a shard of the buffer.
//
// Allreduce: the ranks of each host reduce-scatter the buffer around their host's ring
// (shared memory), so each holds one shard reduced over its host; each then allreduces its
// shard around a ring of the ranks holding the same shard on the other hosts, all shards at
// once; last, each host's ring allgathers the shards.
//
//   network bytes a host sends per allreduce of S bytes, H hosts of L ranks:
//     flat ring      2 (HL-1)/(HL) S      (4 x 2: 1.75 S)
//     hierarchical   L x 2 (H-1)/H S/L    (4 x 2: 1.5 S, the least any allreduce sends)
//   and a slice crosses 2(H-1) host boundaries instead of about 2H, in 2(L-1) + 2(H-1) hops
//   instead of 2(HL-1).
//
// Broadcast: the root's host passes the buffer down a chain of its ranks from the root; as
// the slices of shard k reach that host's rank k, it sends them down the chain of ranks k of
// the other hosts (in ring order from the root's host), all shards at once; each other host's
// ranks holding shards allgather them around their host's ring. A host sends and receives S
// through the network, as the flat chain, but over L connections of 1/L each instead of one:
// the same time where one network port per host is the limit, L times less where each rank
// has its own (a NIC per GPU) or one connection cannot fill the port.
//
// Reduce is the broadcast run backwards: each other host's ranks reduce-scatter, the shards
// pass toward the root's host along the chains of hosts, folded in at each host, and the
// root's host reduces them along a chain that ends at the root.
//
// Hosts of unequal size: K, the fewest ranks any host has, is the number of shards. The
// first K ranks of a host on the ring ("leaders") hold them; every other rank (an "extra")
// first folds its buffer into leader (its local index mod K) and at the end receives the
// result from it (broadcast: only receives it; reduce: only folds in).
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
    }
    host = hostOf(position);
    local = position - firsts[static_cast<size_t>(host)];
    shards = *std::min_element(sizes.begin(), sizes.end());
  }
  int first(int h) const { return firsts[static_cast<size_t>(h)]; }
  int size(int h) const { return sizes[static_cast<size_t>(h)]; }
  // The host of the rank at ring position `position`.
  int hostOf(int position) const {
    int h = 0;
    while (h + 1 < hosts && first(h + 1) <= position) ++h;
    return h;
  }
};

// What the hierarchical builders share: the hosts, the K shards of each channel's part, and
// the log of the steps that wrote the receive buffer, which hands the phases over slice by
// slice.
struct HostShards {
  explicit HostShards(const CollectiveArgs& args)
      : a(args), hosts(args.order->hostStarts(), args.nranks, args.position()), K(hosts.shards),
        se(args.sliceElems()), es(args.elemSize()), shardSlices(sliceCount(shard(0, 0), se)) {}

  Range shard(int c, int k) const { return part(part(a.info.count, a.channels, c), K, k); }
  // The rank with index `local` on host `h`.
  int rankOn(int h, int local) const { return a.rankAt(hosts.first(h) + local); }
  // f(channel, shard, slice) for every slice of every shard of every channel, slice-major:
  // the order of the steps on both ends of a link that carries whole shards.
  template <class F>
  void forEachShardSlice(F f) const {
    for (size_t j = 0; j < shardSlices; ++j) {
      for (int c = 0; c < a.channels; ++c) {
        for (int k = 0; k < K; ++k) {
          const Range s = slice(shard(c, k), se, j);
          if (s.size() > 0) f(c, k, s);
        }
      }
    }
  }
  // Before a pass over `chunks` ranges of `slices` slices, each slice waits for what last
  // wrote it; afterwards (learn) the log knows what the pass wrote.
  template <class RangeOf>
  LastWrite lastWrites(const Plan& plan, int chunks, size_t slices, RangeOf range) const {
    LastWrite last(a.channels, chunks, slices, plan.memory());
    forEachSlot(chunks, slices, [&](int c, int k, size_t j) { last.at(c, k, j) = written.latest(slice(range(c, k), se, j)); });
    return last;
  }
  template <class RangeOf>
  void learn(LastWrite& last, int chunks, size_t slices, RangeOf range) {
    forEachSlot(chunks, slices, [&](int c, int k, size_t j) { written.record(slice(range(c, k), se, j), last.at(c, k, j)); });
  }
  // The ring of this host's leaders.
  RingOrder leaders() const {
    std::vector<int> ranks;
    for (int q = 0; q < K; ++q) ranks.push_back(rankOn(hosts.host, q));
    return RingOrder(ranks);
  }
  // Sends slice `s` from `from` to `peer` on channel c once step `after` is done. `viaFifo`:
  // the peer reduces it as it arrives, or takes it viaFifo (Step::viaFifo).
  int send(Plan& plan, int peer, int c, const void* from, const Range& s, int after, bool viaFifo) const {
    Step st = linkStep(Step::Kind::kSend, peer, c, from, nullptr, s.size() * es, after);
    st.viaFifo = viaFifo;
    return plan.add(st);
  }
  // This leader's extras: its host's ranks local + K, local + 2K, ...
  std::vector<int> extras() const {
    std::vector<int> ranks;
    for (int q = hosts.local + K; q < hosts.size(hosts.host); q += K) ranks.push_back(rankOn(hosts.host, q));
    return ranks;
  }
  // A leader folds its extras' buffers into `to` (element -> address: the receive buffer, or
  // the reduce's scratch), then reduce-scatters around the host's leaders there: afterwards
  // `to` holds shard (local + 1) % K summed over the host. False where nothing was written
  // (no extras, one leader): the send buffer holds this rank's part as it is.
  template <class To>
  bool reduceOverHost(Plan& plan, To to) {
    const std::vector<int> folds = extras();
    for (size_t e = 0; e < folds.size(); ++e) {
      forEachShardSlice([&](int c, int, const Range& s) {
        const void* src = e == 0 ? a.sendAt(s.begin) : to(s.begin);
        written.record(s, plan.add(linkStep(Step::Kind::kRecvReduce, folds[e], c, src, to(s.begin), s.size() * es,
                                            written.latest(s))));
      });
    }
    const bool folded = !folds.empty();
    auto mine = [&](size_t e) -> const void* { return folded ? to(e) : a.sendAt(e); };
    auto range = [&](int c, int k) { return shard(c, k); };
    if (K > 1) {
      const RingOrder hostRing = leaders();
      LastWrite last = lastWrites(plan, K, shardSlices, range);
      ringPass(around(hostRing), plan, last, shardSlices, hosts.local, range,
               [&](int s, const Range& out) -> const void* { return s == 0 ? mine(out.begin) : to(out.begin); },
               [&](int, const Range& in) {
                 Step st{Step::Kind::kRecvReduce};
                 st.src = mine(in.begin);
                 st.dst = to(in.begin);
                 st.after = written.latest(in);
                 return st;
               });
      learn(last, K, shardSlices, range);
    }
    return folded || K > 1;
  }
  // The arguments of a pass around the ring `order` of some of the ranks.
  CollectiveArgs around(const RingOrder& order) const {
    CollectiveArgs ring = a;
    ring.nranks = static_cast<int>(order.ranks().size());
    ring.order = &order;
    return ring;
  }

  const CollectiveArgs& a;
  const HostLayout hosts;
  const int K;
  const size_t se, es;
  const size_t shardSlices;
  WriteLog written;

 private:
  template <class F>
  void forEachSlot(int chunks, size_t slices, F f) const {
    for (int c = 0; c < a.channels; ++c) {
      for (int k = 0; k < chunks; ++k) {
        for (size_t j = 0; j < slices; ++j) f(c, k, j);
      }
    }
  }
};

}  // namespace

void hierarchicalAllReduce(const CollectiveArgs& a, Plan& plan) {
  if (a.order == nullptr || a.order->hostStarts().size() < 2) return ringAllReduce(a, plan);
  HostShards h(a);
  const int K = h.K, H = h.hosts.hosts, local = h.hosts.local, host = h.hosts.host;
  const bool avg = a.info.op == loomAvg;
  const size_t es = h.es;
  auto shard = [&](int c, int k) { return h.shard(c, k); };

  if (local >= K) {  // an extra: fold in, take the result back
    const int leader = h.rankOn(host, local % K);
    std::vector<int> sends;
    h.forEachShardSlice([&](int c, int, const Range& s) {
      sends.push_back(h.send(plan, leader, c, a.sendAt(s.begin), s, Step::kNone, true));
    });
    size_t i = 0;
    h.forEachShardSlice([&](int c, int, const Range& s) {
      // In place, the result overwrites what was sent: not before the leader has read it.
      Step st = linkStep(Step::Kind::kRecv, leader, c, nullptr, a.recvAt(s.begin), s.size() * es, sends[i++]);
      st.viaFifo = true;  // the leader reduces into this range again in its next allreduce
      plan.add(st);
    });
    return;
  }

  // This rank's extras folded in, then the host's leaders around their own ring; afterwards
  // this rank holds shard `own` reduced over its host.
  const bool hostReducedInRecv = h.reduceOverHost(plan, [&](size_t e) { return a.recvAt(e); });
  const RingOrder hostRing = h.leaders();
  const CollectiveArgs inHost = h.around(hostRing);
  const int own = (local + 1) % K;

  // Shard `own` around the ring of this local index on every host: reduce-scatter, then
  // allgather, as ringAllReduce.
  auto hostReduced = [&](size_t e) -> const void* { return hostReducedInRecv ? a.recvAt(e) : a.sendAt(e); };
  std::vector<int> across;
  for (int q = 0; q < H; ++q) across.push_back(h.rankOn(q, local));
  const RingOrder acrossRing(across);
  const CollectiveArgs acrossHosts = h.around(acrossRing);
  auto chunk = [&](int c, int i) { return part(shard(c, own), H, i); };
  const size_t chunkSlices = sliceCount(part(shard(0, own), H, 0), h.se);
  {
    LastWrite last = h.lastWrites(plan, H, chunkSlices, chunk);
    ringPass(acrossHosts, plan, last, chunkSlices, host, chunk,
             [&](int s, const Range& out) { return s == 0 ? hostReduced(out.begin) : a.recvAt(out.begin); },
             [&](int s, const Range& in) {
               Step st{Step::Kind::kRecvReduce};
               st.src = hostReduced(in.begin);
               st.dst = a.recvAt(in.begin);
               st.finalize = avg && s == H - 2;
               st.after = h.written.latest(in);
               return st;
             });
    ringPass(acrossHosts, plan, last, chunkSlices, host + 1, chunk,
             [&](int, const Range& out) -> const void* { return a.recvAt(out.begin); },
             [&](int, const Range& in) { return fifoReceiveInto(a, in); });
    h.learn(last, H, chunkSlices, chunk);
  }

  if (K > 1) {  // the shards around the host's ring
    LastWrite last = h.lastWrites(plan, K, h.shardSlices, shard);
    ringPass(inHost, plan, last, h.shardSlices, local + 1, shard,
             [&](int, const Range& out) -> const void* { return a.recvAt(out.begin); },
             [&](int, const Range& in) { return fifoReceiveInto(a, in); });
    h.learn(last, K, h.shardSlices, shard);
  }

  for (int extra : h.extras()) {
    h.forEachShardSlice([&](int c, int, const Range& s) {
      h.send(plan, extra, c, a.recvAt(s.begin), s, h.written.latest(s), true);
    });
  }
}

void hierarchicalBroadcast(const CollectiveArgs& a, Plan& plan) {
  if (a.order == nullptr || a.order->hostStarts().size() < 2) return ringBroadcast(a, plan);
  HostShards h(a);
  const int K = h.K, H = h.hosts.hosts, local = h.hosts.local, host = h.hosts.host;
  const size_t es = h.es;
  const int rootPosition = a.positionOf(a.info.root), rootHost = h.hosts.hostOf(rootPosition);
  const int hostsFromRoot = mod(host - rootHost, H);  // along the chain of hosts
  // Leader k of the host `hops` further along the chain of hosts (-1: the one before).
  auto leaderAlong = [&](int hops, int k) { return h.rankOn(mod(host + hops, H), k); };
  auto receive = [&](int peer, int c, const Range& s) {
    return plan.add(linkStep(Step::Kind::kRecv, peer, c, nullptr, a.recvAt(s.begin), s.size() * es));
  };

  if (hostsFromRoot == 0) {  // the root's host: a chain from the root; leader k sends shard k on
    const int size = h.hosts.size(host), rootLocal = rootPosition - h.hosts.first(host);
    const int onChain = mod(local - rootLocal, size);
    const int next = h.rankOn(host, mod(local + 1, size)), prev = h.rankOn(host, mod(local - 1, size));
    h.forEachShardSlice([&](int c, int k, const Range& s) {
      int have = Step::kNone;
      const void* from = a.recvAt(s.begin);
      if (onChain == 0) {
        if (a.send != a.recv) plan.add(copyStep(a.sendAt(s.begin), a.recvAt(s.begin), s.size() * es, false));
        from = a.sendAt(s.begin);
      } else {
        have = receive(prev, c, s);
      }
      if (onChain < size - 1) h.send(plan, next, c, from, s, have, false);
      if (k == local) h.send(plan, leaderAlong(1, k), c, from, s, have, false);
    });
    return;
  }

  if (local >= K) {  // an extra: the whole buffer from its leader
    const int leader = h.rankOn(host, local % K);
    h.forEachShardSlice([&](int c, int, const Range& s) { receive(leader, c, s); });
    return;
  }

  // Shard `local` from the host before, on to the host after.
  h.forEachShardSlice([&](int c, int k, const Range& s) {
    if (k != local) return;
    const int got = receive(leaderAlong(-1, k), c, s);
    h.written.record(s, got);
    if (hostsFromRoot < H - 1) h.send(plan, leaderAlong(1, k), c, a.recvAt(s.begin), s, got, false);
  });
  if (K > 1) {  // the shards around the host's leaders
    const RingOrder hostRing = h.leaders();
    auto shard = [&](int c, int k) { return h.shard(c, k); };
    LastWrite last = h.lastWrites(plan, K, h.shardSlices, shard);
    ringPass(h.around(hostRing), plan, last, h.shardSlices, local, shard,
             [&](int, const Range& out) -> const void* { return a.recvAt(out.begin); },
             [&](int, const Range& in) {
               Step st{Step::Kind::kRecv};
               st.dst = a.recvAt(in.begin);
               return st;
             });
    h.learn(last, K, h.shardSlices, shard);
  }
  for (int extra : h.extras()) {
    h.forEachShardSlice(
        [&](int c, int, const Range& s) { h.send(plan, extra, c, a.recvAt(s.begin), s, h.written.latest(s), false); });
  }
}

void hierarchicalReduce(const CollectiveArgs& a, Plan& plan) {
  if (a.order == nullptr || a.order->hostStarts().size() < 2) return ringReduce(a, plan);
  HostShards h(a);
  const int K = h.K, H = h.hosts.hosts, local = h.hosts.local, host = h.hosts.host;
  const size_t es = h.es;
  const bool avg = a.info.op == loomAvg;
  const int rootPosition = a.positionOf(a.info.root), rootHost = h.hosts.hostOf(rootPosition);
  const int hostsFromRoot = mod(host - rootHost, H);  // against the flow: hosts pass toward the root's
  // Leader `local` of every host holds shard `own` (as after the allreduce's reduce-scatter),
  // so a shard's chain between hosts joins the leaders of one local index.
  const int own = (local + 1) % K;
  const bool isRoot = a.rank == a.info.root;
  // Where this rank reduces: the root's receive buffer, elsewhere scratch, made for the ranks
  // that reduce (the other ranks' receive buffers are not the call's).
  char* scratch = nullptr;
  auto acc = [&](size_t e) -> char* {
    if (isRoot) return a.recvAt(e);
    if (scratch == nullptr) scratch = plan.scratch(a.info.count * es);
    return scratch + e * es;
  };
  auto reduceFrom = [&](int peer, int c, const void* src, const Range& s, int after, bool finalize) {
    Step st = linkStep(Step::Kind::kRecvReduce, peer, c, src, acc(s.begin), s.size() * es, after);
    st.finalize = finalize;
    return plan.add(st);
  };

  if (hostsFromRoot == 0) {  // the root's host: a chain toward the root; leader q folds in shard (q+1) % K
    const int size = h.hosts.size(host), rootLocal = rootPosition - h.hosts.first(host);
    const int onChain = mod(local - rootLocal, size);
    const int towardRoot = h.rankOn(host, mod(local - 1, size)), fromChain = h.rankOn(host, mod(local + 1, size));
    h.forEachShardSlice([&](int c, int k, const Range& s) {
      const bool crossing = local < K && k == own, chained = onChain < size - 1;
      const void* mine = a.sendAt(s.begin);
      int last = Step::kNone;
      if (crossing) {
        last = reduceFrom(h.rankOn(mod(host + 1, H), local), c, mine, s, Step::kNone, isRoot && avg && !chained);
        mine = acc(s.begin);
      }
      if (chained) {
        last = reduceFrom(fromChain, c, mine, s, last, isRoot && avg);
        mine = acc(s.begin);
      }
      if (!isRoot) h.send(plan, towardRoot, c, mine, s, last, true);
    });
    return;
  }

  if (local >= K) {  // an extra: the whole buffer into its leader
    const int leader = h.rankOn(host, local % K);
    h.forEachShardSlice(
        [&](int c, int, const Range& s) { h.send(plan, leader, c, a.sendAt(s.begin), s, Step::kNone, true); });
    return;
  }

  const bool hostReducedInAcc = h.reduceOverHost(plan, acc);
  // Shard `own` from the host farther from the root's, folded in, on toward the root's.
  h.forEachShardSlice([&](int c, int k, const Range& s) {
    if (k != own) return;
    const void* partial = hostReducedInAcc ? acc(s.begin) : a.sendAt(s.begin);
    int last = h.written.latest(s);
    if (hostsFromRoot < H - 1) {
      last = reduceFrom(h.rankOn(mod(host + 1, H), local), c, partial, s, last, false);
      partial = acc(s.begin);
    }
    h.send(plan, h.rankOn(mod(host - 1, H), local), c, partial, s, last, true);
  });
}

}  // namespace loom
