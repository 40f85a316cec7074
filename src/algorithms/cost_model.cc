// The cost model's formulas. Every algorithm that uses links becomes one pipelined Schedule,
// timed by scheduleUs(); the functions per algorithm below only say what its schedule is.
//
//   time = alpha of each hop one slice crosses, first send to last receive     latency
//        + fill x (one slice's transfer)                                       pipeline fill
//        + load x stepBytes / bandwidth                                        bandwidth
//        + reduceBytes / reduceGbps                                            reduction
//
// `load` counts the stepBytes that the busiest rank sends (or receives) in all: what bounds
// the throughput is a rank's own transfers, since one executor thread per rank copies into
// shared memory or hands bytes to the kernel's sockets, so a tree node with two children
// sends twice. `fill` counts the slice times spent outside that rank's stream. Slices are
// cut as partition.h cuts them (full slices, the last one shorter), so with S slices:
//
//   chain of h hops (broadcast root -> ... -> last):    fill = h - 1
//     slice 0 reaches the last rank after h hops, each alpha + one slice; the other S - 1
//     follow one slice apart:  h alpha + (h - 1) slice + stepBytes / bw.
//
//   ring pass of h steps (every rank sends at every step to its next):    fill = 0
//     each rank's link has work from the start, and the next step's slices queue behind the
//     current ones, so the link streams all h stepBytes:  h alpha + h stepBytes / bw.
//     (Exactly (h - 1) max(S slice, alpha + slice) + S slice + alpha: the sum bounds it.)
//
// Reductions run on the thread that copies, and are added rather than overlapped: like the
// ring's alphas, an upper bound, tightest where one term dominates. Within one host, a
// reduction that reads the FIFO in place takes the place of the receiver's copy out of it,
// which the link's bandwidth already counts: it adds only what a reduction costs over a
// copy, reduceBytes (1 / reduceGbps - 1 / copyGbps).
//
// Shared memory reads a receive of directMinBytes or more straight from the sender's
// buffer (shm_transport.h): those transfers run at directGbps instead of intra.gbps. Which
// receives are read so, and in ranges of what size, is each algorithm's (`direct` and
// `directSpan` below); a reduction read so lands in staging first and pays in full.
//
// Links: a hop between hosts pays `inter`, one within a host `intra`. The bandwidth is the
// slowest kind of link the call uses (every algorithm here uses both kinds when both exist).
// With C channels on, a call's bytes split evenly over C links per peer: between hosts each
// channel has its own TCP connection at inter.gbps; within a host the channels share the
// pair's one shared-memory link (routed_transport.h), at intra.gbps / C each.
#include "algorithms/cost_model.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "algorithms/select.h"

