// The choice of algorithm and protocol per call, and LOOM_ALGO / LOOM_PROTO parsing (select.h).
#include "algorithms/select.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <vector>

#include "base/env.h"

namespace loom {
namespace {

struct NamedKind {
  const char* name;
  CallInfo::Kind kind;
};
constexpr NamedKind kCollectives[] = {
    {"allreduce", CallInfo::Kind::kAllReduce},         {"broadcast", CallInfo::Kind::kBroadcast},
    {"reduce", CallInfo::Kind::kReduce},               {"allgather", CallInfo::Kind::kAllGather},
    {"reducescatter", CallInfo::Kind::kReduceScatter}, {"alltoall", CallInfo::Kind::kAllToAll},
};
constexpr Algorithm kAlgorithms[] = {Algorithm::kRing, Algorithm::kTree, Algorithm::kRecursiveDoubling,
                                     Algorithm::kOneShot, Algorithm::kPairwise, Algorithm::kHierarchical};

bool parseAlgorithm(const std::string& name, Algorithm* out) {
  for (Algorithm a : kAlgorithms) {
    if (name == algorithmName(a)) {
      *out = a;
      return true;
    }
  }
  return false;
}

size_t slot(CallInfo::Kind kind) { return static_cast<size_t>(kind); }
uint32_t bit(Algorithm a) { return 1u << static_cast<unsigned>(a); }

}  // namespace

bool AlgorithmSetting::allows(CallInfo::Kind kind, Algorithm algorithm) const {
  return (allowed[slot(kind)] & bit(algorithm)) != 0;
}

std::optional<Algorithm> AlgorithmSetting::forced(CallInfo::Kind kind) const {
  std::optional<Algorithm> only;
  for (Algorithm a : kAlgorithms) {
    if (!supports(kind, a) || !allows(kind, a)) continue;
    if (only) return std::nullopt;
    only = a;
  }
  return only;
}

const char* algorithmName(Algorithm algorithm) {
  switch (algorithm) {
    case Algorithm::kRing: return "ring";
    case Algorithm::kTree: return "tree";
    case Algorithm::kRecursiveDoubling: return "rd";
    case Algorithm::kOneShot: return "oneshot";
    case Algorithm::kPairwise: return "pairwise";
    case Algorithm::kHierarchical: return "hierarchical";
  }
  return "unknown";
}

const char* collectiveName(CallInfo::Kind kind) {
  for (const NamedKind& named : kCollectives) {
    if (named.kind == kind) return named.name;
  }
  return "";
}

bool supports(CallInfo::Kind kind, Algorithm algorithm) {
  switch (kind) {
    // Every collective has its one-shot form on the board (core/one_shot.h).
    case CallInfo::Kind::kAllReduce: return algorithm != Algorithm::kPairwise;  // hierarchical included
    case CallInfo::Kind::kBroadcast:
    case CallInfo::Kind::kReduce:
      return algorithm == Algorithm::kRing || algorithm == Algorithm::kTree || algorithm == Algorithm::kHierarchical ||
             algorithm == Algorithm::kOneShot;
    case CallInfo::Kind::kAllGather:
    case CallInfo::Kind::kReduceScatter: return algorithm == Algorithm::kRing || algorithm == Algorithm::kOneShot;
    case CallInfo::Kind::kAllToAll: return algorithm == Algorithm::kPairwise || algorithm == Algorithm::kOneShot;
    default: return false;
  }
}

Status parseAlgorithmSetting(const std::string& value, AlgorithmSetting* out) {
  // Per collective: the algorithms named positively (0: none named), and those excluded by
  // name for it or for every collective.
  std::array<uint32_t, 16> named{}, excluded{}, excludedEverywhere{};
  for (const std::string& item : env::splitList(value)) {
    size_t eq = item.find('=');
    std::string algoName = eq == std::string::npos ? item : item.substr(eq + 1);
    bool exclude = !algoName.empty() && algoName[0] == '^';
    if (exclude) algoName.erase(0, 1);
    Algorithm algorithm;
    if (!parseAlgorithm(algoName, &algorithm)) {
      return error(loomInvalidArgument,
                   "LOOM_ALGO=\"%s\": unknown algorithm \"%s\" (ring, tree, rd, oneshot, pairwise, hierarchical; ^ excludes "
                   "one)",
                   value.c_str(), algoName.c_str());
    }
    if (eq == std::string::npos) {
      std::array<uint32_t, 16>& target = exclude ? excludedEverywhere : named;
      // Applies to the collectives that have it; the others keep their own.
      for (const NamedKind& c : kCollectives) {
        if (supports(c.kind, algorithm)) target[slot(c.kind)] |= bit(algorithm);
      }
      continue;
    }
    std::string collective = item.substr(0, eq);
    const NamedKind* found = nullptr;
    for (const NamedKind& c : kCollectives) {
      if (collective == c.name) found = &c;
    }
    if (found == nullptr) {
      return error(loomInvalidArgument,
                   "LOOM_ALGO=\"%s\": unknown collective \"%s\" (allreduce, broadcast, reduce, allgather, "
                   "reducescatter, alltoall)",
                   value.c_str(), collective.c_str());
    }
    if (!supports(found->kind, algorithm)) {
      return error(loomInvalidArgument, "LOOM_ALGO=\"%s\": %s has no %s algorithm", value.c_str(), found->name,
                   algoName.c_str());
    }
    (exclude ? excluded : named)[slot(found->kind)] |= bit(algorithm);
  }
  AlgorithmSetting setting;
  for (const NamedKind& c : kCollectives) {
    size_t k = slot(c.kind);
    auto anyAllowed = [&] {
      for (Algorithm a : kAlgorithms) {
        if (supports(c.kind, a) && setting.allows(c.kind, a)) return true;
      }
      return false;
    };
    setting.allowed[k] = (named[k] != 0 ? named[k] : ~0u) & ~excluded[k];
    // "^ring" means "not ring where there is a choice": allgather keeps its only algorithm.
    setting.allowed[k] &= ~excludedEverywhere[k];
    if (!anyAllowed()) setting.allowed[k] = (named[k] != 0 ? named[k] : ~0u) & ~excluded[k];
    if (!anyAllowed()) {
      return error(loomInvalidArgument, "LOOM_ALGO=\"%s\" leaves %s no algorithm", value.c_str(), c.name);
    }
  }
  *out = setting;
  return Status::ok();
}

Status parseProtocolSetting(const std::string& value, ProtocolSetting* out) {
  uint32_t named = 0, excluded = 0;
  for (std::string item : env::splitList(value)) {
    const bool exclude = !item.empty() && item[0] == '^';
    if (exclude) item.erase(0, 1);
    uint32_t bit = 0;
    for (int p = 0; p < kNumProtocols; ++p) {
      if (item == protocolName(static_cast<Protocol>(p))) bit = 1u << p;
    }
    if (bit == 0) {
      return error(loomInvalidArgument, "LOOM_PROTO=\"%s\": unknown protocol \"%s\" (simple, streaming, ll; ^ excludes one)",
                   value.c_str(), item.c_str());
    }
    (exclude ? excluded : named) |= bit;
  }
  ProtocolSetting setting;
  setting.allowed = (named != 0 ? named : (1u << kNumProtocols) - 1) & ~excluded;
  if (setting.allowed == 0) return error(loomInvalidArgument, "LOOM_PROTO=\"%s\" leaves no protocol", value.c_str());
  *out = setting;
  return Status::ok();
}

namespace {

// One-shot needs the board, which exists only when every rank is on this host. The
// hierarchical algorithms run on host communicators (a device communicator's plans have not
// been run with them) across hosts: on one host they would be the ring under another name.
bool fits(Algorithm algorithm, const CallShape& shape, const CommProfile& profile) {
  if (algorithm == Algorithm::kHierarchical) return !profile.device && profile.nhosts > 1;
  return algorithm != Algorithm::kOneShot || (shape.oneHost && shape.bytes <= profile.oneShotMaxBytes);
}

// What the machine calibration timed of the board against the FIFO for this call's
// collective (CommProfile::oneShotTimedMax): past the largest size at which the board was as
// fast, it was slower; up to it, two ranks of one host, the shape it timed, take the board.
// LOOM_ALGO's forcing goes by the slot alone.
enum class BoardTiming { kUntimed, kSlower, kFaster };
BoardTiming boardTiming(const CallShape& shape, const CommProfile& profile) {
  const size_t timed = profile.oneShotTimedMax[static_cast<size_t>(shape.info.kind)];
  if (timed == 0 || !shape.oneHost) return BoardTiming::kUntimed;
  if (shape.bytes > timed) return BoardTiming::kSlower;
  return profile.nranks == 2 ? BoardTiming::kFaster : BoardTiming::kUntimed;
}

// `algorithm`'s prediction with the fastest protocol allowed; where no allowed protocol
// exists at this size (streaming below its threshold, low latency off a device), plain
// stores, which always do.
Choice predictWith(const CallShape& shape, Algorithm algorithm, const ProtocolSetting& protocols,
                   const CommProfile& profile) {
  const bool inPlace = shape.info.inPlace;
  Choice best{algorithm, Protocol::kSimple, std::numeric_limits<double>::infinity(), ""};
  for (int i = 0; i < kNumProtocols; ++i) {
    const Protocol protocol = static_cast<Protocol>(i);
    if (!protocols.allows(protocol)) continue;
    const double us = predictUs(shape.info.kind, algorithm, protocol, shape.bytes, profile, inPlace);
    if (us < best.predictedUs) {
      best.protocol = protocol;
      best.predictedUs = us;
    }
  }
  if (!std::isfinite(best.predictedUs)) {
    best.predictedUs = predictUs(shape.info.kind, algorithm, Protocol::kSimple, shape.bytes, profile, inPlace);
  }
  // A ring allreduce on one host takes each slice through all its steps in turn
  // (CollectiveArgs::sliceBySlice): in place, every line it writes it has just read, so
  // plain stores keep up with the streaming protocol's prediction and beat it (10% at 128
  // MiB): streaming stores would throw those lines out. LOOM_PROTO=streaming still forces it.
  const bool writesCached = inPlace && ringsSliceBySlice(profile) && algorithm == Algorithm::kRing &&
                            shape.info.kind == CallInfo::Kind::kAllReduce;
  if (writesCached && best.protocol == Protocol::kStreaming && protocols.allows(Protocol::kSimple)) {
    best.protocol = Protocol::kSimple;
  }
  return best;
}

// The shape whose predictions rank the algorithms. In place is each rank's own (NCCL lets one
// rank pass one buffer and another two), and ranks that ran different algorithms would
// exchange bytes that fit each other's counts and mean something else: unless the ranks
// agreed that all of them are in place, the algorithms are compared out of place, the same on
// every rank; the protocol, how this rank stores, then follows its own call.
CallShape comparedShape(const CallShape& shape) {
  CallShape compared = shape;
  compared.info.inPlace = shape.info.inPlace && shape.everyRankInPlace;
  return compared;
}

}  // namespace

Choice chooseAlgorithm(const CallShape& shape, const AlgorithmSetting& algorithms, const ProtocolSetting& protocols,
                       const CommProfile& profile) {
  const CallInfo::Kind kind = shape.info.kind;
  std::optional<Algorithm> forced = algorithms.forced(kind);
  if (forced && fits(*forced, shape, profile)) {
    Choice choice = predictWith(shape, *forced, protocols, profile);
    choice.why = AlgorithmSetting().forced(kind) ? "the only algorithm of this collective" : "forced by LOOM_ALGO";
    return choice;
  }
  // Two ranks of one host are the shape the machine calibration timed on the board and through
  // the FIFO: at the sizes it found the board as fast, the measurement decides. (The model
  // prices a call's latency; those timings, like a training loop's, are calls in a row, where
  // a broadcast's root runs ahead through the FIFO but not on the board.)
  const BoardTiming timing = boardTiming(shape, profile);
  if (timing == BoardTiming::kFaster && algorithms.allows(kind, Algorithm::kOneShot) &&
      fits(Algorithm::kOneShot, shape, profile)) {
    Choice choice = predictWith(shape, Algorithm::kOneShot, protocols, profile);
    choice.why = "timed faster than the FIFO at this size by the machine calibration";
    return choice;
  }
  const CallShape agreed = comparedShape(shape);
  // Allowed first; if LOOM_ALGO allows only what cannot run here (oneshot, hierarchical on a
  // device), any.
  for (bool onlyAllowed : {true, false}) {
    std::optional<Choice> best;
    for (Algorithm a : kAlgorithms) {
      if (!supports(kind, a) || !fits(a, shape, profile) || (onlyAllowed && !algorithms.allows(kind, a))) continue;
      if (a == Algorithm::kOneShot && timing == BoardTiming::kSlower) continue;
      Choice candidate = predictWith(agreed, a, protocols, profile);
      // Strictly faster: ties keep the enum order.
      if (!best || candidate.predictedUs < best->predictedUs) best = candidate;
    }
    if (!best) continue;
    Choice choice = predictWith(shape, best->algorithm, protocols, profile);
    choice.why = onlyAllowed ? "predicted fastest"
                             : "LOOM_ALGO's choice set aside: oneshot carries at most 32 KiB between ranks of one host "
                               "(an allreduce from LOOM_MAPPED_MIN_BYTES runs mapped), hierarchical runs on host "
                               "communicators across hosts";
    return choice;
  }
  // Unreachable for a collective: every one has an algorithm that always fits.
  return {Algorithm::kRing, Protocol::kSimple, 0, "no algorithm fits"};
}

std::string describePredictions(const CallShape& shape, const AlgorithmSetting& algorithms,
                                const ProtocolSetting& protocols, const CommProfile& profile) {
  std::vector<Choice> ranked;
  std::string cannot;
  const CallShape agreed = comparedShape(shape);
  for (Algorithm a : kAlgorithms) {
    if (!supports(shape.info.kind, a) || !algorithms.allows(shape.info.kind, a)) continue;
    Choice c = predictWith(agreed, a, protocols, profile);
    if (fits(a, shape, profile) && std::isfinite(c.predictedUs)) {
      ranked.push_back(c);
    } else {
      cannot += std::string(cannot.empty() ? "" : ", ") + algorithmName(a);
    }
  }
  std::stable_sort(ranked.begin(), ranked.end(),
                   [](const Choice& x, const Choice& y) { return x.predictedUs < y.predictedUs; });
  std::string text;
  char item[96];
  for (const Choice& c : ranked) {
    std::snprintf(item, sizeof item, "%s%s/%s %.1f us", text.empty() ? "" : ", ", algorithmName(c.algorithm),
                  protocolName(c.protocol), c.predictedUs);
    text += item;
  }
  if (!cannot.empty()) text += " (" + cannot + " cannot run here)";
  return text;
}

uint64_t ChoiceCache::keyOf(const CallInfo& call, size_t bytes, bool everyRankInPlace) {
  if (bytes >> 54 != 0) return 0;
  static_assert(static_cast<unsigned>(CallInfo::Kind::kAllToAll) < 1u << 7, "the collective takes bits 2-8");
  return uint64_t{1} << 63 | static_cast<uint64_t>(bytes) << 9 | static_cast<uint64_t>(call.kind) << 2 |
         (everyRankInPlace ? 2 : 0) | (call.inPlace ? 1 : 0);
}

bool ChoiceCache::find(uint64_t key, Choice* out) const {
  for (;;) {
    const uint64_t before = version_.load(std::memory_order_acquire);
    if (before & 1) {
      cpuRelax();
      continue;
    }
    // Acquire loads: a field a writer stored makes its odd version visible to the check
    // below (no fences, which ThreadSanitizer cannot follow; on x86 all of these are plain
    // loads and stores).
    bool hit = false;
    for (const Entry& e : entries_) {
      if (e.key.load(std::memory_order_acquire) != key) continue;
      const uint32_t method = e.method.load(std::memory_order_acquire);
      *out = {static_cast<Algorithm>(method >> 8), static_cast<Protocol>(method & 0xff),
              e.predictedUs.load(std::memory_order_acquire), e.why.load(std::memory_order_acquire)};
      hit = true;
      break;
    }
    // What was read counts only if no writer started meanwhile.
    if (version_.load(std::memory_order_relaxed) == before) return hit;
  }
}

void ChoiceCache::remember(uint64_t key, const Choice& choice) {
  std::lock_guard<SpinLock> lock(writer_);
  Entry& e = entries_[next_++ % entries_.size()];
  const uint64_t v = version_.load(std::memory_order_relaxed);
  version_.store(v + 1, std::memory_order_relaxed);
  // Release stores: a reader that sees any of them sees the odd version too.
  e.key.store(key, std::memory_order_release);
  e.method.store(static_cast<uint32_t>(choice.algorithm) << 8 | static_cast<uint32_t>(choice.protocol),
                 std::memory_order_release);
  e.predictedUs.store(choice.predictedUs, std::memory_order_release);
  e.why.store(choice.why, std::memory_order_release);
  version_.store(v + 2, std::memory_order_release);
}

}  // namespace loom
