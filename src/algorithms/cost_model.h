// The tuner's cost model: how long one call takes with each algorithm, predicted from a few
// constants per communicator in the alpha-beta style (a latency per message, a bandwidth per
// link), as NCCL's tuning model does. Pure arithmetic over numbers: no communicator, no I/O,
// so the tuner, the tests and tools ask the same questions and get the same answers.
//
// Units: times in µs, sizes in bytes, bandwidths in GB/s (1 GB/s = 1e9 bytes/s = 1e3
// bytes/µs). The formulas, with their derivations, are in cost_model.cc.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "algorithms/algorithm.h"

namespace loom {

// One kind of link: what a message costs before its first byte arrives (alpha), and how
// fast the bytes follow (1 / beta).
struct LinkCost {
  double latencyUs = 0;
  double gbps = 0;  // each way
};

// What the model knows of a communicator: its shape, and constants measured on it (or the
// built-in ones of defaults()). A plain value; copy and change it freely. The measured
// constants start at 0 here: make one with defaults(), then override.
struct CommProfile {
  int nranks = 1;
  // Hosts, holding nranks / nhosts ranks each, contiguous on the ring (docs/TOPOLOGY.md).
  int nhosts = 1;
  LinkCost intra;  // between two ranks of one host: shared memory
  LinkCost inter;  // between hosts: one TCP connection
  double reduceGbps = 0;  // reduce kernel: reads two inputs, writes one; GB/s of output
  double copyGbps = 0;    // one core's memcpy, GB/s of bytes copied
  size_t sliceBytes = 512 << 10;  // LOOM_SLICE_BYTES
  // Links per peer (LOOM_SOCKET_NSOCKS where sockets are in use, LOOM_UCX_LINKS where UCX
  // is, else 1). As in
  // collective.cc, a call spreads over them only when bytes >= channels * 2 * sliceBytes,
  // unless channelsFixed (LOOM_CHANNELS): then every call uses `channels`.
  int channels = 1;
  bool channelsFixed = false;
  double oneShotLatencyUs = 0;       // post and fold on the one-shot board, any size
  size_t oneShotMaxBytes = 32 << 10;  // the board's slot; one-shot needs nhosts == 1 too
  // Per collective (indexed by CallInfo::Kind): the largest call that ran at least as fast on
  // the board as through the FIFO where the machine calibration timed both between two ranks
  // of this host (oneshot.max_bytes.*; 0: not timed). Not the model's: the tuner applies it
  // (select.cc, boardTiming), predictUs does not.
  std::array<size_t, static_cast<size_t>(CallInfo::Kind::kAllToAll) + 1> oneShotTimedMax{};
  // Calls of this many bytes or more no longer fit the cache (LOOM_STREAMING_MIN_BYTES;
  // 0: treat every call as cached). Their shared-memory hops run at memGbps with cached
  // stores and at streamingGbps with non-temporal ones instead of intra.gbps.
  size_t streamingMinBytes = 32 << 20;
  double memGbps = 0;
  double streamingGbps = 0;
  // A shared-memory receive of a range of directMinBytes or more (LOOM_SHM_DIRECT_MIN_BYTES;
  // between processes what LOOM_SHM_DIRECT, a tuning file or the machine calibration says, 0:
  // never) reads straight from the sender's buffer: one copy, at directGbps,
  // where the FIFO's intra.gbps pays for two. Plain receives do so, and reductions that
  // may not write their destination yet (recursive doubling's); reductions that may read
  // the FIFO in place instead (ring, tree, reduce), and so never read directly.
  double directGbps = 0;
  size_t directMinBytes = 512 << 10;
  bool directMeasured = false;  // directMinBytes is the machine calibration's (rank 0's)
  // A device communicator (docs/ARCHITECTURE.md, "Device communicators"): intra is a FIFO
  // hop of the plan kernel's simple wire, lowLatency one of its low-latency wire; copy and
  // reduce are the kernel's own loops. No one-shot board, no streaming stores, no direct
  // reads there.
  bool device = false;
  LinkCost lowLatency;
  // Every rank on one host, joined by shared memory (the one-shot board's condition; not
  // where LOOM_TRANSPORTS leaves shared memory out).
  bool sharedMemory = false;

