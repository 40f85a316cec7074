// The machine calibration (algorithms/machine_calibration.h) and its cache
// (algorithms/calibration_cache.h): what it measures, and when it measures again.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "algorithms/calibration_cache.h"
#include "algorithms/machine_calibration.h"
#include "algorithms/tuning_file.h"
#include "common/matrix_scale.h"
#include "common/sanitizer.h"

namespace {

using loom::CallInfo;
using loom::CommProfile;
using loom::MachineCalibration;
using loom::MachineFigures;
using loom::Status;

// Small copies keep the cache tests quick (and bearable under TSan); the size ladder and the
// decision are the same.
constexpr size_t kSmallCopies = size_t{4} << 20;

bool isLadderSize(size_t bytes, size_t maxBytes) {
  for (size_t size = size_t{512} << 10; size <= maxBytes; size *= 2) {
    if (bytes == size) return true;
  }
  return false;
}

TEST(MachineCalibration, MeasuresEveryFigureOnOneAndTwoThreads) {
  // The sanitizer runs (LOOM_TEST_QUICK=1) stop the size ladder at 4 MiB.
  const size_t maxCopy =
      loomtest::matrixScale() == loomtest::MatrixScale::kQuick ? kSmallCopies : loom::kCalibrationMaxCopyBytes;
  for (int threads : {1, 2}) {
    MachineFigures figures;
    Status status = loom::measureMachine(threads, maxCopy, &figures);
    ASSERT_TRUE(status.isOk()) << status.message();
    std::printf("%d thread(s): copy %.1f GB/s, reduce %.1f GB/s, streaming from %zu B (%.2fx at %zu MiB), %.2f s\n",
                threads, figures.copyGbps, figures.reduceGbps, figures.streamingMinBytes, figures.streamingSpeedup,
                figures.maxBytes >> 20, figures.seconds);
    EXPECT_EQ(figures.threads, threads);
    EXPECT_GT(figures.copyGbps, 0);
    EXPECT_GT(figures.reduceGbps, 0);
    EXPECT_GT(figures.streamingSpeedup, 0);
    EXPECT_EQ(figures.maxBytes, maxCopy);
    // Either never, or one of the sizes measured.
    EXPECT_TRUE(figures.streamingMinBytes == 0 || isLadderSize(figures.streamingMinBytes, figures.maxBytes))
        << figures.streamingMinBytes;
    // The profile it makes: the keys it names, streaming scaled from mem.gbps.
    const CommProfile base = CommProfile::defaults(2, 1);
    const CommProfile p = loom::applyMachineFigures(figures, base);
    // Rounded to three significant digits.
    EXPECT_NEAR(p.copyGbps, figures.copyGbps, figures.copyGbps * 0.005);
    EXPECT_NEAR(p.reduceGbps, figures.reduceGbps, figures.reduceGbps * 0.005);
    EXPECT_EQ(p.streamingMinBytes, figures.streamingMinBytes);
    EXPECT_NEAR(p.streamingGbps, base.memGbps * figures.streamingSpeedup, p.streamingGbps * 0.005);
    EXPECT_EQ(p.intra.gbps, base.intra.gbps);
    // Two threads or more also say how processes read each other's large sends.
    const long long direct = loom::machineCalibrationSizes(figures).shmDirectMinBytes;
    if (threads == 1) {
      EXPECT_EQ(direct, -1);
      EXPECT_FALSE(figures.directMeasured);
    } else if (figures.directMeasured) {
      // 32, 64, 128 and 256 KiB, 1 and 4 MiB.
      ASSERT_EQ(figures.direct.sizes.size(), 6u);
      EXPECT_EQ(figures.direct.sizes.front().bytes, size_t{32} << 10);
      for (const auto& s : figures.direct.sizes) {
        std::printf("  direct reads %zu KiB: %.1f us, the FIFO %.1f us\n", s.bytes >> 10, s.directUs, s.fifoUs);
        EXPECT_GT(s.directUs, 0);
        EXPECT_GT(s.fifoUs, 0);
      }
      EXPECT_EQ(direct, static_cast<long long>(figures.direct.minBytes));
      EXPECT_EQ(figures.direct.minBytes, loom::directReadMinBytes(figures.direct.sizes));
    } else {
      std::printf("  direct reads not measured: %s\n", figures.directNote.c_str());
      EXPECT_FALSE(figures.directNote.empty());
      EXPECT_EQ(direct, 0);  // the FIFO
    }
  }
}

// Direct reads from the smallest size from which they take at most 0.97 of the FIFO's time at
// every larger size too; the FIFO where they do not win at the largest.
TEST(MachineCalibration, DirectReadsFromWhereTheyWinForGood) {
  using Size = loom::DirectReadFigures::Size;
  constexpr size_t KiB = 1024;
  // The Intel Xeon VM (docs/RESULTS.md): the single copy wins at every size.
  EXPECT_EQ(loom::directReadMinBytes({{256 * KiB, 36.1, 26.2}, {1024 * KiB, 144.4, 107.1}, {4096 * KiB, 691.9, 446.5}}),
            256 * KiB);
  // The FIFO faster at the smallest size, a tie in between: from where the wins hold.
  EXPECT_EQ(loom::directReadMinBytes({{256 * KiB, 30, 40}, {1024 * KiB, 100, 98}, {4096 * KiB, 700, 500}}),
            4096 * KiB);
  // A win at a small size alone does not count.
  EXPECT_EQ(loom::directReadMinBytes({{256 * KiB, 40, 30}, {1024 * KiB, 100, 120}, {4096 * KiB, 700, 500}}),
            4096 * KiB);
  // The FIFO faster at the largest: never.
  EXPECT_EQ(loom::directReadMinBytes({{256 * KiB, 40, 30}, {1024 * KiB, 100, 90}, {4096 * KiB, 500, 700}}), 0u);
  EXPECT_EQ(loom::directReadMinBytes(std::vector<Size>{}), 0u);
}

// Copies of 512 KiB to 64 MiB per thread, plain and non-temporal GB/s from a ladder.
std::vector<MachineFigures::Copy> ladder(const std::vector<double>& plain, const std::vector<double>& streaming) {
  std::vector<MachineFigures::Copy> copies;
  for (size_t i = 0; i < plain.size(); ++i) copies.push_back({(size_t{512} << 10) << i, plain[i], streaming[i]});
  return copies;
}

TEST(MachineCalibration, PastTheCacheWherePlainCopiesReachMemorySpeedOrStreamingWins) {
  constexpr size_t MiB = size_t{1} << 20;
  // The AMD EPYC VM (docs/RESULTS.md, "The machine calibration on the AMD EPYC VM"): both
  // rules say 16 MiB (8 MiB's plain copies are still twice the memory's speed).
  EXPECT_EQ(loom::pastCacheBytes(
                ladder({44, 35, 40, 43, 14, 9.4, 8.0, 7.5}, {12.7, 13.5, 13.2, 13.3, 13.0, 12.5, 12.3, 12.1})),
            16 * MiB);
  // The Intel Xeon VM (2 MiB L2 a core): plain copies reach memory speed from 2 MiB, and its
  // non-temporal stores never win a lone copy (they do inside a mapped allreduce).
  EXPECT_EQ(loom::pastCacheBytes(
                ladder({31.6, 19.3, 10.0, 10.0, 8.7, 6.0, 5.2, 7.4}, {5.2, 5.0, 5.7, 6.4, 6.4, 6.7, 6.7, 6.5})),
            2 * MiB);
  // A size in between that runs fast again is still in the cache.
  EXPECT_EQ(loom::pastCacheBytes(ladder({30, 10, 10, 20, 10, 10, 10, 10}, {5, 5, 5, 5, 5, 5, 5, 5})), 8 * MiB);
  // Non-temporal stores winning from a smaller size decide.
  EXPECT_EQ(loom::pastCacheBytes(ladder({40, 40, 40, 20, 9, 8, 8, 8}, {10, 10, 10, 21, 10, 9, 9, 9})), 4 * MiB);
  // No cache to leave (every size within 2x of the largest): only streaming can say.
  EXPECT_EQ(loom::pastCacheBytes(ladder({15, 12, 11, 10, 10, 10, 10, 10}, {8, 8, 8, 8, 8, 8, 8, 8})), 0u);
  EXPECT_EQ(loom::pastCacheBytes(ladder({15, 12, 11, 10, 10, 10, 10, 10}, {8, 8, 8, 8, 11, 11, 11, 11})), 8 * MiB);
  EXPECT_EQ(loom::pastCacheBytes({}), 0u);
}

TEST(MachineCalibration, ManyThreadsShareTheBufferBudget) {
  MachineFigures figures;
  Status status = loom::measureMachine(8, loom::kCalibrationMaxCopyBytes, &figures);
  ASSERT_TRUE(status.isOk()) << status.message();
  EXPECT_EQ(figures.maxBytes, size_t{16} << 20);  // 256 MiB over 8 threads' two buffers
  EXPECT_EQ(figures.threads, 8);

  EXPECT_EQ(loom::measureMachine(0, kSmallCopies, &figures).code(), loomInvalidArgument);
  EXPECT_EQ(loom::measureMachine(1, 4096, &figures).code(), loomInvalidArgument);
}

// A link measurer that reports a known line: 1.5 µs + bytes / (10 GB/s), and a 0.6 µs one-shot
// allreduce; `calls` counts its calls.
loom::LinkMeasurer knownLinks(int* calls) {
  return [calls](loom::LinkFigures* out) {
    ++*calls;
    out->exchangeUs.clear();
    for (size_t bytes : {size_t{8}, size_t{1} << 10, size_t{32} << 10, size_t{256} << 10}) {
      out->exchangeUs.emplace_back(bytes, 1.5 + static_cast<double>(bytes) / 1e4);
    }
    out->oneShotUs = 0.6;
    // The allreduce's board as fast as the FIFO up to 8 KiB, the broadcast's slower from 1 KiB.
    out->board = {{CallInfo::Kind::kAllReduce, {1024, 8192, 32768}, {1, 2, 9}, {2, 2, 5}},
                  {CallInfo::Kind::kBroadcast, {1024, 8192, 32768}, {3, 4, 9}, {2, 3, 5}}};
    out->seconds = 0.01;
    return Status::ok();
  };
}

// The board's limit: the largest size it was at least as fast at (ties are the board's), a
// loss below that notwithstanding; half the smallest size where it lost at every one.
TEST(MachineCalibration, TheBoardGoesUpToItsLastWin) {
  using Timing = loom::LinkFigures::BoardTiming;
  const std::vector<size_t> bytes = {1024, 2048, 4096};
  EXPECT_EQ(loom::boardTimedMax(Timing{CallInfo::Kind::kReduce, bytes, {1, 2, 3}, {2, 3, 4}}), 4096u);
  EXPECT_EQ(loom::boardTimedMax(Timing{CallInfo::Kind::kReduce, bytes, {1, 3, 3}, {2, 3, 2}}), 2048u);
  EXPECT_EQ(loom::boardTimedMax(Timing{CallInfo::Kind::kReduce, bytes, {1, 4, 5}, {2, 3, 4}}), 1024u);
  EXPECT_EQ(loom::boardTimedMax(Timing{CallInfo::Kind::kReduce, bytes, {1, 4, 3}, {2, 3, 4}}), 4096u);
  EXPECT_EQ(loom::boardTimedMax(Timing{CallInfo::Kind::kReduce, bytes, {3, 4, 5}, {2, 3, 4}}), 512u);
}

// With two threads the link keys are the line fitted to what the measurer reports, the
// one-shot latency its allreduce less the model's copy and fold of 8 B;
// with one thread there is no link to measure.
TEST(MachineCalibration, LinkKeysAreTheMeasuredLine) {
  int calls = 0;
  MachineFigures figures;
  Status status = loom::measureMachine(2, kSmallCopies, &figures, knownLinks(&calls));
  ASSERT_TRUE(status.isOk()) << status.message();
  EXPECT_EQ(calls, 1);
  ASSERT_TRUE(figures.linksMeasured) << figures.linksNote;
  const CommProfile base = CommProfile::defaults(2, 1);
  const CommProfile p = loom::applyMachineFigures(figures, base);
  EXPECT_DOUBLE_EQ(p.intra.latencyUs, 1.5);
  EXPECT_DOUBLE_EQ(p.intra.gbps, 10);
  // Less the copy and fold of 8 B between two ranks at this build's measured kernel speeds
  // (nanoseconds in an optimized build, 0.02 us under ASan, 0.18 under TSan).
  CommProfile pair = base;
  pair.intra = p.intra;
  pair.copyGbps = p.copyGbps;
  pair.reduceGbps = p.reduceGbps;
  EXPECT_NEAR(p.oneShotLatencyUs, loom::oneShotLatencyFrom(0.6, pair), 0.005 * 0.6);
  EXPECT_LT(p.oneShotLatencyUs, 0.6);
  EXPECT_EQ(p.inter.latencyUs, base.inter.latencyUs);  // not the machine's to measure
  EXPECT_EQ(p.oneShotTimedMax[static_cast<size_t>(CallInfo::Kind::kAllReduce)], 8192u);
  EXPECT_EQ(p.oneShotTimedMax[static_cast<size_t>(CallInfo::Kind::kBroadcast)], 512u);
  EXPECT_EQ(p.oneShotTimedMax[static_cast<size_t>(CallInfo::Kind::kReduce)], 0u);  // not timed

  ASSERT_TRUE(loom::measureMachine(1, kSmallCopies, &figures, knownLinks(&calls)).isOk());
  EXPECT_EQ(calls, 1);
  EXPECT_FALSE(figures.linksMeasured);
  EXPECT_EQ(loom::applyMachineFigures(figures, base).intra.latencyUs, base.intra.latencyUs);
}

// A measurer that fails, or reports too little to fit a line, leaves the link keys built in
// and says why.
TEST(MachineCalibration, LinksThatCannotBeMeasuredStayBuiltIn) {
  const CommProfile base = CommProfile::defaults(2, 1);
  MachineFigures figures;
  auto failing = [](loom::LinkFigures*) { return loom::error(loomSystemError, "no shared memory here"); };
  ASSERT_TRUE(loom::measureMachine(2, kSmallCopies, &figures, failing).isOk());
  EXPECT_FALSE(figures.linksMeasured);
  EXPECT_EQ(figures.linksNote, "no shared memory here");
  CommProfile p = loom::applyMachineFigures(figures, base);
  EXPECT_EQ(p.intra.latencyUs, base.intra.latencyUs);
  EXPECT_EQ(p.intra.gbps, base.intra.gbps);
  EXPECT_EQ(p.oneShotLatencyUs, base.oneShotLatencyUs);

  auto oneSize = [](loom::LinkFigures* out) {
    out->exchangeUs = {{8, 1.0}, {8, 1.1}};
    out->oneShotUs = 0.5;
    return Status::ok();
  };
  ASSERT_TRUE(loom::measureMachine(2, kSmallCopies, &figures, oneSize).isOk());
  EXPECT_FALSE(figures.linksMeasured);
  EXPECT_NE(figures.linksNote.find("fewer than two distinct sizes"), std::string::npos) << figures.linksNote;
  EXPECT_EQ(loom::applyMachineFigures(figures, base).intra.gbps, base.intra.gbps);
}

// A private cache directory, removed at the end.
struct CacheDir {
  std::string path;
  CacheDir() {
    char name[] = "/tmp/loom-calibration-XXXXXX";
    path = ::mkdtemp(name) ? name : "";
  }
  ~CacheDir() { std::system(("rm -rf " + path).c_str()); }
  // Where the calibration for `threads` lives: the one machine-*.txt there.
  std::string file() const {
    std::string found;
    FILE* ls = ::popen(("ls " + path + "/loom/machine-*.txt 2>/dev/null").c_str(), "r");
    char line[512];
    while (ls != nullptr && std::fgets(line, sizeof line, ls) != nullptr) found += line;
    if (ls != nullptr) ::pclose(ls);
    if (!found.empty() && found.back() == '\n') found.pop_back();
    return found;
  }
};

std::string readFile(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

void writeFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
}

// `text` with the line of `key` set to `value`.
std::string withValue(std::string text, const std::string& key, const std::string& value) {
  const size_t at = text.find("\n" + key + " = ");
  if (at == std::string::npos) {
    ADD_FAILURE() << "no " << key << " in " << text;
    return text;
  }
  const size_t end = text.find('\n', at + 1);
  return text.replace(at + 1, end - at - 1, key + " = " + value);
}

// The cache's logic runs in one thread (MachineCalibration.* give TSan the calibration's
// threads to watch).
constexpr const char* kCacheIsOneThread = "the calibration cache is file logic in one thread";

MachineCalibration calibrate(const std::string& dir) {
  MachineCalibration calibration;
  Status status = loom::loadOrMeasureMachineCalibration(1, dir, &calibration, kSmallCopies);
  EXPECT_TRUE(status.isOk()) << status.message();
  return calibration;
}

TEST(CalibrationCache, MeasuresOnceThenReadsTheFile) {
  SKIP_UNDER_TSAN(kCacheIsOneThread);
  CacheDir cache;
  ASSERT_FALSE(cache.path.empty());
  const std::string dir = cache.path + "/loom";  // made by the calibration
  const MachineCalibration first = calibrate(dir);
  const std::string file = cache.file();
  ASSERT_FALSE(file.empty());
  EXPECT_EQ(first.source.rfind(file + " (measured now in ", 0), 0u) << first.source;
  const std::string text = readFile(file);
  EXPECT_EQ(text.rfind("# loom tuning file v1\n# machine calibration: " + loom::machineCalibrationKey(1) + "\n", 0), 0u)
      << text;
  // The file is a tuning file: LOOM_TUNING_FILE could load it.
  CommProfile loaded = CommProfile::defaults(2, 1);
  std::vector<std::string> keys;
  Status status = loom::loadTuningFile(file, &loaded, &keys);
  ASSERT_TRUE(status.isOk()) << status.message();
  EXPECT_EQ(keys, loom::machineCalibrationKeys());

  // The next ask reads it: an edited value comes back, and nothing is measured.
  writeFile(file, withValue(text, "copy.gbps", "12345"));
  const auto start = std::chrono::steady_clock::now();
  const MachineCalibration second = calibrate(dir);
  const std::string took = first.source.substr(first.source.find(" in ") + 4);
  std::printf("measuring (copies up to 4 MiB) took %s; reading the cache took %.1f us\n",
              took.substr(0, took.size() - 1).c_str(),
              std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start).count());
  EXPECT_EQ(second.source, file);
  EXPECT_NE(second.text.find("copy.gbps = 12345\n"), std::string::npos) << second.text;
}

