// Keeping the machine calibration on disk (calibration_cache.h).
#include "algorithms/calibration_cache.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>
#include <thread>

#include "algorithms/select.h"
#include "algorithms/tuning_file.h"
#include "base/env.h"
#include "base/log.h"
#include "loom_build_config.h"

namespace loom {
namespace {

// Changes whenever machine_calibration.cc measures or decides differently (2: the streaming
// copy it times stores as wide as the vectors; 3: past the cache where plain copies reach
// memory speed; 4: direct reads against the FIFO; 5: the shared-memory link and the one-shot
// board; 6: the board timed against the FIFO per collective; 9: direct reads from 32 KiB),
// so that older files are measured over.
constexpr int kMeasureRevision = 9;
constexpr const char* kKeyPrefix = "machine calibration: ";

std::string cpuModel() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  // x86 names its model; other machines at least their implementer and part.
  for (const char* field : {"model name", "CPU part"}) {
    in.clear();
    in.seekg(0);
    while (std::getline(in, line)) {
      const size_t colon = line.find(':');
      if (line.rfind(field, 0) == 0 && colon != std::string::npos) {
        const size_t begin = line.find_first_not_of(" \t", colon + 1);
        return begin == std::string::npos ? std::string("unknown") : line.substr(begin);
      }
    }
  }
  return "unknown";
}

// "2048/491520 KiB": a core's L2 and the L3, as the C library reads them (0 where unknown).
// Virtual machines often give every processor one generic model name ("Intel(R) Xeon(R)
// Processor"); the caches still tell apart hosts whose copies leave them at other sizes.
std::string cacheSizes() {
  auto kib = [](int name) { return std::to_string(std::max(0L, sysconf(name)) / 1024); };
  return kib(_SC_LEVEL2_CACHE_SIZE) + "/" + kib(_SC_LEVEL3_CACHE_SIZE) + " KiB";
}

// A sanitized or unoptimized build copies and reduces slower: its figures are not the
// machine's, and must not be what an optimized build reads.
std::string buildFlavour() {
#ifdef __OPTIMIZE__
  const std::string flavour = "optimized";
#else
  const std::string flavour = "unoptimized";
#endif
  return sanitizedBuild() ? flavour + "+sanitized" : flavour;
}

uint64_t fnv1a(const std::string& text) {
  uint64_t hash = 1469598103934665603ull;
  for (unsigned char c : text) hash = (hash ^ c) * 1099511628211ull;
  return hash;
}

// mkdir -p, private to the user.
Status makeDirectories(const std::string& dir) {
  for (size_t slash = dir.find('/', 1);; slash = dir.find('/', slash + 1)) {
    const std::string part = dir.substr(0, slash);
    if (mkdir(part.c_str(), 0700) != 0 && errno != EEXIST) {
      return error(loomSystemError, "cannot create %s (%s)", part.c_str(), std::strerror(errno));
    }
    if (slash == std::string::npos) return Status::ok();
  }
}

bool readFile(const std::string& path, std::string* text) {
  std::ifstream in(path);
  if (!in) return false;
  std::ostringstream all;
  all << in.rdbuf();
  *text = all.str();
  return !in.bad();
}

// The cache file's lines when it holds this key's every value (shm.direct_min_bytes too where
// `threads` >= 2, the link keys where `links`); a file for another key (an edit, or a hash
// collision) or none is false, quietly; a broken one is false with a warning.
bool readCached(const std::string& path, const std::string& key, int threads, bool links, std::string* lines) {
  std::string text;
  if (!readFile(path, &text)) return false;
  std::istringstream in(text);
  std::string header, keyLine;
  std::getline(in, header);
  std::getline(in, keyLine);
  if (keyLine != "# " + std::string(kKeyPrefix) + key) {
    LOOM_INFO("machine calibration: %s was written for another machine or build; measuring again", path.c_str());
    return false;
  }
  CommProfile profile = CommProfile::defaults(1, 1);
  std::vector<std::string> keys;
  DataPathSizes sizes;
  Status status = applyTuningText(text, path, &profile, &keys, &sizes);
  for (const std::string& wanted : machineCalibrationKeys(links)) {
    if (status.isOk() && std::find(keys.begin(), keys.end(), wanted) == keys.end()) {
      status = error(loomInvalidArgument, "%s: no %s", path.c_str(), wanted.c_str());
    }
  }
  if (status.isOk() && threads >= 2 && sizes.shmDirectMinBytes < 0) {
    status = error(loomInvalidArgument, "%s: no shm.direct_min_bytes", path.c_str());
  }
  if (!status.isOk()) {
    LOOM_WARN("machine calibration: %s; measuring again and replacing it", status.message().c_str());
    return false;
  }
  *lines = tuningText(profile, machineCalibrationKeys(links)) + dataPathText(sizes);
  return true;
}

// Writes through a file of this thread's own and a rename, so that a reader sees the old
// file or the whole new one, and ranks that measure at once each write whole files.
Status writeCached(const std::string& dir, const std::string& path, const CommProfile& profile,
                   const std::vector<std::string>& keys, const DataPathSizes& sizes, const std::string& comment) {
  LOOM_TRY(makeDirectories(dir));
  const std::string temporary = path + ".tmp." + std::to_string(getpid()) + "." +
                                std::to_string(std::hash<std::thread::id>()(std::this_thread::get_id()));
  Status saved = saveTuningFile(temporary, profile, "", keys, comment, sizes);
  if (saved.isOk() && std::rename(temporary.c_str(), path.c_str()) != 0) {
    saved = error(loomSystemError, "cannot rename %s to %s (%s)", temporary.c_str(), path.c_str(), std::strerror(errno));
  }
  if (!saved.isOk()) std::remove(temporary.c_str());
  return saved;
}

std::string seconds(double s) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f s", s);
  return text;
}

