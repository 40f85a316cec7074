// Reading and writing the tuning file, and fitting its constants to measured times (tuning_file.h).
#include "algorithms/tuning_file.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>
#include <type_traits>

namespace loom {
namespace {

constexpr const char* kHeader = "# loom tuning file v1";
constexpr const char* kMachineKey = "machine";

// A constant the file carries: its key, where it lives in a profile, and what it may be.
enum class Kind {
  kLatency,    // µs, >= 0
  kBandwidth,  // GB/s, > 0
  kBytes,      // a whole number of bytes, >= 0
  kTimedBytes, // the same, where 0 means not measured: such a key is left out of a profile's
               // keys and text (a file written from a profile says nothing of it)
};

// Which communicators a constant is theirs: a device communicator's hop, copy and reduction
// are its plan kernel's, under keys of their own, so that one file can hold a machine's host
// and device figures; the network between hosts is the same sockets for both.
enum class Scope { kHost, kDevice, kBoth };

struct Key {
  const char* name;
  Kind kind;
  Scope scope;
  double (*get)(const CommProfile&);
  void (*set)(CommProfile*, double);
};

// One Key for a field of CommProfile; values travel as doubles (sizes below 2^53 exactly).
#define LOOM_TUNING_KEY(name, kind, scope, field)                                            \
  Key{name, kind, scope, [](const CommProfile& p) { return static_cast<double>(p.field); },  \
      [](CommProfile* p, double v) { p->field = static_cast<std::remove_reference_t<decltype(p->field)>>(v); }}

// CallInfo::Kind as an index of CommProfile::oneShotTimedMax.
constexpr size_t kAllReduce = static_cast<size_t>(CallInfo::Kind::kAllReduce);
constexpr size_t kBroadcast = static_cast<size_t>(CallInfo::Kind::kBroadcast);
constexpr size_t kReduce = static_cast<size_t>(CallInfo::Kind::kReduce);
constexpr size_t kAllGather = static_cast<size_t>(CallInfo::Kind::kAllGather);
constexpr size_t kReduceScatter = static_cast<size_t>(CallInfo::Kind::kReduceScatter);
constexpr size_t kAllToAll = static_cast<size_t>(CallInfo::Kind::kAllToAll);

const Key kKeys[] = {
    LOOM_TUNING_KEY("intra.latency_us", Kind::kLatency, Scope::kHost, intra.latencyUs),
    LOOM_TUNING_KEY("intra.gbps", Kind::kBandwidth, Scope::kHost, intra.gbps),
    LOOM_TUNING_KEY("inter.latency_us", Kind::kLatency, Scope::kBoth, inter.latencyUs),
    LOOM_TUNING_KEY("inter.gbps", Kind::kBandwidth, Scope::kBoth, inter.gbps),
    LOOM_TUNING_KEY("reduce.gbps", Kind::kBandwidth, Scope::kHost, reduceGbps),
    LOOM_TUNING_KEY("copy.gbps", Kind::kBandwidth, Scope::kHost, copyGbps),
    LOOM_TUNING_KEY("oneshot.latency_us", Kind::kLatency, Scope::kHost, oneShotLatencyUs),
    LOOM_TUNING_KEY("oneshot.max_bytes.allreduce", Kind::kTimedBytes, Scope::kHost, oneShotTimedMax[kAllReduce]),
    LOOM_TUNING_KEY("oneshot.max_bytes.broadcast", Kind::kTimedBytes, Scope::kHost, oneShotTimedMax[kBroadcast]),
    LOOM_TUNING_KEY("oneshot.max_bytes.reduce", Kind::kTimedBytes, Scope::kHost, oneShotTimedMax[kReduce]),
    LOOM_TUNING_KEY("oneshot.max_bytes.allgather", Kind::kTimedBytes, Scope::kHost, oneShotTimedMax[kAllGather]),
    LOOM_TUNING_KEY("oneshot.max_bytes.reducescatter", Kind::kTimedBytes, Scope::kHost,
                    oneShotTimedMax[kReduceScatter]),
    LOOM_TUNING_KEY("oneshot.max_bytes.alltoall", Kind::kTimedBytes, Scope::kHost, oneShotTimedMax[kAllToAll]),
    LOOM_TUNING_KEY("mem.gbps", Kind::kBandwidth, Scope::kHost, memGbps),
    LOOM_TUNING_KEY("streaming.gbps", Kind::kBandwidth, Scope::kHost, streamingGbps),
    LOOM_TUNING_KEY("streaming.min_bytes", Kind::kBytes, Scope::kHost, streamingMinBytes),
    LOOM_TUNING_KEY("direct.gbps", Kind::kBandwidth, Scope::kHost, directGbps),
    LOOM_TUNING_KEY("device.simple.latency_us", Kind::kLatency, Scope::kDevice, intra.latencyUs),
    LOOM_TUNING_KEY("device.simple.gbps", Kind::kBandwidth, Scope::kDevice, intra.gbps),
    LOOM_TUNING_KEY("device.ll.latency_us", Kind::kLatency, Scope::kDevice, lowLatency.latencyUs),
    LOOM_TUNING_KEY("device.ll.gbps", Kind::kBandwidth, Scope::kDevice, lowLatency.gbps),
    LOOM_TUNING_KEY("device.copy.gbps", Kind::kBandwidth, Scope::kDevice, copyGbps),
    LOOM_TUNING_KEY("device.reduce.gbps", Kind::kBandwidth, Scope::kDevice, reduceGbps),
};

// Names of earlier files (every key once written by loom-perf --calibrate), read as the keys
// that replaced them.
const std::pair<const char*, const char*> kOldNames[] = {
    {"ll.latency_us", "device.ll.latency_us"},
    {"ll.gbps", "device.ll.gbps"},
};

bool appliesTo(const Key& key, const CommProfile& profile) {
  return key.scope == Scope::kBoth || (key.scope == Scope::kDevice) == profile.device;
}

// Whether `profile` has a value for the key: one for it, and measured where it is timed.
bool holds(const Key& key, const CommProfile& profile) {
  return appliesTo(key, profile) && (key.kind != Kind::kTimedBytes || key.get(profile) != 0);
}

#undef LOOM_TUNING_KEY

// A data-path size the file carries (DataPathSizes); always Kind::kBytes.
struct SizeKey {
  const char* name;
  long long DataPathSizes::*field;
};

const SizeKey kSizeKeys[] = {
    {"chunk.bytes", &DataPathSizes::chunkBytes},
    {"shm.fifo_bytes", &DataPathSizes::shmFifoBytes},
    {"socket.sndbuf", &DataPathSizes::socketSendBuffer},
    {"shm.direct_min_bytes", &DataPathSizes::shmDirectMinBytes},
};

const Key* findKey(const std::string& name) {
  for (const auto& [old, now] : kOldNames) {
    if (name == old) return findKey(now);
  }
  for (const Key& key : kKeys) {
    if (name == key.name) return &key;
  }
  return nullptr;
}

const SizeKey* findSizeKey(const std::string& name) {
  for (const SizeKey& key : kSizeKeys) {
    if (name == key.name) return &key;
  }
  return nullptr;
}

// "intra.latency_us, ..., socket.sndbuf, machine", for the unknown-key message.
std::string knownKeys() {
  std::string list;
  for (const Key& key : kKeys) list += std::string(key.name) + ", ";
  for (const SizeKey& key : kSizeKeys) list += std::string(key.name) + ", ";
  return list + kMachineKey;
}

std::string trim(const std::string& text) {
  const char* space = " \t\r\n";
  const size_t begin = text.find_first_not_of(space);
  if (begin == std::string::npos) return std::string();
  return text.substr(begin, text.find_last_not_of(space) + 1 - begin);
}

// The whole of `text` as a finite number (from_chars: no locale, no leading '+').
bool parseNumber(const std::string& text, double* out) {
  const char* end = text.data() + text.size();
  double value = 0;
  auto [stop, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc() || stop != end || !std::isfinite(value)) return false;
  *out = value;
  return true;
}

// The fewest digits that read back as `value`.
std::string shortestText(double value) {
  char text[64];  // more than any double needs
  return std::string(text, std::to_chars(text, text + sizeof text, value).ptr);
}

// Applies line `number` of `path` to *profile, or to *sizes for a data-path size.
Status applyLine(const std::string& path, int number, const std::string& raw, CommProfile* profile,
                 std::vector<std::string>* keysRead, DataPathSizes* sizes) {
  const std::string line = trim(raw.substr(0, raw.find('#')));
  if (line.empty()) return Status::ok();
  const size_t eq = line.find('=');
  if (eq == std::string::npos) {
    return error(loomInvalidArgument, "tuning file %s:%d: \"%s\" is not key = value", path.c_str(), number,
                 line.c_str());
  }
  const std::string name = trim(line.substr(0, eq)), value = trim(line.substr(eq + 1));
  if (name == kMachineKey) return Status::ok();
  const Key* key = findKey(name);
  const SizeKey* sizeKey = findSizeKey(name);
  if (key == nullptr && sizeKey == nullptr) {
    return error(loomInvalidArgument, "tuning file %s:%d: unknown key \"%s\" (known: %s)", path.c_str(), number,
                 name.c_str(), knownKeys().c_str());
  }
  const Kind kind = key != nullptr ? key->kind : Kind::kBytes;
  double parsed = 0;
  if (!parseNumber(value, &parsed)) {
    return error(loomInvalidArgument, "tuning file %s:%d: %s = \"%s\" is not a number", path.c_str(), number,
                 name.c_str(), value.c_str());
  }
  if (kind == Kind::kBandwidth && parsed <= 0) {
    return error(loomInvalidArgument, "tuning file %s:%d: %s = %s: a bandwidth must be more than 0 GB/s",
                 path.c_str(), number, name.c_str(), value.c_str());
  }
  if (kind == Kind::kLatency && parsed < 0) {
    return error(loomInvalidArgument, "tuning file %s:%d: %s = %s: a latency cannot be negative", path.c_str(),
                 number, name.c_str(), value.c_str());
  }
  const bool bytes = kind == Kind::kBytes || kind == Kind::kTimedBytes;
  // 2^53: beyond it a double no longer holds every whole number.
  if (bytes && (parsed < 0 || parsed != std::floor(parsed) || parsed > 9007199254740992.0)) {
    return error(loomInvalidArgument, "tuning file %s:%d: %s = %s: expected a whole number of bytes", path.c_str(),
                 number, name.c_str(), value.c_str());
  }
  if (sizeKey != nullptr) {
    if (sizes != nullptr) sizes->*sizeKey->field = static_cast<long long>(parsed);
    return Status::ok();
  }
  // Checked like any key, set only where it applies.
  if (!appliesTo(*key, *profile)) return Status::ok();
  key->set(profile, parsed);
  if (keysRead != nullptr) keysRead->push_back(key->name);
  return Status::ok();
}

}  // namespace

Status applyTuningText(const std::string& text, const std::string& origin, CommProfile* inout,
                       std::vector<std::string>* keysRead, DataPathSizes* sizes) {
  // Applied to copies, so that a bad line leaves the caller's values as they were.
  CommProfile loaded = *inout;
  DataPathSizes loadedSizes = sizes != nullptr ? *sizes : DataPathSizes{};
  std::vector<std::string> read;
  std::istringstream in(text);
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    LOOM_TRY(applyLine(origin, number, line, &loaded, &read, &loadedSizes));
  }
  *inout = loaded;
  if (sizes != nullptr) *sizes = loadedSizes;
  if (keysRead != nullptr) *keysRead = std::move(read);
  return Status::ok();
}