namespace loom {

int channelsFor(size_t bytes, size_t sliceBytes, int links, bool device) {
  // On an H200 (2026-11-28, 2 ranks, 2 MiB slices) 8 MiB ran at 51 GB/s on 8 channels and
  // 35 on the 2 that two slices each gave; 32 MiB at 160 on 16 to 64 and 118 on 8.
  const size_t perChannel = device ? sliceBytes / 2 : 2 * sliceBytes;
  const size_t fill = bytes / std::max<size_t>(perChannel, 1);
  return static_cast<int>(std::clamp<size_t>(fill, 1, static_cast<size_t>(std::max(links, 1))));
}

namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();

// µs to move `bytes` at `gbps` (1 GB/s = 1e3 bytes per µs).
double transferUs(double bytes, double gbps) { return bytes / (gbps * 1e3); }

int log2Floor(int n) {
  int k = 0;
  while ((2 << k) <= n) ++k;
  return k;
}

// The depth of tree.h's binary tree over n ranks.
int log2Ceil(int n) { return n <= 1 ? 0 : log2Floor(n - 1) + 1; }

// The most children a rank has in tree.h's binary tree over n: the root has one, the inner
// ranks two once there are four or more.
int treeFanout(int n) { return n >= 4 ? 2 : 1; }

// Hops one slice crosses, by kind of link.
struct Hops {
  int intra = 0;
  int inter = 0;
  int count() const { return intra + inter; }
};

// Low latency runs on a host's own connections; those between hosts go through the proxy's
// sockets (src/device/proxy.h) on the simple wire.
const LinkCost& intraLink(const CommProfile& p, Protocol protocol) {
  return protocol == Protocol::kLowLatency ? p.lowLatency : p.intra;
}

double alphaUs(const Hops& hops, const CommProfile& p, Protocol protocol) {
  return hops.intra * intraLink(p, protocol).latencyUs + hops.inter * p.inter.latencyUs;
}

// Whether ring positions `distance` apart are on different hosts. Exact for partners that
// are aligned to the hosts (recursive doubling's, with ranksPerHost a power of two); for the
// binary trees an edge shorter than a host can still cross a boundary, which this leaves
// out.
bool crossesHosts(int distance, const CommProfile& p) {
  return p.nhosts > 1 && distance >= p.ranksPerHost();
}

// Of `hops` consecutive hops around the ring, those between hosts: hosts are contiguous on
// the ring, so one hop in every ranksPerHost leaves a host (every hop, with one rank per
// host). A walk meets at most ceil(hops / ranksPerHost) of them, and the call ends with the
// walk that meets the most.
Hops ringWalk(int hops, const CommProfile& p) {
  const int r = p.ranksPerHost();
  const int inter = p.nhosts > 1 ? (hops + r - 1) / r : 0;
  return {hops - inter, inter};
}

// Hops between partners 1, 2, 4, ..., 2^(levels-1) positions apart: recursive doubling's
// rounds, and the levels of a binary tree over ring positions (tree.h).
Hops doublingHops(int levels, const CommProfile& p) {
  Hops hops;
  for (int k = 0; k < levels; ++k) {
    if (crossesHosts(1 << k, p)) {
      ++hops.inter;
    } else {
      ++hops.intra;
    }
  }
  return hops;
}

// Channels of a call in the model: what collective.cc gives it.
int activeChannels(size_t bytes, const CommProfile& p) {
  if (p.channelsFixed) return p.channels;
  return channelsFor(bytes, p.sliceBytes, p.channels, p.device);
}

bool pastTheCache(size_t bytes, const CommProfile& p) {
  return p.streamingMinBytes > 0 && bytes >= p.streamingMinBytes;
}

// A shared-memory hop's bandwidth for a call of `bytes`.
double intraGbps(const CommProfile& p, Protocol protocol, size_t bytes) {
  if (!pastTheCache(bytes, p)) return intraLink(p, protocol).gbps;
  return protocol == Protocol::kStreaming ? p.streamingGbps : p.memGbps;
}

// One channel's bandwidth on the slowest kind of link (see the top of the file).
double channelGbps(const CommProfile& p, Protocol protocol, size_t bytes, int channels) {
  double gbps = kInfinity;
  if (p.ranksPerHost() > 1) gbps = intraGbps(p, protocol, bytes) / channels;
  if (p.nhosts > 1) gbps = std::min(gbps, p.inter.gbps);
  return gbps;
}

struct Schedule {
  Hops path;               // the hops one slice crosses, first send to last receive
  double stepBytes = 0;    // what one hop carries, all slices, all channels
  double load = 0;         // stepBytes the busiest rank sends (or receives) in all
  double fill = 0;         // slice times outside that rank's stream
  double reduceBytes = 0;  // output bytes the busiest rank reduces
  int channels = 1;
  double direct = 0;          // of load, receives a shared-memory link may read directly
  double directSpan = 0;      // the contiguous range one such receive reads
  bool reducesDirect = false; // those receives reduce, each a load's share of reduceBytes (rd)
  // Past the cache, the memory traffic of the transfers against what passes step by step
  // make: a host's ring allreduce on one host forwards from the cache (ringPasses).
  double memoryShare = 1;
};

// Whether a schedule's direct-eligible receives are read straight from the sender: one
// host (between hosts the slower socket sets the pace), calls that fit the cache (past it,
// memGbps measures every shared-memory hop), ranges of directMinBytes or more.
bool readsDirect(const Schedule& s, const CommProfile& p, size_t bytes) {
  return s.direct > 0 && p.nhosts == 1 && p.directMinBytes > 0 && p.directGbps > 0 && !pastTheCache(bytes, p) &&
         s.directSpan / s.channels >= static_cast<double>(p.directMinBytes);
}

// Reductions that read the FIFO in place cost what they add over the copy out of it;
// between hosts, and for receives read directly into staging, they cost in full.
double reductionUs(const Schedule& s, const CommProfile& p, bool direct) {
  const double full = transferUs(s.reduceBytes, p.reduceGbps);
  if (p.nhosts > 1) return full;
  const double overCopy = std::max(0.0, full - transferUs(s.reduceBytes, p.copyGbps));
  const double directShare = direct && s.reducesDirect ? s.direct / s.load : 0;
  return directShare * full + (1 - directShare) * overCopy;
}

double scheduleUs(const Schedule& s, const CommProfile& p, Protocol protocol, size_t bytes) {
  const double gbps = channelGbps(p, protocol, bytes, s.channels) / (pastTheCache(bytes, p) ? s.memoryShare : 1);
  const double step = s.stepBytes / s.channels;
  const double slice = std::min(step, static_cast<double>(p.sliceBytes));
  const bool direct = readsDirect(s, p, bytes);
  const double directLoad = direct ? s.direct : 0;
  return alphaUs(s.path, p, protocol) + s.fill * transferUs(slice, gbps) + (s.load - directLoad) * transferUs(step, gbps) +
         directLoad * transferUs(step, p.directGbps / s.channels) + reductionUs(s, p, direct);
}

// A chain: every slice crosses `path` (h hops) hop after hop, each rank forwarding it as
// soon as it has it (reduced, on the way up a tree), and the busiest rank makes `fanout`
// transfers of every slice (its children):
//   h alpha + (h - 1) slice / bw + fanout stepBytes / bw + reduceBytes / reduceGbps,
// slice = min(stepBytes, sliceBytes). Ring broadcast and reduce, tree broadcast, reduce and
// allreduce are chains. `plain` of the fanout transfers are plain receives (the others are
// reductions, which read the FIFO in place), each a slice at a time as it is forwarded.
Schedule pipelinedChain(Hops path, double stepBytes, double fanout, double plain, double reduceBytes, int channels,
                        const CommProfile& p) {
  Schedule s;
  s.path = path;
  s.stepBytes = stepBytes;
  s.load = fanout;
  s.fill = path.count() - 1;
  s.reduceBytes = reduceBytes;
  s.channels = channels;
  s.direct = plain;
  s.directSpan = std::min(stepBytes, static_cast<double>(p.sliceBytes) * channels);
  return s;
}

// `passes` passes around the ring (ring.cc) of n - 1 steps each, every step moving one
// chunk of bytes / n per rank; with `reduces` the first pass reduces what arrives, n - 1
// chunks. Allgather and reduce-scatter are one pass:
//   (n-1) alpha + (n-1)/n bytes / bw [+ (n-1)/n bytes / reduceGbps],
// allreduce (reduce-scatter, then allgather) two:
//   2(n-1) alpha + 2(n-1)/n bytes / bw + (n-1)/n bytes / reduceGbps.
// The pass that does not reduce is plain receives, of a slice at a time (each is sent as it
// arrives), read directly where the link allows, except allreduce's, which come through the
// FIFO (Step::viaFifo). On one host a host communicator's allreduce takes each slice through
// all its steps in turn and forwards what it reduces from the cache (CollectiveArgs::
// sliceBySlice): 2 bytes of memory traffic per busbw byte where step by step moves 2.5
// (docs/PERF.md, "Memory traffic"), which counts past the cache.
Schedule ringPasses(int passes, bool reduces, double bytes, const CommProfile& p, int channels) {
  const int n = p.nranks, steps = passes * (n - 1);
  Schedule s;
  s.path = ringWalk(steps, p);
  s.stepBytes = bytes / n;
  s.load = steps;
  s.fill = 0;
  s.reduceBytes = reduces ? bytes * (n - 1) / n : 0;
  s.channels = channels;
  s.direct = passes == 1 && !reduces ? steps : 0;
  s.directSpan = std::min(s.stepBytes, static_cast<double>(p.sliceBytes) * channels);
  if (passes == 2 && ringsSliceBySlice(p)) s.memoryShare = 2.0 / 2.5;
  return s;
}

// Double binary tree (tree.h): each tree carries half the buffer up to its root, reduced on
// the way, and the result back down: a chain of 2 x depth hops. On one host the depth is
// the binary tree's, ceil(log2 n); across hosts it is a host's chain of r - 1 ranks plus
// ceil(log2 nhosts) levels between the hosts' heads. The busiest rank is inner in one tree
// and a leaf in the other: it sends its half up both (n = 2: every rank is one tree's root,
// so up one) and the result down to each of its c children, and folds each child's half:
//   2 depth alpha + (2 depth - 1) slice / bw + (2 + c) (bytes / 2) / bw
//     + c (bytes / 2) / reduceGbps,
// which at large sizes is NCCL's 2 bytes / bw for a tree against the ring's 2(n-1)/n.
Schedule doubleTreeAllReduce(double bytes, const CommProfile& p, int channels) {
  const int n = p.nranks, hosts = p.nhosts, r = p.ranksPerHost();
  const Hops depth = hosts == 1 ? doublingHops(log2Ceil(n), p) : Hops{r - 1, log2Ceil(hosts)};
  const int fanout = hosts == 1 ? treeFanout(n) : (r > 1 ? 1 : 0) + treeFanout(hosts);
  const double sends = (n == 2 ? 1 : 2) + fanout;
  // The two trees run on channels 0 and 1 (tree.cc), so more channels do not help. The
  // result going down is plain receives, through the FIFO (Step::viaFifo).
  return pipelinedChain({2 * depth.intra, 2 * depth.inter}, bytes / 2, sends, 0, fanout * bytes / 2,
                        std::min(channels, 2), p);
}

// Recursive doubling (recursive_doubling.cc): with q the largest power of two <= n, log2(q)
// rounds in which partners 1, 2, 4, ... positions apart swap the whole buffer and both
// reduce; when n is not a power of two, the first 2(n - q) ranks fold in pairs before (a
// round) and hand the result back after (another). Slices go through the rounds one after
// another, each round on another link but all sent by the same ranks, so the busiest (an
// odd rank that others fold into) streams log2(q) + 1 buffers and reduces as many, after
// waiting one hop for the fold: fill 1. A power of two:
//   log2(n) (alpha + bytes / bw + bytes / reduceGbps);
// otherwise (log2(q) + 2) alpha + slice / bw + (log2(q) + 1) (bytes / bw + bytes /
// reduceGbps). Slices spread over the channels. A rank may write its result only once its
// partner has read what it sent. Its first round's send is its own input, which it does not
// write again: the partner reads it (posted as one range) directly into staging when the
// link allows, out of place. Later rounds send the result, which the next reduction
// rewrites, through the FIFO (recursive_doubling.cc), and so does every round of a rank
// that folded first, or in place: the busiest rank reads directly only where n is a power of
// two and the call is out of place.
Schedule recursiveDoubling(double bytes, const CommProfile& p, int channels, bool inPlace) {
  const int rounds = log2Floor(p.nranks);
  const bool folds = (1 << rounds) != p.nranks;
  Schedule s;
  s.path = doublingHops(rounds, p);
  if (folds) {
    // Folding pairs are neighbours on the ring.
    const Hops fold = doublingHops(1, p);
    s.path.intra += 2 * fold.intra;
    s.path.inter += 2 * fold.inter;
  }
  s.stepBytes = bytes;
  s.load = rounds + (folds ? 1 : 0);
  s.fill = folds ? 1 : 0;
  s.reduceBytes = s.load * bytes;
  s.channels = channels;
  s.direct = folds || inPlace ? 0 : std::min(1.0, s.load);  // the first round, where there is one
  s.directSpan = bytes;
  s.reducesDirect = true;
  return s;
}

// Pairwise all-to-all (pairwise.cc): each rank sends its n - 1 blocks of bytes / n to their
// owners all at once, one hop deep, and the blocks queue on the sending rank:
//   alpha + (n-1)/n bytes / bw.
Schedule pairwise(double bytes, const CommProfile& p, int channels) {
  Schedule s;
  s.path = p.nhosts > 1 ? Hops{0, 1} : Hops{1, 0};
  s.stepBytes = bytes / p.nranks;
  s.load = p.nranks - 1;
  s.fill = 0;
  s.channels = channels;
  s.direct = s.load;
  s.directSpan = s.stepBytes;
  return s;
}

// The schedule of a link algorithm for a collective it supports.
Schedule linkSchedule(CallInfo::Kind kind, Algorithm algorithm, size_t size, const CommProfile& p, bool inPlace) {
  using K = CallInfo::Kind;
  const int n = p.nranks, channels = activeChannels(size, p);
  const double bytes = static_cast<double>(size);
  const bool reduces = kind == K::kReduce;
  switch (algorithm) {
    case Algorithm::kRing:
      if (kind == K::kAllReduce) return ringPasses(2, true, bytes, p, channels);
      if (kind == K::kAllGather || kind == K::kReduceScatter) {
        return ringPasses(1, kind == K::kReduceScatter, bytes, p, channels);
      }
      // Broadcast and reduce: a chain of n - 1 hops around the ring from (to) the root.
      return pipelinedChain(ringWalk(n - 1, p), bytes, 1, reduces ? 0 : 1, reduces ? bytes : 0, channels, p);
    case Algorithm::kTree: {
      if (kind == K::kAllReduce) return doubleTreeAllReduce(bytes, p, channels);
      // Broadcast down, or reduce up, the binary tree rooted at the root: ceil(log2 n) hops;
      // an inner rank sends every slice to (reduces every slice from) each of its children.
      const int fanout = treeFanout(n);
      return pipelinedChain(doublingHops(log2Ceil(n), p), bytes, fanout, reduces ? 0 : fanout,
                            reduces ? fanout * bytes : 0, channels, p);
    }
    case Algorithm::kRecursiveDoubling: return recursiveDoubling(bytes, p, channels, inPlace);
    case Algorithm::kPairwise: return pairwise(bytes, p, channels);
    case Algorithm::kOneShot:       // no links: predictUs times it
    case Algorithm::kHierarchical:  // three schedules: hierarchicalUs
      break;
  }
  return Schedule();
}

// Hierarchical allreduce (hierarchical.cc) over hosts of r ranks: a reduce-scatter pass
// around each host's ring, an allreduce of each rank's shard (bytes / r) around the ring of
// the H ranks holding it, one per host, all r rings of a host at once on their own
// connections, then an allgather pass around each host's ring (through the FIFO, as the
// ring allreduce's). Each slice of a phase waits for its shard's previous phase, so the
// phases overlap little and their times add:
//   2(r-1) intra alpha + 2(r-1)/r bytes / intra + (r-1)/r bytes / reduce (in place)
//     + 2(H-1) inter alpha + 2(H-1)/H (bytes / r) / inter + (H-1)/H (bytes / r) / reduce.
// Against the flat ring's 2(n-1)/n bytes over the inter links, the network carries r times
// fewer bytes per connection. That counts connections, not a host's one network link, which
// the model does not know: where that link is the limit, the network bytes a host sends fall
// only from 2(n-1)/n to 2(H-1)/H of the buffer (docs/PERF.md).
//
// Hierarchical broadcast: a chain of r - 1 hops through the root's host, chains of H - 1
// hops between hosts carrying bytes / r each, all r at once, and an allgather pass around
// each other host's ring. Unlike the allreduce's, these phases run at once (every rank passes
// a slice on as soon as it has it, and each phase works other links), so the slowest sets
// the pace and the others add their latency:
//   max(bytes / intra, (bytes / r) / inter, (r-1)/r bytes / intra)
//     + (r-1) intra alpha + (H-1) inter alpha + (r-1) intra alpha (+ the chains' fill).
// The flat chain sends the whole buffer over one connection per host boundary; the same
// caveat applies (one port per host: the same network time). Reduce is the same schedule
// run backwards, each phase reducing what it receives.
double hierarchicalUs(CallInfo::Kind kind, Protocol protocol, size_t size, const CommProfile& p) {
  const int r = p.ranksPerHost();
  const int channels = activeChannels(size, p);
  const double bytes = static_cast<double>(size);
  const bool chains = kind == CallInfo::Kind::kBroadcast || kind == CallInfo::Kind::kReduce;
  const bool reduces = kind == CallInfo::Kind::kReduce;
  CommProfile across = p;
  across.nranks = p.nhosts;
  CommProfile host = p;
  host.nranks = r;
  host.nhosts = 1;
  if (chains) {
    // Each phase's time past its latency; the slowest of those, then every phase's latency.
    double slowest = 0, latency = 0;
    auto phase = [&](const Schedule& s, const CommProfile& on) {
      const double alpha = alphaUs(s.path, on, protocol);
      slowest = std::max(slowest, scheduleUs(s, on, protocol, size) - alpha);
      latency += alpha;
    };
    phase(pipelinedChain(ringWalk(p.nhosts - 1, across), bytes / r, 1, reduces ? 0 : 1, reduces ? bytes / r : 0,
                         channels, across),
          across);
    if (r > 1) {
      phase(pipelinedChain(ringWalk(r - 1, host), bytes, 1, reduces ? 0 : 1, reduces ? bytes : 0, channels, host), host);
      phase(ringPasses(1, reduces, bytes, host, channels), host);
    }
    return slowest + latency;
  }
  double us = scheduleUs(ringPasses(2, true, bytes / r, across, channels), across, protocol, size);
  if (r > 1) {
    Schedule allGather = ringPasses(1, false, bytes, host, channels);
    allGather.direct = 0;  // through the FIFO
    us += scheduleUs(ringPasses(1, true, bytes, host, channels), host, protocol, size) +
          scheduleUs(allGather, host, protocol, size);
  }
  return us;
}

// One-shot (one_shot.cc): each rank posts its send buffer in its board slot (a copy), then
// makes its result from the others' slots, after a fixed cost for posting the flags and
// waiting for the others'. The other slots were just written by other cores, so reading them
// moves their cache lines across, as a shared-memory hop does; and the other cores read this
// rank's slot in the last call, so writing it takes its lines back first, at the same cost.
// With B the call's bytes (one rank's input of an allreduce or reduce, the whole receive
// buffer of an allgather, the whole send buffer of a reduce-scatter or all-to-all) and b =
// B / n a block:
//   allreduce, reduce   oneShotLatencyUs + B / intra + (n-1) (B / intra + B / reduceGbps)
//   reduce-scatter      oneShotLatencyUs + B / intra + (n-1) (b / intra + b / reduceGbps)
//   allgather           oneShotLatencyUs + b / intra + (n-1) b / intra
//   all-to-all          oneShotLatencyUs + B / intra + (n-1) b / intra
//   broadcast           oneShotLatencyUs + B / intra + B / intra
// (Allreduce measured on 2 ranks, 8 to 32 KiB: 1.8e-4 µs a byte, against 1.85e-4 so and 1.3e-4
// with the post at copy speed.) A broadcast posts the root's buffer alone, which every other
// rank copies out of the root's slot at once: one hop after the post, whatever n.
double oneShotUs(CallInfo::Kind kind, size_t bytes, const CommProfile& p) {
  const double all = static_cast<double>(bytes), block = all / p.nranks, peers = p.nranks - 1;
  auto hop = [&](double b) { return transferUs(b, p.intra.gbps); };
  auto fold = [&](double b) { return hop(b) + transferUs(b, p.reduceGbps); };
  switch (kind) {
    case CallInfo::Kind::kBroadcast: return p.oneShotLatencyUs + 2 * hop(all);
    case CallInfo::Kind::kAllGather: return p.oneShotLatencyUs + hop(block) + peers * hop(block);
    // A rank posts every block but its own, which it reads from its send buffer.
    case CallInfo::Kind::kAllToAll: return p.oneShotLatencyUs + hop(all - block) + peers * hop(block);
    case CallInfo::Kind::kReduceScatter: return p.oneShotLatencyUs + hop(all - block) + peers * fold(block);
    default: return p.oneShotLatencyUs + hop(all) + peers * fold(all);
  }
}

}  // namespace

