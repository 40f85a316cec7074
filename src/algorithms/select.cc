#include "algorithms/select.h"

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

}  // namespace

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
  AlgorithmSetting setting;
  for (const std::string& item : env::splitList(value)) {
    size_t eq = item.find('=');
    std::string algoName = eq == std::string::npos ? item : item.substr(eq + 1);
    Algorithm algorithm;
    if (!parseAlgorithm(algoName, &algorithm)) {
      return error(loomInvalidArgument, "LOOM_ALGO=\"%s\": unknown algorithm \"%s\" (ring, tree, rd, oneshot, pairwise)",
                   value.c_str(), algoName.c_str());
    }
    if (eq == std::string::npos) {
      for (const NamedKind& c : kCollectives) {
        if (supports(c.kind, algorithm)) setting.forced[slot(c.kind)] = algorithm;
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
    setting.forced[slot(found->kind)] = algorithm;
  }
  *out = setting;
  return Status::ok();
}

Choice chooseAlgorithm(const CallShape& shape, const AlgorithmSetting& setting) {
  const CallInfo::Kind kind = shape.info.kind;
  if (std::optional<Algorithm> forced = setting.forced[slot(kind)]) {
    bool fits = *forced != Algorithm::kOneShot || (shape.oneHost && shape.bytes <= kOneShotMaxBytes);
    if (fits) return {*forced, "forced by LOOM_ALGO"};
    Choice fallback = chooseAlgorithm(shape, AlgorithmSetting{});
    fallback.why = "LOOM_ALGO's oneshot set aside: it carries at most 32 KiB between ranks of one host";
    return fallback;
  }
  switch (kind) {
    case CallInfo::Kind::kAllReduce:
      if (shape.oneHost && shape.nranks > 1 && shape.bytes <= kOneShotMaxBytes) {
        return {Algorithm::kOneShot, "small message, every rank on this host"};
      }
      if (shape.bytes <= (64 << 10)) return {Algorithm::kRecursiveDoubling, "small message: log2(n) latencies"};
      return {Algorithm::kRing, "large message: ring moves the least data per rank"};
    case CallInfo::Kind::kBroadcast:
    case CallInfo::Kind::kReduce:
      if (shape.bytes <= (256 << 10)) return {Algorithm::kTree, "small message: log2(n) hops"};
      return {Algorithm::kRing, "large message: pipelined chain"};
    case CallInfo::Kind::kAllToAll: return {Algorithm::kPairwise, "the only all-to-all"};
    default: return {Algorithm::kRing, "the only algorithm for this collective"};
  }
}

}  // namespace loom