// With two threads the file also keeps how processes read each other's large sends, and a
// file without it (written before Loom measured it) is measured over.
TEST(CalibrationCache, TwoThreadsKeepTheDirectReadChoice) {
  SKIP_UNDER_TSAN(kCacheIsOneThread);
  CacheDir cache;
  const std::string dir = cache.path + "/loom";
  MachineCalibration first;
  Status status = loom::loadOrMeasureMachineCalibration(2, dir, &first, kSmallCopies);
  ASSERT_TRUE(status.isOk()) << status.message();
  EXPECT_NE(first.text.find("shm.direct_min_bytes = "), std::string::npos) << first.text;
  const std::string file = cache.file();
  ASSERT_FALSE(file.empty());
  const std::string text = readFile(file);
  EXPECT_NE(text.find("\n# direct reads "), std::string::npos) << text;
  loom::DataPathSizes sizes;
  CommProfile loaded = CommProfile::defaults(2, 1);
  ASSERT_TRUE(loom::loadTuningFile(file, &loaded, nullptr, &sizes).isOk());
  EXPECT_GE(sizes.shmDirectMinBytes, 0);

  writeFile(file, withValue(text, "shm.direct_min_bytes", "4096"));
  MachineCalibration read;
  ASSERT_TRUE(loom::loadOrMeasureMachineCalibration(2, dir, &read, kSmallCopies).isOk());
  EXPECT_EQ(read.source, file);
  EXPECT_NE(read.text.find("shm.direct_min_bytes = 4096\n"), std::string::npos) << read.text;

  writeFile(file, text.substr(0, text.find("shm.direct_min_bytes")));
  MachineCalibration again;
  ASSERT_TRUE(loom::loadOrMeasureMachineCalibration(2, dir, &again, kSmallCopies).isOk());
  EXPECT_EQ(again.source.rfind(file + " (measured now in ", 0), 0u) << again.source;
  EXPECT_NE(readFile(file).find("shm.direct_min_bytes = "), std::string::npos);
}