// Typical figures, to be replaced by calibration (tuning_file.h):
// - intra 1.5 µs, 8 GB/s: a shared-memory FIFO hop, a flag handed between cores plus the
//   receiver's wake-up. docs/RESULTS.md: 2-rank allreduce over shared memory sustains
//   8.2-8.9 GB/s bus bandwidth from 128 KiB to 16 MiB; its one-hop 8 B broadcast took
//   0.74 µs on an idle VM, so 1.5 µs is a loaded host's figure.
// - inter 25 µs, 1.2 GB/s: TCP over 10 Gb Ethernet (1.25 GB/s on the wire, less headers);
//   the kernel's one-way small-message latency with interrupts is tens of µs.
// - reduce 10 GB/s: docs/KERNELS.md, the vector kernels at 1 MiB per array (last-level
//   cache) move 32 GB/s read + written, 10.7 GB/s of output.
// - copy 13 GB/s: docs/RESULTS.md, one core's memcpy from 2 to 16 MiB, 13.3-14.3 GB/s.
// - one-shot 0.5 µs: docs/RESULTS.md, an 8 B allreduce of 2 ranks on the board takes
//   0.35-0.37 µs; rounded up for more ranks' flags.
// - past the cache (32 MiB and up), 4.5 GB/s with plain stores and 6 GB/s streaming:
//   docs/RESULTS.md, 2-rank allreduce at 128 MiB, 3.7 GB/s bus bandwidth before
//   non-temporal stores and 4.6 with them, less the reduction's share.
// - direct reads 10 GB/s: loom-perf --calibrate on this VM, exchanges of 1 to 4 MiB read
//   straight from the sender, 8.6-10.0 GB/s (a FIFO hop measured 6.6-15.6 on the same VM:
//   which of the two is faster depends on where the two cores share a cache).
// - channels: LOOM_SOCKET_NSOCKS's default, 2, where sockets run (several hosts), and
//   LOOM_UCX_LINKS's, 2, where UCX does; on one host shared memory has one link per peer.
CommProfile CommProfile::defaults(int nranks, int nhosts) {
  CommProfile p;
  p.nranks = nranks;
  p.nhosts = nhosts;
  p.intra = {1.5, 8.0};
  p.inter = {25.0, 1.2};
  p.reduceGbps = 10.0;
  p.copyGbps = 13.0;
  p.oneShotLatencyUs = 0.5;
  p.memGbps = 4.5;
  p.streamingGbps = 6.0;
  p.directGbps = 10.0;
  p.channels = nhosts > 1 ? 2 : 1;
  p.sharedMemory = nhosts == 1;
  return p;
}