Status loadTuningFile(const std::string& path, CommProfile* inout, std::vector<std::string>* keysRead,
                      DataPathSizes* sizes) {
  std::ifstream in(path);
  if (!in) {
    return error(loomInvalidArgument, "tuning file %s: cannot open it (%s)", path.c_str(), std::strerror(errno));
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return error(loomInvalidArgument, "tuning file %s: reading it failed", path.c_str());
  return applyTuningText(text.str(), path, inout, keysRead, sizes);
}

std::vector<std::string> tuningKeys(const CommProfile& profile) {
  std::vector<std::string> names;
  for (const Key& key : kKeys) {
    if (holds(key, profile)) names.push_back(key.name);
  }
  return names;
}

double tuningValue(const CommProfile& profile, const std::string& key) {
  const Key* found = findKey(key);
  return found == nullptr || !appliesTo(*found, profile) ? NAN : found->get(profile);
}

std::string tuningText(const CommProfile& profile, const std::vector<std::string>& keys) {
  std::string text;
  for (const Key& key : kKeys) {
    if (keys.empty() ? !holds(key, profile) : !appliesTo(key, profile)) continue;
    if (keys.empty() || std::find(keys.begin(), keys.end(), key.name) != keys.end()) {
      text += std::string(key.name) + " = " + shortestText(key.get(profile)) + "\n";
    }
  }
  return text;
}

std::string dataPathText(const DataPathSizes& sizes) {
  std::string text;
  for (const SizeKey& key : kSizeKeys) {
    if (sizes.*key.field >= 0) text += std::string(key.name) + " = " + std::to_string(sizes.*key.field) + "\n";
  }
  return text;
}

Status saveTuningFile(const std::string& path, const CommProfile& profile, const std::string& hostname,
                      const std::vector<std::string>& keys, const std::string& comment, const DataPathSizes& sizes) {
  std::ofstream out(path, std::ios::trunc);
  if (!out) return error(loomSystemError, "tuning file %s: cannot create it (%s)", path.c_str(), std::strerror(errno));
  out << kHeader << '\n';
  std::istringstream comments(comment);
  for (std::string line; std::getline(comments, line);) out << "# " << line << '\n';
  if (!hostname.empty()) out << kMachineKey << " = " << hostname << '\n';
  out << tuningText(profile, keys) << dataPathText(sizes);
  out.close();
  if (!out) return error(loomSystemError, "tuning file %s: writing it failed (%s)", path.c_str(), std::strerror(errno));
  return Status::ok();
}

Status fitLinkCost(const std::vector<std::pair<size_t, double>>& bytesAndUs, LinkCost* out) {
  const bool twoSizes = std::any_of(bytesAndUs.begin(), bytesAndUs.end(),
                                    [&](const auto& point) { return point.first != bytesAndUs.front().first; });
  if (!twoSizes) {
    return error(loomInvalidArgument,
                 "link fit: %zu point(s) at fewer than two distinct sizes cannot separate latency from bandwidth",
                 bytesAndUs.size());
  }
  double meanBytes = 0, meanUs = 0;
  for (const auto& [bytes, us] : bytesAndUs) {
    meanBytes += static_cast<double>(bytes);
    meanUs += us;
  }
  meanBytes /= static_cast<double>(bytesAndUs.size());
  meanUs /= static_cast<double>(bytesAndUs.size());
  // Least squares on centred sums (steadier than raw ones when sizes reach 1e9), and the
  // sums through the origin for the clamped fit.
  double sxx = 0, sxy = 0, xx = 0, xy = 0;
  for (const auto& [bytes, us] : bytesAndUs) {
    const double x = static_cast<double>(bytes);
    sxx += (x - meanBytes) * (x - meanBytes);
    sxy += (x - meanBytes) * (us - meanUs);
    xx += x * x;
    xy += x * us;
  }
  double usPerByte = sxy / sxx;
  double latencyUs = meanUs - usPerByte * meanBytes;
  if (latencyUs < 0) {
    // A latency cannot be negative: the best line with none goes through the origin.
    latencyUs = 0;
    usPerByte = xy / xx;
  }
  if (!(usPerByte > 0)) {
    return error(loomInvalidArgument, "link fit: the times do not grow with size (%g µs per MB), no bandwidth to fit",
                 usPerByte * 1e6);
  }
  *out = {latencyUs, 1.0 / (usPerByte * 1e3)};
  return Status::ok();
}

double oneShotLatencyFrom(double measuredUs, const CommProfile& p) {
  CommProfile noLatency = p;
  noLatency.oneShotLatencyUs = 0;
  const double rest = predictUs(CallInfo::Kind::kAllReduce, Algorithm::kOneShot, Protocol::kSimple, 8, noLatency);
  return std::max(0.0, measuredUs - rest);
}

}  // namespace loom