// The file keeps the link keys where they were measured; one without them is measured over
// when they are asked for; a calibration whose links failed is not kept (the next process
// tries again), and its other keys still serve.
TEST(CalibrationCache, KeepsTheLinksOnlyWhenMeasured) {
  SKIP_UNDER_TSAN(kCacheIsOneThread);
  CacheDir cache;
  const std::string dir = cache.path + "/loom";
  int calls = 0;
  MachineCalibration first;
  Status status = loom::loadOrMeasureMachineCalibration(2, dir, &first, kSmallCopies, knownLinks(&calls));
  ASSERT_TRUE(status.isOk()) << status.message();
  EXPECT_NE(first.text.find("intra.latency_us = 1.5\nintra.gbps = 10\n"), std::string::npos) << first.text;
  EXPECT_NE(first.text.find("oneshot.latency_us = "), std::string::npos) << first.text;
  const std::string file = cache.file();
  ASSERT_FALSE(file.empty());
  const std::string text = readFile(file);
  EXPECT_NE(text.find("\n# shared-memory exchange both ways, us: 8 B 1.50, 1 KiB 1.60, 32 KiB 4.78, 256 KiB 27.71; "
                      "one-shot 8 B allreduce 0.60 us; 0.01 s\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("\n# board / FIFO, us a call: allreduce 1 KiB 1.00 / 2.00, 8 KiB 2.00 / 2.00, 32 KiB 9.00 / "
                      "5.00: the board to 8192 B; broadcast 1 KiB 3.00 / 2.00, 8 KiB 4.00 / 3.00, 32 KiB 9.00 / 5.00: "
                      "the board to 512 B\n"),
            std::string::npos)
      << text;
  EXPECT_NE(first.text.find("oneshot.max_bytes.allreduce = 8192\noneshot.max_bytes.broadcast = 512\n"),
            std::string::npos)
      << first.text;

  MachineCalibration read;
  ASSERT_TRUE(loom::loadOrMeasureMachineCalibration(2, dir, &read, kSmallCopies, knownLinks(&calls)).isOk());
  EXPECT_EQ(read.source, file);
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(read.text, first.text);

  writeFile(file, text.substr(0, text.find("intra.latency_us")) + text.substr(text.find("reduce.gbps")));
  MachineCalibration again;
  ASSERT_TRUE(loom::loadOrMeasureMachineCalibration(2, dir, &again, kSmallCopies, knownLinks(&calls)).isOk());
  EXPECT_EQ(again.source.rfind(file + " (measured now in ", 0), 0u) << again.source;
  EXPECT_EQ(calls, 2);
  EXPECT_NE(readFile(file).find("intra.latency_us = 1.5\n"), std::string::npos);

  CacheDir other;
  const std::string otherDir = other.path + "/loom";
  auto failing = [](loom::LinkFigures*) { return loom::error(loomSystemError, "no shared memory here"); };
  MachineCalibration unkept;
  ASSERT_TRUE(loom::loadOrMeasureMachineCalibration(2, otherDir, &unkept, kSmallCopies, failing).isOk());
  EXPECT_EQ(unkept.source.rfind("measured now in ", 0), 0u) << unkept.source;
  EXPECT_NE(unkept.source.find(", not cached: the shared-memory links were not measured"), std::string::npos)
      << unkept.source;
  EXPECT_EQ(unkept.text.find("intra."), std::string::npos) << unkept.text;
  EXPECT_NE(unkept.text.find("copy.gbps = "), std::string::npos) << unkept.text;
  EXPECT_TRUE(other.file().empty());
}