// "direct reads / the FIFO, us a transfer both ways: 256 KiB 40.1 / 38.2, ...; direct from 1024 KiB"
std::string describeDirectReads(const MachineFigures& figures) {
  if (!figures.directMeasured) return "direct reads not measured (" + figures.directNote + "): the FIFO";
  std::string text = "direct reads / the FIFO, us a transfer both ways:";
  char line[96];
  for (const DirectReadFigures::Size& s : figures.direct.sizes) {
    std::snprintf(line, sizeof line, "%s%zu KiB %.1f / %.1f", s.bytes == figures.direct.sizes[0].bytes ? " " : ", ",
                  s.bytes >> 10, s.directUs, s.fifoUs);
    text += line;
  }
  const size_t from = figures.direct.minBytes;
  return text + (from > 0 ? "; direct from " + std::to_string(from >> 10) + " KiB" : "; the FIFO at every size");
}

// "shared-memory exchange both ways, us: 8 B 1.52, 1 KiB 1.71, ...; one-shot 8 B allreduce 0.45 us; 0.09 s"
std::string describeLinks(const MachineFigures& figures) {
  if (!figures.linksMeasured) return "shared-memory links not measured (" + figures.linksNote + "): built in";
  std::string text = "shared-memory exchange both ways, us:";
  char line[96];
  for (const auto& [bytes, us] : figures.links.exchangeUs) {
    const bool kib = bytes >= 1024;
    std::snprintf(line, sizeof line, "%s%zu %s %.2f", bytes == figures.links.exchangeUs[0].first ? " " : ", ",
                  kib ? bytes >> 10 : bytes, kib ? "KiB" : "B", us);
    text += line;
  }
  std::snprintf(line, sizeof line, "; one-shot 8 B allreduce %.2f us; %.2f s", figures.links.oneShotUs,
                figures.links.seconds);
  text += line;
  // "board / FIFO, us a call: allreduce 1 KiB 0.61 / 1.31, ..., 32 KiB 7.00 / 4.94: the board to 8 KiB"
  text += "\nboard / FIFO, us a call:";
  for (const LinkFigures::BoardTiming& timing : figures.links.board) {
    text += std::string(timing.kind == figures.links.board[0].kind ? " " : "; ") + collectiveName(timing.kind);
    for (size_t i = 0; i < timing.bytes.size(); ++i) {
      std::snprintf(line, sizeof line, "%s %zu KiB %.2f / %.2f", i == 0 ? "" : ",", timing.bytes[i] >> 10,
                    timing.boardUs[i], timing.fifoUs[i]);
      text += line;
    }
    std::snprintf(line, sizeof line, ": the board to %zu B", boardTimedMax(timing));
    text += line;
  }
  return text;
}

}  // namespace