// Typical figures for the plan kernel, until calibration on the GPU replaces them: per hop,
// NCCL's NVLink ring latencies (docs/ANCHORS: LL 0.6 µs, Simple 3.4 µs) plus a flag's trip
// through the memory system (ranks sharing one GPU meet in its L2); bandwidth, what blocks
// copying through device memory reach on one FIFO (a quarter of an H100's 3.35 TB/s HBM,
// each byte written and read once more), and LL half of it. Reductions fuse into the
// receive at the copy's pace. Across hosts, the proxy's sockets: the host's figures.
CommProfile CommProfile::deviceDefaults(int nranks, int nhosts) {
  CommProfile p = defaults(nranks, nhosts);
  p.device = true;
  p.intra = {4.0, 200.0};
  p.reduceGbps = 400.0;
  p.copyGbps = 400.0;
  p.streamingMinBytes = 0;
  p.directMinBytes = 0;
  p.channels = 1;
  // Measured on an H100 (2 ranks sharing it, docs/RESULTS.md): the low-latency wire is no
  // faster than simple at 8 B (about 18 us each, launch and flag costs dominate) and slower
  // from 8 KiB (2.4 against 10 GB/s at 512 KiB on one channel), so until calibration says
  // otherwise it costs as much per hop and moves less.
  p.lowLatency = {p.intra.latencyUs, 2.5};
  return p;
}