TEST(CalibrationCache, MeasuresAgainForAnotherKeyOrABrokenFile) {
  SKIP_UNDER_TSAN(kCacheIsOneThread);
  CacheDir cache;
  const std::string dir = cache.path + "/loom";
  calibrate(dir);
  const std::string file = cache.file();
  ASSERT_FALSE(file.empty());
  const std::string good = readFile(file);
  const std::string key = loom::machineCalibrationKey(1);
  ASSERT_NE(key.find("; loom="), std::string::npos) << key;
  ASSERT_NE(key.find("cpu="), std::string::npos) << key;
  const std::string caches = "; caches=" + std::to_string(std::max(0L, sysconf(_SC_LEVEL2_CACHE_SIZE)) / 1024) + "/" +
                             std::to_string(std::max(0L, sysconf(_SC_LEVEL3_CACHE_SIZE)) / 1024) + " KiB;";
  ASSERT_NE(key.find(caches), std::string::npos) << key;

  struct Case {
    const char* what;
    std::string text;
  } cases[] = {
      {"another version of Loom", good.substr(0, good.find("; loom=")) + "; loom=0.0.0" + good.substr(good.find("; measure="))},
      // A host whose processors bear the same name but whose caches differ.
      {"other caches",
       good.substr(0, good.find(caches)) + "; caches=1/1 KiB;" + good.substr(good.find(caches) + caches.size())},
      {"a value that is not a number", withValue(good, "reduce.gbps", "fast")},
      {"a key missing", good.substr(0, good.find("streaming.gbps"))},
      {"an empty file", ""},
  };
  for (const Case& c : cases) {
    writeFile(file, c.text);
    const MachineCalibration again = calibrate(dir);
    EXPECT_EQ(again.source.rfind(file + " (measured now in ", 0), 0u) << c.what << ": " << again.source;
    // Replaced by a whole, current file.
    const std::string now = readFile(file);
    EXPECT_NE(now.find("# machine calibration: " + key + "\n"), std::string::npos) << c.what << ": " << now;
    EXPECT_NE(now.find("streaming.gbps = "), std::string::npos) << c.what << ": " << now;
  }
}

