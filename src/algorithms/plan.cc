// Plans: steps added, call descriptions and their wire form for LOOM_CHECK, type and op names.
#include "algorithms/plan.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory_resource>
#include <new>
#include <tuple>

#include "algorithms/algorithm.h"

namespace loom {

const char* typeName(loomDataType_t type) {
  static const char* const kNames[loomNumTypes] = {"int8",    "uint8",    "int32",      "uint32",
                                                   "int64",   "uint64",   "float16",    "float32",
                                                   "float64", "bfloat16", "float8e4m3", "float8e5m2"};
  return type >= 0 && type < loomNumTypes ? kNames[type] : "invalid type";
}

const char* opName(loomRedOp_t op) {
  static const char* const kNames[loomNumOps] = {"sum", "prod", "max", "min", "avg"};
  return op >= 0 && op < loomNumOps ? kNames[op] : "invalid op";
}

std::string CallInfo::describeNumbered() const {
  return seq ? format("call #%llu %s", static_cast<unsigned long long>(seq), describe().c_str()) : describe();
}

std::string CallInfo::describe() const {
  switch (kind) {
    case Kind::kSend: return format("loomSend/loomRecv of %llu bytes", static_cast<unsigned long long>(count));
    case Kind::kBarrier: return "loomBarrier";
    case Kind::kAllReduce:
      return format("loomAllReduce(count %llu, %s, %s)", static_cast<unsigned long long>(count), typeName(type),
                    opName(op));
    case Kind::kBroadcast:
      return format("loomBroadcast(count %llu, %s, root %d)", static_cast<unsigned long long>(count),
                    typeName(type), root);
    case Kind::kReduce:
      return format("loomReduce(count %llu, %s, %s, root %d)", static_cast<unsigned long long>(count),
                    typeName(type), opName(op), root);
    case Kind::kAllGather:
      return format("loomAllGather(sendcount %llu, %s)", static_cast<unsigned long long>(count), typeName(type));
    case Kind::kReduceScatter:
      return format("loomReduceScatter(recvcount %llu, %s, %s)", static_cast<unsigned long long>(count),
                    typeName(type), opName(op));
    case Kind::kAllToAll:
      return format("loomAllToAll(count %llu, %s)", static_cast<unsigned long long>(count), typeName(type));
  }
  return format("an unknown call (kind %d)", static_cast<int>(kind));
}

namespace {
constexpr uint8_t kMagic[4] = {'L', 'M', 'C', '1'};
}  // namespace

// "LMC1", kind, type, op, algorithm, root (i32), 0 (u32), count (u64).
void encodeCallInfo(const CallInfo& info, uint8_t* out) {
  std::memset(out, 0, kCallInfoWireBytes);
  std::memcpy(out, kMagic, 4);
  out[4] = static_cast<uint8_t>(info.kind);
  out[5] = static_cast<uint8_t>(info.type);
  out[6] = static_cast<uint8_t>(info.op);
  out[7] = info.algorithm;
  int32_t root = info.root;
  std::memcpy(out + 8, &root, 4);
  uint64_t count = info.count;
  std::memcpy(out + 16, &count, 8);
}

bool decodeCallInfo(const uint8_t* in, CallInfo* out) {
  if (std::memcmp(in, kMagic, 4) != 0) return false;
  // Enum fields out of range are malformed (and no valid value of their type).
  if (in[4] < static_cast<uint8_t>(CallInfo::Kind::kSend) || in[4] > static_cast<uint8_t>(CallInfo::Kind::kAllToAll) ||
      in[5] >= loomNumTypes || in[6] >= loomNumOps || in[7] > kNumAlgorithms) {
    return false;
  }
  out->kind = static_cast<CallInfo::Kind>(in[4]);
  out->type = static_cast<loomDataType_t>(in[5]);
  out->op = static_cast<loomRedOp_t>(in[6]);
  out->algorithm = in[7];
  int32_t root;
  std::memcpy(&root, in + 8, 4);
  out->root = root;
  uint64_t count;
  std::memcpy(&count, in + 16, 8);
  out->count = count;
  return true;
}

Status checkCallInfo(const uint8_t* in, const CallInfo& expected, int peer) {
  CallInfo got;
  if (!decodeCallInfo(in, &got)) {
    return error(loomRemoteError, "rank %d sent bytes that are not a Loom message", peer);
  }
  if (got == expected) {
    if (got.algorithm == 0 || expected.algorithm == 0 || got.algorithm == expected.algorithm) return Status::ok();
    return error(loomInternalError,
                 "rank %d runs %s with %s while this rank runs it with %s: the ranks' tuners disagree, which Loom "
                 "must never let happen (please report it with the LOOM_DEBUG=INFO logs of both ranks)",
                 peer, expected.describe().c_str(), algorithmName(static_cast<Algorithm>(got.algorithm - 1)),
                 algorithmName(static_cast<Algorithm>(expected.algorithm - 1)));
  }
  if (got.kind == CallInfo::Kind::kSend && expected.kind == CallInfo::Kind::kSend) {
    return error(loomInvalidUsage, "mismatched calls: rank %d sent %llu bytes but this rank's loomRecv expects %llu",
                 peer, static_cast<unsigned long long>(got.count), static_cast<unsigned long long>(expected.count));
  }
  return error(loomInvalidUsage, "mismatched calls: rank %d called %s while this rank called %s", peer,
               got.describe().c_str(), expected.describe().c_str());
}

int Plan::add(const Step& step) {
  steps.push_back(step);
  callOf.push_back(static_cast<uint32_t>(calls.size() - 1));
  return static_cast<int>(steps.size() - 1);
}

void Plan::beginCall(const CallInfo& info) { calls.push_back(info); }

void Plan::Free::operator()(char* p) const { std::free(p); }

char* Plan::scratch(size_t bytes) {
  if (scratchSource != nullptr) return scratchSource->get(bytes);
  // malloc, not new char[](): scratch is written before it is read, and zeroing a large
  // buffer would cost as much as the collective's own pass over it.
  char* p = static_cast<char*>(std::malloc(bytes == 0 ? 1 : bytes));
  if (p == nullptr) throw std::bad_alloc();
  scratch_.emplace_back(p);
  return p;
}

std::pair<uint64_t, uint64_t> Plan::collectiveSeqs() const {
  uint64_t first = 0, last = 0;
  for (const CallInfo& call : calls) {
    if (call.seq == 0) continue;
    first = first == 0 ? call.seq : std::min(first, call.seq);
    last = std::max(last, call.seq);
  }
  return {first, last};
}

void markHeaders(Plan& plan, size_t first, int linksPerPeer, bool everyStep) {
  std::pmr::map<std::tuple<int, int, bool>, bool> seen(plan.memory());
  for (size_t i = first; i < plan.steps.size(); ++i) {
    Step& s = plan.steps[i];
    if (s.peer == Step::kNone) continue;
    bool send = s.kind == Step::Kind::kSend;
    bool& used = seen[std::make_tuple(s.peer, s.channel % linksPerPeer, send)];
    s.header = everyStep || !used;
    used = true;
  }
}

}  // namespace loom