  // Built-in constants (typical figures, cost_model.cc says where each comes from) for
  // `nranks` ranks over `nhosts` hosts, until calibration (tuning_file.h) replaces them.
  static CommProfile defaults(int nranks, int nhosts);
  // The same for a device communicator.
  static CommProfile deviceDefaults(int nranks, int nhosts);

  int ranksPerHost() const;
};

// Whether a ring allreduce takes each slice through all its steps before the next
// (CollectiveArgs::sliceBySlice), so that the executor forwards what it reduces from the
// cache: a host communicator whose links are all shared memory. Both ends of a link must
// order its steps alike, and this is the same on every rank.
inline bool ringsSliceBySlice(const CommProfile& p) { return p.sharedMemory && !p.device; }

// How a rank stores what it receives and reduces. kSimple: plain stores, which keep the
// result in the cache. kStreaming: non-temporal stores, which skip reading each destination
// line first but leave the result in memory; it exists only for calls that no longer fit
// the cache (streamingMinBytes or more), and only shared-memory hops go faster with it.
// kLowLatency: on device communicators only, each 8 data bytes travel beside their flag in
// one 16-byte store (src/device/fifo.h): no flag round trip per slot, half the bandwidth.
enum class Protocol : uint8_t { kSimple, kStreaming, kLowLatency };
constexpr int kNumProtocols = 3;

// "simple", "streaming", "ll".
const char* protocolName(Protocol protocol);

// Channels a call of `bytes` spreads over, of `links` per peer, at least one. On hosts as
// many as get two slices' worth each (fewer and the pipeline would not fill). On a device a
// channel is a thread block, whose own copy rate bounds it long before the pipeline does: one
// per half slice.
int channelsFor(size_t bytes, size_t sliceBytes, int links, bool device);

// Predicted µs for one call of `kind` moving `bytes` (the whole buffer one rank contributes
// or receives, as CallShape::bytes in select.h) with `algorithm` and `protocol`. +infinity
// where that cannot run: an algorithm the collective lacks (supports() in select.h),
// one-shot across hosts, above oneShotMaxBytes or on a device, hierarchical on a device
// (on one host it is the ring, and predicts as the ring), streaming below
// streamingMinBytes, low latency off a device.
// Non-decreasing in bytes for a fixed protocol, except at the sizes where channels switch on
// (the inter-host bandwidth then multiplies by channels) and where calls leave the cache
// (if memGbps were above intra.gbps). `inPlace`: the call is in place on every rank whose
// plan the prediction prices; its one buffer stays in the cache up to twice the size, and
// recursive doubling then sends no range that a peer could read directly.
double predictUs(CallInfo::Kind kind, Algorithm algorithm, Protocol protocol, size_t bytes, const CommProfile& p,
                 bool inPlace = false);
// One message of `bytes` to a rank of this host (shared memory) or another one (the network):
// a link's latency, then its bandwidth.
double predictMessageUs(size_t bytes, bool otherHost, const CommProfile& p);

struct Prediction {
  Algorithm algorithm;
  Protocol protocol;
  double us;  // +infinity when the algorithm cannot run
};

// `algorithm` with the faster of the protocols that exist at this size.
Prediction predict(CallInfo::Kind kind, Algorithm algorithm, size_t bytes, const CommProfile& p);

// The algorithms `allowed` (a bit per Algorithm, 1u << Algorithm, as
// AlgorithmSetting::allowed) that can run this call, fastest first, each with its best
// protocol; equal times keep the order ring, tree, rd, oneshot, pairwise, hierarchical.
std::vector<Prediction> rankAlgorithms(CallInfo::Kind kind, size_t bytes, const CommProfile& p,
                                       uint32_t allowed = ~0u);

// Where `b` catches up with `a`: a size in [8 B, 1 GiB], a multiple of 4 (the element size
// of the common types), at which b predicts at most a's time while 4 bytes less it predicts
// more. 8 when b is already as fast at 8 B; 0 when b can never run or is still slower at
// 1 GiB. Found by bisection, so with several crossings in the range it is one of them.
size_t crossoverBytes(CallInfo::Kind kind, Algorithm a, Algorithm b, const CommProfile& p);

}  // namespace loom