TEST(CalibrationCache, ADirectoryThatCannotBeWrittenCostsTheCacheOnly) {
  SKIP_UNDER_TSAN(kCacheIsOneThread);
  // /proc takes no new directories, not even from root.
  const MachineCalibration calibration = calibrate("/proc/loom-calibration-test");
  EXPECT_EQ(calibration.source.rfind("measured now in ", 0), 0u) << calibration.source;
  EXPECT_NE(calibration.source.find(", not cached: cannot create /proc/loom-calibration-test"), std::string::npos)
      << calibration.source;
  EXPECT_NE(calibration.text.find("copy.gbps = "), std::string::npos) << calibration.text;

  const MachineCalibration nowhere = calibrate("");
  EXPECT_NE(nowhere.source.find("not cached: no cache directory"), std::string::npos) << nowhere.source;
}

TEST(CalibrationCache, TheDirectoryFollowsXdgThenHome) {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  const std::string savedXdg = xdg ? xdg : "", savedHome = home ? home : "";
  setenv("XDG_CACHE_HOME", "/somewhere/cache", 1);
  setenv("HOME", "/home/someone", 1);
  EXPECT_EQ(loom::machineCalibrationDir(), "/somewhere/cache/loom");
  setenv("XDG_CACHE_HOME", "relative/cache", 1);  // ignored, as the XDG rule says
  EXPECT_EQ(loom::machineCalibrationDir(), "/home/someone/.cache/loom");
  unsetenv("XDG_CACHE_HOME");
  EXPECT_EQ(loom::machineCalibrationDir(), "/home/someone/.cache/loom");
  unsetenv("HOME");
  EXPECT_EQ(loom::machineCalibrationDir(), "");
  if (xdg) setenv("XDG_CACHE_HOME", savedXdg.c_str(), 1);
  if (home) setenv("HOME", savedHome.c_str(), 1);
}

}  // namespace