int CommProfile::ranksPerHost() const { return std::max(1, nranks / std::max(1, nhosts)); }

const char* protocolName(Protocol protocol) {
  switch (protocol) {
    case Protocol::kSimple: return "simple";
    case Protocol::kStreaming: return "streaming";
    case Protocol::kLowLatency: return "ll";
  }
  return "?";
}

double predictMessageUs(size_t bytes, bool otherHost, const CommProfile& p) {
  const LinkCost& link = otherHost ? p.inter : p.intra;
  return link.latencyUs + transferUs(static_cast<double>(bytes), link.gbps);
}

double predictUs(CallInfo::Kind kind, Algorithm algorithm, Protocol protocol, size_t bytes, const CommProfile& profile,
                 bool inPlace) {
  // In place, the one buffer stays in the cache up to twice the size (executor.cc).
  CommProfile doubled;
  if (inPlace) {
    doubled = profile;
    doubled.streamingMinBytes *= 2;
  }
  const CommProfile& p = inPlace ? doubled : profile;
  if (!supports(kind, algorithm)) return kInfinity;
  if (protocol == Protocol::kStreaming && !pastTheCache(bytes, p)) return kInfinity;
  if (protocol == Protocol::kLowLatency && !p.device) return kInfinity;
  if (algorithm == Algorithm::kOneShot && (p.device || p.nhosts > 1 || bytes > p.oneShotMaxBytes)) return kInfinity;
  if (algorithm == Algorithm::kHierarchical && p.device) return kInfinity;
  // On one host the hierarchical algorithms are the ring's.
  if (algorithm == Algorithm::kHierarchical && p.nhosts == 1) algorithm = Algorithm::kRing;
  // Alone, every algorithm is one local copy.
  if (p.nranks == 1) return transferUs(static_cast<double>(bytes), p.copyGbps);
  if (algorithm == Algorithm::kOneShot) return oneShotUs(kind, bytes, p);
  if (algorithm == Algorithm::kHierarchical) return hierarchicalUs(kind, protocol, bytes, p);
  return scheduleUs(linkSchedule(kind, algorithm, bytes, p, inPlace), p, protocol, bytes);
}

