// Reading and writing the tuning file, and fitting its constants to measured times (tuning_file.h).
#include "algorithms/tuning_file.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>

namespace loom {
namespace {

constexpr const char* kHeader = "# loom tuning file v1";
constexpr const char* kMachineKey = "machine";

// A constant the file carries: its key, where it lives in a profile, and what it may be.
struct Key {
  const char* name;
  double* (*field)(CommProfile*);
  bool bandwidth;  // must be > 0; otherwise a latency, >= 0
};

const Key kKeys[] = {
    {"intra.latency_us", [](CommProfile* p) { return &p->intra.latencyUs; }, false},
    {"intra.gbps", [](CommProfile* p) { return &p->intra.gbps; }, true},
    {"inter.latency_us", [](CommProfile* p) { return &p->inter.latencyUs; }, false},
    {"inter.gbps", [](CommProfile* p) { return &p->inter.gbps; }, true},
    {"reduce.gbps", [](CommProfile* p) { return &p->reduceGbps; }, true},
    {"copy.gbps", [](CommProfile* p) { return &p->copyGbps; }, true},
    {"oneshot.latency_us", [](CommProfile* p) { return &p->oneShotLatencyUs; }, false},
    {"mem.gbps", [](CommProfile* p) { return &p->memGbps; }, true},
    {"streaming.gbps", [](CommProfile* p) { return &p->streamingGbps; }, true},
    {"direct.gbps", [](CommProfile* p) { return &p->directGbps; }, true},
    {"ll.latency_us", [](CommProfile* p) { return &p->lowLatency.latencyUs; }, false},
    {"ll.gbps", [](CommProfile* p) { return &p->lowLatency.gbps; }, true},
};

const Key* findKey(const std::string& name) {
  for (const Key& key : kKeys) {
    if (name == key.name) return &key;
  }
  return nullptr;
}

// "intra.latency_us, ..., machine", for the unknown-key message.
std::string knownKeys() {
  std::string list;
  for (const Key& key : kKeys) list += std::string(key.name) + ", ";
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

// Applies line `number` of `path` to *profile.
Status applyLine(const std::string& path, int number, const std::string& raw, CommProfile* profile) {
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
  if (key == nullptr) {
    return error(loomInvalidArgument, "tuning file %s:%d: unknown key \"%s\" (known: %s)", path.c_str(), number,
                 name.c_str(), knownKeys().c_str());
  }
  double parsed = 0;
  if (!parseNumber(value, &parsed)) {
    return error(loomInvalidArgument, "tuning file %s:%d: %s = \"%s\" is not a number", path.c_str(), number,
                 name.c_str(), value.c_str());
  }
  if (key->bandwidth && parsed <= 0) {
    return error(loomInvalidArgument, "tuning file %s:%d: %s = %s: a bandwidth must be more than 0 GB/s",
                 path.c_str(), number, name.c_str(), value.c_str());
  }
  if (!key->bandwidth && parsed < 0) {
    return error(loomInvalidArgument, "tuning file %s:%d: %s = %s: a latency cannot be negative", path.c_str(),
                 number, name.c_str(), value.c_str());
  }
  *key->field(profile) = parsed;
  return Status::ok();
}

}  // namespace

Status loadTuningFile(const std::string& path, CommProfile* inout) {
  std::ifstream in(path);
  if (!in) {
    return error(loomInvalidArgument, "tuning file %s: cannot open it (%s)", path.c_str(), std::strerror(errno));
  }
  // Read into a copy, so that a bad line leaves the caller's profile as it was.
  CommProfile loaded = *inout;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) LOOM_TRY(applyLine(path, number, line, &loaded));
  if (in.bad()) return error(loomInvalidArgument, "tuning file %s: reading it failed", path.c_str());
  *inout = loaded;
  return Status::ok();
}

std::string tuningText(const CommProfile& profile) {
  CommProfile values = profile;  // Key::field takes a mutable profile
  std::string text;
  for (const Key& key : kKeys) text += std::string(key.name) + " = " + shortestText(*key.field(&values)) + "\n";
  return text;
}

Status saveTuningFile(const std::string& path, const CommProfile& profile, const std::string& hostname) {
  std::ofstream out(path, std::ios::trunc);
  if (!out) return error(loomSystemError, "tuning file %s: cannot create it (%s)", path.c_str(), std::strerror(errno));
  out << kHeader << '\n';
  if (!hostname.empty()) out << kMachineKey << " = " << hostname << '\n';
  out << tuningText(profile);
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

}  // namespace loom
