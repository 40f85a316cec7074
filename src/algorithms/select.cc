#include "algorithms/select.h"

#include <vector>

#include "core/env.h"

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
                                     Algorithm::kOneShot, Algorithm::kPairwise};

// The largest message the one-shot board carries (transport/shm_board.h).
constexpr size_t kOneShotMaxBytes = 32 << 10;

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
  }
  return "unknown";
}

bool supports(CallInfo::Kind kind, Algorithm algorithm) {
  switch (kind) {
    case CallInfo::Kind::kAllReduce: return algorithm != Algorithm::kPairwise;
    case CallInfo::Kind::kBroadcast:
    case CallInfo::Kind::kReduce: return algorithm == Algorithm::kRing || algorithm == Algorithm::kTree;
    case CallInfo::Kind::kAllGather:
    case CallInfo::Kind::kReduceScatter: return algorithm == Algorithm::kRing;
    case CallInfo::Kind::kAllToAll: return algorithm == Algorithm::kPairwise;
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
                   "LOOM_ALGO=\"%s\": unknown algorithm \"%s\" (ring, tree, rd, oneshot, pairwise; ^ excludes one)",
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

namespace {

// The size rule's algorithms for a call, best first, and why the first.
struct Preference {
  std::vector<Algorithm> order;
  const char* why;
};

Preference preferred(const CallShape& shape) {
  using A = Algorithm;
  switch (shape.info.kind) {
    case CallInfo::Kind::kAllReduce:
      if (shape.oneHost && shape.nranks > 1 && shape.bytes <= kOneShotMaxBytes) {
        return {{A::kOneShot, A::kRecursiveDoubling, A::kTree, A::kRing}, "small message, every rank on this host"};
      }
      if (shape.bytes <= (64 << 10)) {
        return {{A::kRecursiveDoubling, A::kTree, A::kRing, A::kOneShot}, "small message: log2(n) latencies"};
      }
      return {{A::kRing, A::kTree, A::kRecursiveDoubling, A::kOneShot}, "large message: ring moves the least data per rank"};
    case CallInfo::Kind::kBroadcast:
    case CallInfo::Kind::kReduce:
      if (shape.bytes <= (256 << 10)) return {{A::kTree, A::kRing}, "small message: log2(n) hops"};
      return {{A::kRing, A::kTree}, "large message: pipelined chain"};
    case CallInfo::Kind::kAllToAll: return {{A::kPairwise}, "the only all-to-all"};
    default: return {{A::kRing}, "the only algorithm for this collective"};
  }
}

// One-shot carries small messages between ranks of one host only.
bool fits(Algorithm algorithm, const CallShape& shape) {
  return algorithm != Algorithm::kOneShot || (shape.oneHost && shape.bytes <= kOneShotMaxBytes);
}

}  // namespace

Choice chooseAlgorithm(const CallShape& shape, const AlgorithmSetting& setting) {
  const CallInfo::Kind kind = shape.info.kind;
  std::optional<Algorithm> forced = setting.forced(kind);
  if (forced && fits(*forced, shape)) return {*forced, "forced by LOOM_ALGO"};
  Preference rule = preferred(shape);
  for (Algorithm a : rule.order) {
    if (!setting.allows(kind, a) || !fits(a, shape)) continue;
    return {a, a == rule.order.front() ? rule.why : "the size rule's first choice is excluded by LOOM_ALGO"};
  }
  for (Algorithm a : rule.order) {
    if (fits(a, shape)) {
      return {a, "LOOM_ALGO's oneshot set aside: it carries at most 32 KiB between ranks of one host"};
    }
  }
  return {rule.order.front(), rule.why};
}

}  // namespace loom