Prediction predict(CallInfo::Kind kind, Algorithm algorithm, size_t bytes, const CommProfile& p) {
  Prediction best{algorithm, Protocol::kSimple, predictUs(kind, algorithm, Protocol::kSimple, bytes, p)};
  for (Protocol protocol : {Protocol::kStreaming, Protocol::kLowLatency}) {
    const double us = predictUs(kind, algorithm, protocol, bytes, p);
    if (us < best.us) best = {algorithm, protocol, us};
  }
  return best;
}

std::vector<Prediction> rankAlgorithms(CallInfo::Kind kind, size_t bytes, const CommProfile& p, uint32_t allowed) {
  std::vector<Prediction> ranked;
  // Enum order is the tie order.
  for (int i = 0; i < kNumAlgorithms; ++i) {
    if ((allowed & (1u << i)) == 0) continue;
    Prediction prediction = predict(kind, static_cast<Algorithm>(i), bytes, p);
    if (std::isfinite(prediction.us)) ranked.push_back(prediction);
  }
  std::stable_sort(ranked.begin(), ranked.end(),
                   [](const Prediction& x, const Prediction& y) { return x.us < y.us; });
  return ranked;
}

size_t crossoverBytes(CallInfo::Kind kind, Algorithm a, Algorithm b, const CommProfile& p) {
  auto bCaughtUp = [&](size_t bytes) {
    const double tb = predict(kind, b, bytes, p).us;
    return std::isfinite(tb) && tb <= predict(kind, a, bytes, p).us;
  };
  size_t lo = 8, hi = size_t{1} << 30;
  if (bCaughtUp(lo)) return lo;
  if (!bCaughtUp(hi)) return 0;
  // b is slower at lo and caught up at hi; both stay multiples of 4.
  while (hi - lo > 4) {
    const size_t mid = lo + (hi - lo) / 8 * 4;
    (bCaughtUp(mid) ? hi : lo) = mid;
  }
  return hi;
}

}  // namespace loom
