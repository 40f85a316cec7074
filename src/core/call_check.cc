// LOOM_CHECK's exchange and comparison of the calls every rank is about to run (call_check.h).
#include "core/call_check.h"

#include <cstring>
#include <string>

#include "core/collective.h"
#include "core/communicator.h"
#include "core/executor.h"

namespace loom {
namespace {

// What a rank says about one launch: how many collectives, the first kShown of them, and
// a hash of all (a difference further on is reported without the detail).
constexpr size_t kShown = 4;
struct Fingerprint {
  uint64_t calls = 0;
  uint64_t hash = 0;
  uint8_t shown[kShown][kCallInfoWireBytes] = {};
};

Fingerprint fingerprintOf(const Plan& plan) {
  Fingerprint f;
  f.hash = 1469598103934665603ull;  // FNV-1a
  for (const CallInfo& c : plan.calls) {
    if (c.kind == CallInfo::Kind::kSend) continue;  // sends and receives differ by design
    uint8_t wire[kCallInfoWireBytes];
    encodeCallInfo(c, wire);
    for (uint8_t b : wire) f.hash = (f.hash ^ b) * 1099511628211ull;
    if (f.calls < kShown) std::memcpy(f.shown[f.calls], wire, kCallInfoWireBytes);
    ++f.calls;
  }
  return f;
}

std::string rankList(const std::vector<int>& ranks) {
  std::string out = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) out += (i ? ", " : "") + std::to_string(ranks[i]);
  return out;
}

std::string differingFields(const CallInfo& a, const CallInfo& b) {
  std::string out;
  auto add = [&](bool differs, const char* name) {
    if (differs) out += std::string(out.empty() ? "" : ", ") + name;
  };
  add(a.kind != b.kind, "collective");
  add(a.count != b.count, "count");
  add(a.type != b.type, "type");
  add(a.op != b.op, "op");
  add(a.root != b.root, "root");
  return out;
}

// The ranks' fingerprints, all gathered: OK when they agree, else the message that says how
// they differ (the same on every rank, since every rank sees all of them).
Status compare(const std::vector<Fingerprint>& all) {
  const Fingerprint& first = all[0];
  std::vector<int> same, other;
  for (size_t r = 0; r < all.size(); ++r)
    (std::memcmp(&all[r], &first, sizeof first) == 0 ? same : other).push_back(static_cast<int>(r));
  if (other.empty()) return Status::ok();
  const Fingerprint& odd = all[static_cast<size_t>(other[0])];
  std::vector<int> likeOdd;
  for (int r : other)
    if (std::memcmp(&all[static_cast<size_t>(r)], &odd, sizeof odd) == 0) likeOdd.push_back(r);
  const std::string who = rankList(same), whoElse = rankList(likeOdd);
  const std::string more = likeOdd.size() < other.size() ? " (and other ranks differ otherwise)" : "";
  if (first.calls != odd.calls) {
    return error(loomInvalidUsage, "LOOM_CHECK: %s launched %llu collective(s) together here, %s %llu%s", who.c_str(),
                 static_cast<unsigned long long>(first.calls), whoElse.c_str(),
                 static_cast<unsigned long long>(odd.calls), more.c_str());
  }
  for (size_t i = 0; i < kShown && i < first.calls; ++i) {
    CallInfo a, b;
    if (!decodeCallInfo(first.shown[i], &a) || !decodeCallInfo(odd.shown[i], &b) || a == b) continue;
    const std::string fields = differingFields(a, b);
    return error(loomInvalidUsage, "LOOM_CHECK: mismatched calls: %s called %s, %s called %s; the %s differ%s%s",
                 who.c_str(), a.describe().c_str(), whoElse.c_str(), b.describe().c_str(), fields.c_str(),
                 fields.find(',') == std::string::npos ? "s" : "", more.c_str());
  }
  return error(loomInvalidUsage,
               "LOOM_CHECK: mismatched calls: %s and %s launched %llu collectives together that differ after the "
               "first %zu%s",
               who.c_str(), whoElse.c_str(), static_cast<unsigned long long>(first.calls), kShown, more.c_str());
}

}  // namespace

Status checkCalls(Plans& plans) {
  Plans checks;
  std::vector<Fingerprint> mine;
  std::vector<std::vector<Fingerprint>> all;
  for (const Plan& p : plans) {
    if (!p.comm->config().check) continue;
    const Fingerprint f = fingerprintOf(p);
    // Sends and receives alone involve only their peers: no exchange with every rank.
    if (f.calls == 0) continue;
    if (mine.empty()) {
      // The check plans point into these; reserved only here, since calls unchecked (the
      // default) would notice two allocations.
      mine.reserve(plans.size());
      all.reserve(plans.size());
    }
    mine.push_back(f);
    all.emplace_back(static_cast<size_t>(p.comm->nranks()));
    CallInfo info;
    info.kind = CallInfo::Kind::kAllGather;
    info.count = sizeof(Fingerprint);
    // seq 0 (info's default): not announced on the one-shot board; the call headers still
    // check it.
    CollectiveCall gather{p.comm, info, &mine.back(), all.back().data()};
    checks.emplace_back();
    checks.back().comm = p.comm;
    appendCollective(checks.back(), gather);
  }
  if (checks.empty()) return Status::ok();
  LOOM_TRY(execute(checks));
  for (const std::vector<Fingerprint>& gathered : all) LOOM_TRY(compare(gathered));
  return Status::ok();
}

}  // namespace loom