bool sanitizedBuild() {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  return true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
  return true;
#endif
#endif
  return false;
}

std::string machineCalibrationDir() {
  const std::optional<std::string> xdg = env::get("XDG_CACHE_HOME");
  if (xdg && (*xdg)[0] == '/') return *xdg + "/loom";
  const std::optional<std::string> home = env::get("HOME");
  if (home) return *home + "/.cache/loom";
  return "";
}

int calibrationThreadsFor(int ranksOnHost) {
  if (sanitizedBuild()) return 0;
  return static_cast<int>(std::max(1L, std::min<long>(ranksOnHost, sysconf(_SC_NPROCESSORS_ONLN))));
}

std::string machineCalibrationKey(int threads) {
  return "cpu=" + cpuModel() + "; caches=" + cacheSizes() + "; cpus=" + std::to_string(sysconf(_SC_NPROCESSORS_ONLN)) +
         "; threads=" + std::to_string(threads) + "; loom=" + LOOM_VERSION_STRING +
         "; measure=" + std::to_string(kMeasureRevision) + "; build=" + buildFlavour();
}

Status loadOrMeasureMachineCalibration(int threads, const std::string& cacheDir, MachineCalibration* out,
                                       size_t maxCopyBytes, const LinkMeasurer& measureLinks) {
  const std::string key = machineCalibrationKey(threads);
  const std::string& dir = cacheDir;
  char name[40];
  std::snprintf(name, sizeof name, "/machine-%016llx.txt", static_cast<unsigned long long>(fnv1a(key)));
  const std::string path = dir.empty() ? "" : dir + name;
  std::string lines;
  const bool links = threads >= 2 && measureLinks;
  if (!path.empty() && readCached(path, key, threads, links, &lines)) {
    *out = {lines, path};
    return Status::ok();
  }

  MachineFigures figures;
  LOOM_TRY(measureMachine(threads, maxCopyBytes, &figures, measureLinks));
  const std::vector<std::string> keys = machineCalibrationKeys(figures.linksMeasured);
  const CommProfile profile = applyMachineFigures(figures, CommProfile::defaults(1, 1));
  const DataPathSizes sizes = machineCalibrationSizes(figures);
  char line[256];
  std::snprintf(line, sizeof line,
                "measured in %s by %d thread(s) at once; GB/s per thread copying, plain / non-temporal stores:",
                seconds(figures.seconds).c_str(), threads);
  std::string details = line;
  for (const MachineFigures::Copy& copy : figures.copies) {
    std::snprintf(line, sizeof line, "%s%zu KiB %.1f / %.1f", copy.bytes == figures.copies[0].bytes ? " " : ", ",
                  copy.bytes >> 10, copy.plainGbps, copy.streamingGbps);
    details += line;
  }
  // Lines of their own in the file's comment; one log line.
  std::string more;
  if (threads >= 2) more += "\n" + describeDirectReads(figures);
  if (links) more += "\n" + describeLinks(figures);
  const std::string measured = "measured now in " + seconds(figures.seconds);
  const std::string comment = std::string(kKeyPrefix) + key + "\n" + details + more;
  // A link measurement that failed may not fail the next time: nothing is kept without it.
  Status cached = path.empty() ? error(loomSystemError, "no cache directory (neither XDG_CACHE_HOME nor HOME is set)")
                  : links && !figures.linksMeasured
                      ? error(loomSystemError, "the shared-memory links were not measured")
                      : writeCached(dir, path, profile, keys, sizes, comment);
  *out = {tuningText(profile, keys) + dataPathText(sizes),
          cached.isOk() ? path + " (" + measured + ")" : measured + ", not cached: " + cached.message()};
  std::string logged = more;
  for (size_t at = logged.find('\n'); at != std::string::npos; at = logged.find('\n', at)) logged.replace(at, 1, "; ");
  LOOM_INFO("machine calibration: %s: %s%s", out->source.c_str(), details.c_str(), logged.c_str());
  return Status::ok();
}

}  // namespace loom
