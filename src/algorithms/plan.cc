#include "algorithms/plan.h"

#include <cstdlib>
#include <map>
#include <new>
#include <tuple>

#include "core/status.h"

namespace loom {

const char* typeName(loomDataType_t type) {
  static const char* const kNames[loomNumTypes] = {"int8",    "uint8",   "int32",   "uint32",
                                                   "int64",   "uint64",  "float16", "float32",
                                                   "float64", "bfloat16"};
  return type >= 0 && type < loomNumTypes ? kNames[type] : "invalid type";
}

const char* opName(loomRedOp_t op) {
  static const char* const kNames[loomNumOps] = {"sum", "prod", "max", "min", "avg"};
  return op >= 0 && op < loomNumOps ? kNames[op] : "invalid op";
}

size_t typeSize(loomDataType_t type) {
  static const size_t kSizes[loomNumTypes] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2};
  return type >= 0 && type < loomNumTypes ? kSizes[type] : 0;
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

int Plan::add(const Step& step) {
  steps.push_back(step);
  callOf.push_back(static_cast<uint32_t>(calls.size() - 1));
  return static_cast<int>(steps.size() - 1);
}

void Plan::beginCall(const CallInfo& info) { calls.push_back(info); }

void Plan::Free::operator()(char* p) const { std::free(p); }

char* Plan::scratch(size_t bytes) {
  // malloc, not new char[](): scratch is written before it is read, and zeroing a large
  // buffer would cost as much as the collective's own pass over it.
  char* p = static_cast<char*>(std::malloc(bytes == 0 ? 1 : bytes));
  if (p == nullptr) throw std::bad_alloc();
  scratch_.emplace_back(p);
  return p;
}

void markHeaders(Plan& plan, size_t first, int linksPerPeer, bool everyStep) {
  std::map<std::tuple<int, int, bool>, bool> seen;
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
