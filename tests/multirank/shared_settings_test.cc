// Ranks started with different data-path variables (LOOM_ALGO, LOOM_SOCKET_NSOCKS, LOOM_CHECK,
// ...) all run with rank 0's, so their plans and links match; the ranks that differed say so.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "multirank/harness.h"

namespace {

using Variables = std::vector<std::pair<const char*, const char*>>;

const char* const kDataPathVariables[] = {"LOOM_TRANSPORTS",  "LOOM_ALGO",          "LOOM_PROTO",
                                          "LOOM_CHANNELS",    "LOOM_RING_ORDER",    "LOOM_CHUNK_SIZE",
                                          "LOOM_SOCKET_NSOCKS", "LOOM_CHECK",        "LOOM_STREAMING_MIN_BYTES",
                                          "LOOM_TUNING_FILE", "LOOM_UCX_LINKS"};

// Named after the test process (children compute it too, hence getppid there).
std::string logPath(const std::string& tag, int rank, pid_t testProcess = ::getpid()) {
  return "/tmp/loom-shared-settings-" + std::to_string(testProcess) + "-" + tag + "-" + std::to_string(rank);
}

// Runs 3 process ranks, rank r with `variables[r]` set (on top of the common ones), each
// with its stderr in a file; every rank runs collectives of several shapes and checks them.
void runWithSettings(const std::string& tag, const Variables& common, const std::vector<Variables>& variables) {
  const int n = 3;
  const int port = loomtest::freePort();
  loomtest::runProcesses(n, [&](int rank) {
    // The child's log goes to stderr (the logger's default), which this file now is.
    int fd = ::open(logPath(tag, rank, ::getppid()).c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ASSERT_GE(fd, 0);
    ::dup2(fd, STDERR_FILENO);
    ::close(fd);
    for (const char* v : kDataPathVariables) ::unsetenv(v);
    for (auto& [k, v] : common) ::setenv(k, v, 1);
    for (auto& [k, v] : variables[static_cast<size_t>(rank)]) ::setenv(k, v, 1);
    ::setenv("LOOM_RANK", std::to_string(rank).c_str(), 1);
    ::setenv("LOOM_WORLD_SIZE", std::to_string(n).c_str(), 1);
    ::setenv("LOOM_MASTER_ADDR", "127.0.0.1", 1);
    ::setenv("LOOM_MASTER_PORT", std::to_string(port).c_str(), 1);
    loomConfig_t config = LOOM_CONFIG_INITIALIZER;
    config.timeoutMs = 10000;  // plans that disagree would wait this long, then fail the test
    config.initTimeoutMs = 20000;
    loomComm_t comm = nullptr;
    LOOM_ASSERT_OK(loomCommInitFromEnv(&comm, &config), nullptr);
    for (size_t count : {size_t{7}, size_t{70000}, size_t{1} << 20}) {
      std::vector<float> in(count), out(count * n);
      for (size_t i = 0; i < count; ++i) in[i] = static_cast<float>(rank + 1) + static_cast<float>(i % 5);
      LOOM_ASSERT_OK(loomAllReduce(in.data(), out.data(), count, loomFloat32, loomSum, comm, nullptr), comm);
      for (size_t i = 0; i < count; ++i) {
        ASSERT_EQ(out[i], 6.0f + 3.0f * static_cast<float>(i % 5)) << "allreduce of " << count << " at " << i;
      }
      LOOM_ASSERT_OK(loomBroadcast(in.data(), out.data(), count, loomFloat32, 2, comm, nullptr), comm);
      for (size_t i = 0; i < count; ++i) ASSERT_EQ(out[i], 3.0f + static_cast<float>(i % 5)) << "broadcast at " << i;
      LOOM_ASSERT_OK(loomAllGather(in.data(), out.data(), count, loomFloat32, comm, nullptr), comm);
      for (size_t i = 0; i < count * n; ++i) {
        ASSERT_EQ(out[i], static_cast<float>(i / count + 1) + static_cast<float>(i % count % 5)) << "allgather at " << i;
      }
    }
    LOOM_EXPECT_OK(loomCommDestroy(comm), nullptr);
  });
}

std::string readLog(const std::string& tag, int rank) {
  std::ifstream in(logPath(tag, rank));
  std::stringstream text;
  text << in.rdbuf();
  std::remove(logPath(tag, rank).c_str());
  return text.str();
}

// The warning of a rank that differed names exactly `names` (in the warning's order).
void expectWarning(const std::string& log, const std::string& names) {
  const std::string warning = names + " on this rank differ";
  EXPECT_NE(log.find(warning), std::string::npos) << "expected \"" << warning << "\" in:\n" << log;
  EXPECT_NE(log.find("from rank 0's; using rank 0's"), std::string::npos) << log;
}

TEST(SharedSettings, AlgorithmsProtocolsChunksChannelsRingOrderAndCheckFollowRankZero) {
  runWithSettings("shm", {},
                  {{},
                   {{"LOOM_ALGO", "tree"}, {"LOOM_CHUNK_SIZE", "8192"}, {"LOOM_RING_ORDER", "rank"}},
                   {{"LOOM_ALGO", "rd"}, {"LOOM_PROTO", "streaming"}, {"LOOM_CHANNELS", "3"}, {"LOOM_CHECK", "1"},
                    {"LOOM_STREAMING_MIN_BYTES", "65536"}}});
  EXPECT_EQ(readLog("shm", 0).find("differ"), std::string::npos);
  expectWarning(readLog("shm", 1), "LOOM_ALGO, LOOM_RING_ORDER, LOOM_CHUNK_SIZE");
  expectWarning(readLog("shm", 2), "LOOM_ALGO, LOOM_PROTO, LOOM_CHANNELS, LOOM_STREAMING_MIN_BYTES, LOOM_CHECK");
}

TEST(SharedSettings, TransportsAndSocketConnectionsFollowRankZero) {
  runWithSettings("socket", {{"LOOM_TRANSPORTS", "socket"}},
                  {{{"LOOM_SOCKET_NSOCKS", "2"}},
                   {{"LOOM_SOCKET_NSOCKS", "4"}},
                   {{"LOOM_SOCKET_NSOCKS", "1"}, {"LOOM_TRANSPORTS", "shm,socket"}}});
  EXPECT_EQ(readLog("socket", 0).find("differ"), std::string::npos);
  expectWarning(readLog("socket", 1), "LOOM_SOCKET_NSOCKS");
  expectWarning(readLog("socket", 2), "LOOM_TRANSPORTS, LOOM_SOCKET_NSOCKS");
}

// The same over UCX (its TCP, as between hosts), where rank 0's three links per peer carry a
// channel each of the larger calls: runWithSettings' checks would see one link's bytes land
// in another's stream.
TEST(SharedSettings, UcxLinksFollowRankZero) {
  if (std::getenv("LOOM_TEST_UCX") == nullptr) GTEST_SKIP() << "skipped: this Loom was built without UCX";
  runWithSettings("ucx", {{"LOOM_TRANSPORTS", "ucx"}, {"UCX_TLS", "tcp"}, {"LOOM_DEBUG", "TRACE"}},
                  {{{"LOOM_UCX_LINKS", "3"}}, {{"LOOM_UCX_LINKS", "1"}}, {}});
  const std::string logs[] = {readLog("ucx", 0), readLog("ucx", 1), readLog("ucx", 2)};
  EXPECT_EQ(logs[0].find("differ"), std::string::npos);
  expectWarning(logs[1], "LOOM_UCX_LINKS");
  expectWarning(logs[2], "LOOM_UCX_LINKS");  // unset: the default, 2
  for (const std::string& log : logs) EXPECT_NE(log.find("ucx (3 link(s) each) to ranks"), std::string::npos) << log;
  EXPECT_NE(logs[0].find("3 channel(s)"), std::string::npos) << logs[0];
}

// The tuner's constants are rank 0's too: a rank whose own LOOM_TUNING_FILE says otherwise
// is told so; one whose file agrees with rank 0's is not.
TEST(SharedSettings, TunerConstantsFollowRankZero) {
  const std::string fast = logPath("fast-tuning", 0) + ".txt", same = logPath("same-tuning", 0) + ".txt";
  std::ofstream(fast) << "intra.gbps = 99\n";
  std::ofstream(same) << "mem.gbps = 4.5\n";  // the built-in value
  runWithSettings("tuning", {{"LOOM_MACHINE_CALIBRATION", "0"}},
                  {{}, {{"LOOM_TUNING_FILE", fast.c_str()}}, {{"LOOM_TUNING_FILE", same.c_str()}}});
  EXPECT_EQ(readLog("tuning", 0).find("differ"), std::string::npos);
  const std::string warned = readLog("tuning", 1);
  EXPECT_NE(warned.find("this rank's tuning file (LOOM_TUNING_FILE " + fast + ") differs from rank 0's constants in "
                        "intra.gbps"),
            std::string::npos)
      << warned;
  EXPECT_EQ(readLog("tuning", 2).find("differ"), std::string::npos);
  std::remove(fast.c_str());
  std::remove(same.c_str());
}

}  // namespace
