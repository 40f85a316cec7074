// The shared-memory transport between two ranks (threads of one process and forked
// processes): the byte stream survives any split of sends and receives, with and without
// direct reads of the sender's memory and when those fail; segments leave nothing in
// LOOM_SHM_DIR; a dead or closed peer is loomRemoteError, a full tmpfs a clear
// loomSystemError, a bad LOOM_SHM_FIFO_BYTES loomInvalidArgument; an allreduce forwards
// what it reduces from the cache and stays exact.
#include "transport/shm_transport.h"

#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "core/communicator.h"
#include "multirank/harness.h"

namespace {

using loom::transport::Link;
using loom::transport::ShmTransport;
using loomtest::Mode;
using loomtest::ScopedEnv;
using Clock = std::chrono::steady_clock;

#define ASSERT_STATUS_OK(expr)                                                  \
  do {                                                                          \
    loom::Status s_ = (expr);                                                   \
    ASSERT_TRUE(s_.isOk()) << #expr << ": " << s_.message();                    \
  } while (0)

// A fresh directory in /dev/shm for LOOM_SHM_DIR, removed at the end.
class TempDir {
 public:
  TempDir() {
    char path[] = "/dev/shm/loom-shm-test-XXXXXX";
    if (::mkdtemp(path) != nullptr) path_ = path;
  }
  ~TempDir() {
    std::error_code ignored;
    if (!path_.empty()) std::filesystem::remove_all(path_, ignored);
  }
  const std::string& path() const { return path_; }
  std::vector<std::string> entries() const {
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(path_)) names.push_back(e.path().string());
    return names;
  }

 private:
  std::string path_;
};

loom::Bootstrap& bootstrapOf(loomComm_t comm) {
  return reinterpret_cast<loom::Communicator*>(comm)->bootstrap();
}

size_t fifoBytesOf(loomComm_t comm) { return reinterpret_cast<loom::Communicator*>(comm)->config().shmFifoBytes; }

// This rank's shm transport, linked to `peer`, its FIFOs as the communicator's (LOOM_SHM_FIFO_BYTES),
// direct reads as LOOM_SHM_DIRECT says or else as a tuning file's shm.direct_min_bytes of `fileDirect`.
void connect(loomComm_t comm, int peer, std::unique_ptr<ShmTransport>* out, long long fileDirect = -1) {
  ASSERT_STATUS_OK(ShmTransport::create(bootstrapOf(comm), {0, 1}, fifoBytesOf(comm), fileDirect, out));
  auto deadline = loom::Deadline::afterMs(10000);
  ASSERT_STATUS_OK((*out)->connectOut({peer}, deadline));
  ASSERT_STATUS_OK((*out)->acceptIn({peer}, deadline));
  ASSERT_NE((*out)->link(peer, 0), nullptr);
}

// Bytes that differ at every offset, so a piece delivered out of place is caught.
std::vector<uint8_t> pattern(uint64_t seed, size_t bytes) {
  std::vector<uint8_t> out(bytes);
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  for (size_t i = 0; i < bytes; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    out[i] = static_cast<uint8_t>(x);
  }
  return out;
}

void expectSameBytes(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want) {
  ASSERT_EQ(got.size(), want.size());
  auto mismatch = std::mismatch(got.begin(), got.end(), want.begin());
  EXPECT_TRUE(mismatch.first == got.end()) << "first wrong byte at offset " << (mismatch.first - got.begin());
}

// The direct-read threshold of these tests: pieces of either kind are frequent.
constexpr size_t kDirectMin = 16384;

// Sends `out` while receiving in->size() bytes over one link, both cut into random pieces:
// one in four of a few bytes to 300 (mostly small enough for a mail slot), one in four from
// 20 KB to 320 KB (read from the sender's memory when direct reads are on), the rest up to a
// few KiB. A send's piece is kept until it is done, as the Link contract asks; half the
// pieces start as a step's header and payload do (sendWithHeader), and one in six tries to go
// whole (sendWhole, a quick message). One receive in three reads in place, as a reduction
// does, and one in three takes its bytes whole behind the 24 bytes `expected` holds there
// (receiveWhole, after a header that differs in one byte has been refused).
void exchange(Link* link, const std::vector<uint8_t>& out, std::vector<uint8_t>* in,
              const std::vector<uint8_t>& expected, uint32_t seed) {
  std::mt19937 rng(seed);
  auto piece = [&]() -> size_t {
    switch (rng() % 4) {
      case 0: return 1 + rng() % 300;
      case 1: return 20000 + rng() % 300000;
      default: return 1 + rng() % 3000;
    }
  };
  size_t sent = 0, pieceEnd = 0, received = 0;
  auto deadline = Clock::now() + std::chrono::seconds(60);
  while (sent < out.size() || received < in->size()) {
    bool moved = false;
    if (sent < out.size()) {
      size_t done = 0;
      const int how = sent == pieceEnd ? static_cast<int>(rng() % 6) : -1;
      if (how >= 0) pieceEnd = std::min(out.size(), sent + piece());
      const size_t header = std::min<size_t>(24, pieceEnd - sent);
      if (how == 0) {
        // All or nothing; a piece that did not go continues as plain sends.
        if (link->sendWhole(out.data() + sent, header, out.data() + sent + header, pieceEnd - sent - header)) {
          done = pieceEnd - sent;
        }
      } else if (how >= 1 && how <= 3) {
        ASSERT_STATUS_OK(link->sendWithHeader(out.data() + sent, header, out.data() + sent + header,
                                              pieceEnd - sent - header, &done));
      } else {
        ASSERT_STATUS_OK(link->sendSome(out.data() + sent, pieceEnd - sent, &done));
      }
      sent += done;
      moved |= done > 0;
    }
    if (received < in->size()) {
      size_t done = 0;
      const size_t want = std::min(in->size() - received, piece());
      const int how = static_cast<int>(rng() % 3);
      if (how == 1 && want > 24) {
        uint8_t header[24];
        std::memcpy(header, expected.data() + received, sizeof header);
        header[rng() % sizeof header] ^= 0x40;
        ASSERT_NE(link->receiveWhole(header, sizeof header, in->data() + received + 24, want - 24),
                  Link::Whole::kMoved)
            << "a header that is not the next bytes' at " << received;
        const Link::Whole got =
            link->receiveWhole(expected.data() + received, sizeof header, in->data() + received + 24, want - 24);
        ASSERT_NE(got, Link::Whole::kOther) << "the next bytes' own header refused at " << received;
        if (got == Link::Whole::kMoved) {
          std::memcpy(in->data() + received, expected.data() + received, sizeof header);
          done = want;
        }
      }
      if (how == 0) {
        // As a reduction receives: it asks for the bytes in mapped memory (a posted send of
        // the peer is declined and streamed through the FIFO) and reads them in place.
        const void* data = nullptr;
        link->preferMapped();
        link->peek(&data, want, &done);
        if (done > 0) {
          std::memcpy(in->data() + received, data, done);
          link->consume(done);
        }
      }
      if (done == 0) ASSERT_STATUS_OK(link->recvSome(in->data() + received, want, &done));
      received += done;
      moved |= done > 0;
    }
    if (!moved) {
      ASSERT_LT(Clock::now(), deadline) << "stuck after sending " << sent << " and receiving " << received;
      std::this_thread::yield();
    }
  }
}

// Both ranks send `bytes` of their own pattern and check the peer's.
void exchangeAndCheck(Link* link, int rank, size_t bytes, uint64_t round) {
  std::vector<uint8_t> in(bytes);
  const std::vector<uint8_t> expected = pattern(2 * round + (1 - rank), bytes);
  ASSERT_NO_FATAL_FAILURE(
      exchange(link, pattern(2 * round + rank, bytes), &in, expected, static_cast<uint32_t>(round * 7 + rank)));
  expectSameBytes(in, expected);
}

// ---- Byte stream ----

// mode, LOOM_SHM_DIRECT ("file": unset, and a tuning file's shm.direct_min_bytes of kDirectMin
// instead), FIFO bytes, LOOM_SHM_FIFO_STORES
using StreamParam = std::tuple<Mode, const char*, size_t, const char*>;

class ShmStream : public ::testing::TestWithParam<StreamParam> {};

TEST_P(ShmStream, EveryByteArrivesInOrderWhateverTheSplit) {
  auto [mode, direct, fifoBytes, stores] = GetParam();
  const bool fromFile = std::string(direct) == "file";
  ScopedEnv env;
  env.set("LOOM_SHM_DIRECT", fromFile ? "" : direct)
      .set("LOOM_SHM_DIRECT_MIN_BYTES", std::to_string(kDirectMin))
      .set("LOOM_SHM_FIFO_BYTES", std::to_string(fifoBytes))
      .set("LOOM_SHM_FIFO_STORES", stores);
  loomtest::runRanks(2, mode, [fromFile](loomComm_t comm, int rank) {
    std::unique_ptr<ShmTransport> transport;
    ASSERT_NO_FATAL_FAILURE(connect(comm, 1 - rank, &transport, fromFile ? static_cast<long long>(kDirectMin) : -1));
    // Many times the FIFO, so it wraps around thousands of times.
    exchangeAndCheck(transport->link(1 - rank, 0), rank, 6 << 20, 1);
  });
}

INSTANTIATE_TEST_SUITE_P(
    Shm, ShmStream,
    ::testing::Combine(::testing::Values(Mode::kThreads, Mode::kProcesses),
                       ::testing::Values("none", "threads", "all", "file"),
                       ::testing::Values(size_t{4096}, size_t{262144}), ::testing::Values("cached", "streaming", "auto")),
    [](const ::testing::TestParamInfo<StreamParam>& info) {
      return loomtest::modeName(std::get<0>(info.param)) + "_direct_" + std::get<1>(info.param) + "_" +
             std::to_string(std::get<2>(info.param)) + "_" + std::get<3>(info.param);
    });

// Writes of no bytes leave the stream as it was: the bytes after them arrive, in order.
TEST(ShmMail, WritesOfNothingAreNoMessages) {
  loomtest::runRanks(2, Mode::kThreads, [](loomComm_t comm, int rank) {
    std::unique_ptr<ShmTransport> transport;
    ASSERT_NO_FATAL_FAILURE(connect(comm, 1 - rank, &transport));
    Link* link = transport->link(1 - rank, 0);
    const std::vector<uint8_t> out = pattern(rank, 64);
    size_t done = 0;
    EXPECT_EQ(link->sendCopy(out.data(), 0), 0u);
    ASSERT_STATUS_OK(link->sendWithHeader(out.data(), 0, out.data(), 0, &done));
    EXPECT_EQ(done, 0u);
    ASSERT_STATUS_OK(link->sendWithHeader(out.data(), 24, out.data() + 24, 40, &done));
    EXPECT_EQ(done, 64u);
    std::vector<uint8_t> in(64);
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    for (size_t got = 0; got < in.size(); got += done) {
      ASSERT_LT(Clock::now(), deadline) << "stuck after receiving " << got << " bytes";
      ASSERT_STATUS_OK(link->recvSome(in.data() + got, in.size() - got, &done));
    }
    expectSameBytes(in, pattern(1 - rank, 64));
  });
}

// A reader takes a full ring a quarter (at most 64 KiB) at a time and gives each piece's room
// back at once, so the writer refills while the reader copies: one that held the whole ring
// until it had read all of it made a one-way transfer take turns (docs/RESULTS.md).
TEST(ShmHandOver, AReaderGivesTheRingBackAPieceAtATime) {
  static constexpr size_t kRing = 262144, kPiece = 65536;
  ScopedEnv env;
  env.set("LOOM_SHM_DIRECT", "none").set("LOOM_SHM_FIFO_BYTES", std::to_string(kRing));
  loomtest::runRanks(2, Mode::kThreads, [](loomComm_t comm, int rank) {
    std::unique_ptr<ShmTransport> transport;
    ASSERT_NO_FATAL_FAILURE(connect(comm, 1 - rank, &transport));
    Link* link = transport->link(1 - rank, 0);
    const std::vector<uint8_t> out = pattern(7, kRing + kPiece);
    size_t done = 0;
    if (rank == 0) {
      ASSERT_STATUS_OK(link->sendSome(out.data(), kRing, &done));
      ASSERT_EQ(done, kRing) << "an empty ring takes a ring's bytes";
    }
    ASSERT_EQ(loomBarrier(comm, nullptr), loomSuccess);  // the ring is full
    if (rank == 1) {
      const void* data = nullptr;
      link->peek(&data, kRing, &done);
      ASSERT_EQ(done, kPiece) << "a reader shown the whole ring holds it until it has read all of it";
      ASSERT_EQ(std::memcmp(data, out.data(), kPiece), 0);
      link->consume(done);
    }
    ASSERT_EQ(loomBarrier(comm, nullptr), loomSuccess);  // one piece read
    if (rank == 0) {
      ASSERT_STATUS_OK(link->sendSome(out.data() + kRing, kPiece, &done));
      EXPECT_EQ(done, kPiece) << "the piece read was not given back";
      return;
    }
    std::vector<uint8_t> in(kRing);
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    for (size_t got = 0; got < in.size(); got += done) {
      ASSERT_LT(Clock::now(), deadline) << "stuck after receiving " << got << " bytes";
      ASSERT_STATUS_OK(link->recvSome(in.data() + got, in.size() - got, &done));
    }
    expectSameBytes(in, std::vector<uint8_t>(out.begin() + kPiece, out.end()));
  });
}

// What the tuner's cost model is told: direct reads from LOOM_SHM_DIRECT_MIN_BYTES where the
// setting lets the communicator's ranks read each other (by default only threads of one
// process), never otherwise; where LOOM_SHM_DIRECT is unset, a tuning file's
// shm.direct_min_bytes decides for processes (0: never).
TEST(ShmDirectReads, TheModelSeesThemWhereTheSettingAllowsThem) {
  struct Case {
    const char* setting;  // "": unset
    long long fromFile;   // -1: no tuning file's
    bool threadsOnly;
    size_t expected;
  };
  const Case cases[] = {{"threads", -1, true, kDirectMin}, {"threads", -1, false, 0},
                        {"all", -1, true, kDirectMin},     {"all", -1, false, kDirectMin},
                        {"none", -1, true, 0},             {"none", -1, false, 0},
                        {"", 65536, false, 65536},         {"", 65536, true, kDirectMin},
                        {"", 0, false, 0},                 {"none", 65536, false, 0},
                        {"all", 0, false, kDirectMin}};
  for (const Case& c : cases) {
    ScopedEnv env;
    env.set("LOOM_SHM_DIRECT", c.setting).set("LOOM_SHM_DIRECT_MIN_BYTES", std::to_string(kDirectMin));
    size_t from = 12345;
    ASSERT_STATUS_OK(ShmTransport::directReadMinBytes(c.threadsOnly, c.fromFile, &from));
    EXPECT_EQ(from, c.expected) << "LOOM_SHM_DIRECT=" << c.setting << ", file " << c.fromFile
                                << (c.threadsOnly ? ", threads" : ", processes");
  }
  size_t from = 0;
  ASSERT_STATUS_OK(ShmTransport::directReadMinBytes(true, -1, &from));  // the default setting
  EXPECT_EQ(from, size_t{512} << 10);
  ASSERT_STATUS_OK(ShmTransport::directReadMinBytes(false, -1, &from));
  EXPECT_EQ(from, 0u);
}

// ---- Direct reads that fail ----

class ShmFallback : public ::testing::TestWithParam<Mode> {};

TEST_P(ShmFallback, RefusedReadsGoThroughTheFifoFromThenOn) {
  ScopedEnv env;
  env.set("LOOM_SHM_DIRECT", "all").set("LOOM_SHM_DIRECT_MIN_BYTES", std::to_string(kDirectMin));
  loomtest::runRanks(2, GetParam(), [](loomComm_t comm, int rank) {
    std::unique_ptr<ShmTransport> transport;
    ASSERT_NO_FATAL_FAILURE(connect(comm, 1 - rank, &transport));
    Link* link = transport->link(1 - rank, 0);
    ASSERT_NO_FATAL_FAILURE(exchangeAndCheck(link, rank, 1 << 20, 1));  // direct reads work
    // As in a container where process_vm_readv is forbidden: the first failure switches
    // the link to the FIFO, also for a large send already half read.
    transport->failCrossMemoryReadsForTesting(EPERM);
    ASSERT_NO_FATAL_FAILURE(exchangeAndCheck(link, rank, 3 << 20, 2));
    transport->failCrossMemoryReadsForTesting(0);
    ASSERT_NO_FATAL_FAILURE(exchangeAndCheck(link, rank, 1 << 20, 3));  // and stays there
  });
}

INSTANTIATE_TEST_SUITE_P(Shm, ShmFallback, ::testing::Values(Mode::kThreads, Mode::kProcesses),
                         [](const ::testing::TestParamInfo<Mode>& info) { return loomtest::modeName(info.param); });

TEST(ShmFallback, ReceiverWithDirectReadsOffRefusesThem) {
  ScopedEnv env;
  env.set("LOOM_SHM_DIRECT", "all").set("LOOM_SHM_DIRECT_MIN_BYTES", std::to_string(kDirectMin));
  loomtest::runRanks(2, Mode::kProcesses, [](loomComm_t comm, int rank) {
    if (rank == 1) ::setenv("LOOM_SHM_DIRECT", "none", 1);  // this process only
    std::unique_ptr<ShmTransport> transport;
    ASSERT_NO_FATAL_FAILURE(connect(comm, 1 - rank, &transport));
    exchangeAndCheck(transport->link(1 - rank, 0), rank, 2 << 20, 1);
  });
}

// ---- Connecting ----

class ShmConnect : public ::testing::TestWithParam<Mode> {};

TEST_P(ShmConnect, SegmentsAreGoneOnceBothRanksMappedThem) {
  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  ScopedEnv env;
  env.set("LOOM_SHM_DIR", dir.path());
  loomtest::runRanks(2, GetParam(), [&dir](loomComm_t comm, int rank) {
    loom::Bootstrap& bootstrap = bootstrapOf(comm);
    std::unique_ptr<ShmTransport> transport;
    ASSERT_NO_FATAL_FAILURE(connect(comm, 1 - rank, &transport));
    ASSERT_STATUS_OK(bootstrap.barrier());
    EXPECT_EQ(dir.entries(), std::vector<std::string>());
    ASSERT_NO_FATAL_FAILURE(exchangeAndCheck(transport->link(1 - rank, 0), rank, 1 << 20, 1));
    EXPECT_EQ(dir.entries(), std::vector<std::string>());
  });
}

TEST_P(ShmConnect, ConnectsOncePerPeerAndOnlyToServedPeers) {
  loomtest::runRanks(2, GetParam(), [](loomComm_t comm, int rank) {
    loom::Bootstrap& bootstrap = bootstrapOf(comm);
    int peer = 1 - rank;
    std::unique_ptr<ShmTransport> transport;
    ASSERT_NO_FATAL_FAILURE(connect(comm, peer, &transport));
    Link* link = transport->link(peer, 0);
    auto deadline = loom::Deadline::afterMs(10000);
    ASSERT_STATUS_OK(transport->connectOut({peer}, deadline));
    ASSERT_STATUS_OK(transport->acceptIn({peer}, deadline));
    EXPECT_EQ(transport->link(peer, 0), link);
    EXPECT_EQ(transport->link(peer, 3), link);
    EXPECT_EQ(link->waitFd(), -1);
    ASSERT_NO_FATAL_FAILURE(exchangeAndCheck(link, rank, 100000, 1));  // the one link still works

    loom::Status self = transport->connectOut({rank}, deadline);
    EXPECT_EQ(self.code(), loomInternalError) << self.message();
    std::unique_ptr<ShmTransport> none;
    ASSERT_STATUS_OK(ShmTransport::create(bootstrap, {}, fifoBytesOf(comm), -1, &none));
    loom::Status unserved = none->acceptIn({peer}, deadline);
    EXPECT_EQ(unserved.code(), loomInternalError) << unserved.message();
    EXPECT_NE(unserved.message().find("does not serve"), std::string::npos) << unserved.message();
    EXPECT_EQ(none->link(peer, 0), nullptr);
  });
}

INSTANTIATE_TEST_SUITE_P(Shm, ShmConnect, ::testing::Values(Mode::kThreads, Mode::kProcesses),
                         [](const ::testing::TestParamInfo<Mode>& info) { return loomtest::modeName(info.param); });

TEST(ShmConnect, BadSettingsAreInvalidArguments) {
  // The FIFO's size is the communicator's to resolve (from the variable or a tuning file).
  const std::string file = ::testing::TempDir() + "shm_bad_fifo_" + std::to_string(::getpid()) + ".txt";
  std::FILE* tuning = std::fopen(file.c_str(), "w");
  ASSERT_NE(tuning, nullptr);
  std::fputs("shm.fifo_bytes = 12288\n", tuning);
  std::fclose(tuning);
  const std::pair<const char*, std::string> badSizes[] = {
      {"LOOM_SHM_FIFO_BYTES", "5000"}, {"LOOM_SHM_FIFO_BYTES", "2048"}, {"LOOM_SHM_FIFO_BYTES", "lots"},
      {"LOOM_TUNING_FILE", file}};
  for (const auto& [name, value] : badSizes) {
    ScopedEnv env;
    env.set(name, value);
    loomComm_t comm = nullptr;
    EXPECT_EQ(loomCommInitAll(&comm, 1, nullptr), loomInvalidArgument) << name << "=" << value;
    const std::string message = loomGetLastError(nullptr);
    EXPECT_NE(message.find(name == std::string("LOOM_TUNING_FILE") ? file + ": shm.fifo_bytes = 12288 is not a power"
                                                                   : std::string(name)),
              std::string::npos)
        << message;
  }
  std::remove(file.c_str());

  loomComm_t comm = nullptr;
  LOOM_ASSERT_OK(loomCommInitAll(&comm, 1, nullptr), nullptr);
  const std::pair<const char*, const char*> bad[] = {
      {"LOOM_SHM_DIRECT", "2"},         {"LOOM_SHM_DIRECT", "yes"},
      {"LOOM_SHM_DIRECT_MIN_BYTES", "0"}, {"LOOM_SHM_FIFO_STORES", "nt"},
      {"LOOM_SHM_FIFO_STORES", "Cached"}};
  for (const auto& [name, value] : bad) {
    ScopedEnv env;
    env.set(name, value);
    std::unique_ptr<ShmTransport> transport;
    loom::Status s = ShmTransport::create(bootstrapOf(comm), {0}, fifoBytesOf(comm), -1, &transport);
    EXPECT_EQ(s.code(), loomInvalidArgument) << name << "=" << value << ": " << s.message();
    EXPECT_NE(s.message().find(name), std::string::npos) << s.message();
    EXPECT_EQ(transport, nullptr);
  }
  LOOM_EXPECT_OK(loomCommDestroy(comm), nullptr);
}

// ---- A peer that goes away ----

TEST(ShmPeerGone, ClosedPeerIsRemoteErrorAfterItsLastBytes) {
  loomtest::runRanks(2, Mode::kThreads, [](loomComm_t comm, int rank) {
    loom::Bootstrap& bootstrap = bootstrapOf(comm);
    std::unique_ptr<ShmTransport> transport;
    ASSERT_NO_FATAL_FAILURE(connect(comm, 1 - rank, &transport));
    Link* link = transport->link(1 - rank, 0);
    char bytes[100] = "last words";
    if (rank == 1) {
      size_t done = 0;
      ASSERT_STATUS_OK(link->sendSome(bytes, sizeof(bytes), &done));
      ASSERT_EQ(done, sizeof(bytes));
      transport.reset();
      ASSERT_STATUS_OK(bootstrap.barrier());
      return;
    }
    ASSERT_STATUS_OK(bootstrap.barrier());
    char got[200] = {};
    size_t done = 0;
    ASSERT_STATUS_OK(link->recvSome(got, sizeof(got), &done));
    EXPECT_EQ(done, sizeof(bytes));
    EXPECT_STREQ(got, "last words");
    loom::Status s = link->recvSome(got, sizeof(got), &done);
    EXPECT_EQ(s.code(), loomRemoteError) << s.message();
    EXPECT_NE(s.message().find("rank 1"), std::string::npos) << s.message();
  });
}

// How the survivor is waiting when its peer process is killed.
enum class Waiting { kToReceive, kOnAFullFifo, kForAPostedSendToBeRead };

class ShmDeadPeer : public ::testing::TestWithParam<Waiting> {};

// Rank 1 is a forked child that is SIGKILLed mid-transfer; rank 0 (this process) must see
// loomRemoteError naming it within two seconds, and the directory must stay empty.
TEST_P(ShmDeadPeer, BecomesRemoteErrorQuickly) {
  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  ScopedEnv env;
  env.set("LOOM_SHM_DIR", dir.path())
      .set("LOOM_SHM_FIFO_BYTES", "4096")
      .set("LOOM_SHM_DIRECT", "all")
      .set("LOOM_SHM_DIRECT_MIN_BYTES", std::to_string(kDirectMin));
  loomUniqueId id;
  LOOM_ASSERT_OK(loomGetUniqueId(&id), nullptr);
  std::fflush(nullptr);
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Connects, sends a first message, then idles until killed.
    loomComm_t comm = nullptr;
    if (loomCommInitRank(&comm, 2, id, 1) != loomSuccess) ::_exit(2);
    std::unique_ptr<ShmTransport> transport;
    if (!ShmTransport::create(bootstrapOf(comm), {0}, fifoBytesOf(comm), -1, &transport).isOk()) ::_exit(3);
    auto deadline = loom::Deadline::afterMs(10000);
    if (!transport->acceptIn({0}, deadline).isOk()) ::_exit(4);
    char hello[1000] = "alive";
    size_t done = 0;
    if (!transport->link(0, 0)->sendSome(hello, sizeof(hello), &done).isOk() || done != sizeof(hello)) ::_exit(5);
    for (;;) ::pause();
  }

  loomComm_t comm = nullptr;
  LOOM_ASSERT_OK(loomCommInitRank(&comm, 2, id, 0), nullptr);
  std::unique_ptr<ShmTransport> transport;
  ASSERT_NO_FATAL_FAILURE(connect(comm, 1, &transport));
  Link* link = transport->link(1, 0);
  char hello[1000];
  size_t received = 0;
  while (received < sizeof(hello)) {
    size_t done = 0;
    ASSERT_STATUS_OK(link->recvSome(hello + received, sizeof(hello) - received, &done));
    received += done;
  }
  EXPECT_STREQ(hello, "alive");

  std::vector<uint8_t> big(1 << 20, 7);
  size_t done = 0;
  switch (GetParam()) {
    case Waiting::kToReceive:
      break;
    case Waiting::kOnAFullFifo:
      do ASSERT_STATUS_OK(link->sendSome(big.data(), 1000, &done)); while (done > 0);
      break;
    case Waiting::kForAPostedSendToBeRead:
      ASSERT_STATUS_OK(link->sendSome(big.data(), big.size(), &done));
      ASSERT_EQ(done, 0u);
      break;
  }
  ASSERT_EQ(::kill(child, SIGKILL), 0);
  auto killed = Clock::now();
  loom::Status s;
  while (s.isOk() && Clock::now() - killed < std::chrono::seconds(5)) {
    s = GetParam() == Waiting::kToReceive ? link->recvSome(hello, sizeof(hello), &done)
        : GetParam() == Waiting::kOnAFullFifo ? link->sendSome(big.data(), 1000, &done)
                                              : link->sendSome(big.data(), big.size(), &done);
    EXPECT_EQ(done, 0u);
    std::this_thread::yield();
  }
  EXPECT_LT(Clock::now() - killed, std::chrono::seconds(2));
  EXPECT_EQ(s.code(), loomRemoteError) << s.message();
  EXPECT_NE(s.message().find("rank 1"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find(std::to_string(child)), std::string::npos) << s.message();
  int status = 0;
  EXPECT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "child status " << status;
  EXPECT_EQ(dir.entries(), std::vector<std::string>());
  transport.reset();
  LOOM_EXPECT_OK(loomCommDestroy(comm), nullptr);
}

std::string waitingName(const ::testing::TestParamInfo<Waiting>& info) {
  switch (info.param) {
    case Waiting::kToReceive: return "ToReceive";
    case Waiting::kOnAFullFifo: return "OnAFullFifo";
    case Waiting::kForAPostedSendToBeRead: return "ForAPostedSendToBeRead";
  }
  return "";
}

INSTANTIATE_TEST_SUITE_P(Shm, ShmDeadPeer,
                         ::testing::Values(Waiting::kToReceive, Waiting::kOnAFullFifo, Waiting::kForAPostedSendToBeRead),
                         waitingName);

// ---- A full tmpfs ----

bool writeFile(const char* path, const std::string& text) {
  int fd = ::open(path, O_WRONLY);
  if (fd < 0) return false;
  bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  return ok;
}

// Mounts a 64 KiB tmpfs on `dir` in a mount namespace of this (single-threaded, forked)
// process only. Returns why it could not ("" on success).
std::string mountTinyTmpfs(const std::string& dir) {
  if (::unshare(CLONE_NEWNS) != 0) {
    // Not privileged: a user namespace makes this process root enough to mount a tmpfs.
    uid_t uid = ::getuid();
    gid_t gid = ::getgid();
    if (::unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) {
      return std::string("unshare(CLONE_NEWNS) and unshare(CLONE_NEWUSER|CLONE_NEWNS) failed: ") + std::strerror(errno);
    }
    if (!writeFile("/proc/self/setgroups", "deny") ||
        !writeFile("/proc/self/uid_map", "0 " + std::to_string(uid) + " 1") ||
        !writeFile("/proc/self/gid_map", "0 " + std::to_string(gid) + " 1")) {
      return std::string("cannot map ids in a user namespace: ") + std::strerror(errno);
    }
  }
  // Nothing mounted here may propagate back to the real namespace.
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
    return std::string("making mounts private failed: ") + std::strerror(errno);
  }
  if (::mount("tmpfs", dir.c_str(), "tmpfs", 0, "size=64k") != 0) {
    return std::string("mounting a tmpfs failed: ") + std::strerror(errno);
  }
  return "";
}

// A ring allreduce over shared memory sends the bytes it reduces on to the next rank as it
// reduces them, from the cache (executor.cc, Run::forwardPiece), where the rest goes later
// from the receive buffer. Results stay exact in place and out of place, with the streaming
// protocol's reductions stored non-temporally (from its scratch) and plainly (LOOM_REDUCTION_STORES),
// with an average divided piece by piece, and with a FIFO far smaller than a piece
// (forwarding stops part-way), and with non-temporal stores into the FIFO; with the default
// FIFO bytes are forwarded, also where sends from 4 KiB could be offered for direct reads
// (the ring's sends are not: Step::viaFifo).
struct ForwardingSetting {
  const char* name;
  const char* fifoBytes;       // LOOM_SHM_FIFO_BYTES
  const char* streamingBytes;  // LOOM_STREAMING_MIN_BYTES (with LOOM_PROTO=streaming)
  const char* fifoStores = "cached";  // LOOM_SHM_FIFO_STORES
  const char* reductionStores = "auto";  // LOOM_REDUCTION_STORES
  bool directReads = false;  // LOOM_SHM_DIRECT=all from 4 KiB
};
using ForwardingParam = std::tuple<Mode, int, ForwardingSetting>;
class ShmForwarding : public ::testing::TestWithParam<ForwardingParam> {};

TEST_P(ShmForwarding, AllReduceResultsAreExactAndReducedBytesGoOnFromTheCache) {
  const auto& [mode, nranks, setting] = GetParam();
  ScopedEnv env;
  env.set("LOOM_TRANSPORTS", "shm").set("LOOM_ALGO", "ring").set("LOOM_CHUNK_SIZE", "65536");
  env.set("LOOM_SHM_FIFO_STORES", setting.fifoStores).set("LOOM_REDUCTION_STORES", setting.reductionStores);
  if (setting.fifoBytes != nullptr) env.set("LOOM_SHM_FIFO_BYTES", setting.fifoBytes);
  if (setting.directReads) env.set("LOOM_SHM_DIRECT", "all").set("LOOM_SHM_DIRECT_MIN_BYTES", "4096");
  if (setting.streamingBytes != nullptr) {
    env.set("LOOM_PROTO", "streaming").set("LOOM_STREAMING_MIN_BYTES", setting.streamingBytes);
  }
  loomtest::runRanks(nranks, mode, [&](loomComm_t comm, int rank) {
    const size_t count = 300001;  // not a multiple of the ranks, pieces or slices
    auto value = [](int r, size_t i) { return static_cast<int32_t>(i % 1009) * (r + 1) - 500 * r; };
    for (loomRedOp_t op : {loomSum, loomAvg, loomMax}) {
      for (bool inPlace : {false, true}) {
        std::vector<int32_t> send(count), recv(count, -7);
        for (size_t i = 0; i < count; ++i) send[i] = value(rank, i);
        int32_t* out = inPlace ? send.data() : recv.data();
        ASSERT_EQ(loomAllReduce(send.data(), out, count, loomInt32, op, comm, nullptr), loomSuccess);
        for (size_t i = 0; i < count; ++i) {
          int64_t sum = 0;
          int32_t max = value(0, i);
          for (int r = 0; r < nranks; ++r) {
            sum += value(r, i);
            max = std::max(max, value(r, i));
          }
          const int64_t want = op == loomSum ? sum : op == loomAvg ? sum / nranks : max;
          ASSERT_EQ(out[i], want) << "rank " << rank << " element " << i << " op " << op << (inPlace ? " in place" : "");
        }
      }
    }
    auto& communicator = *reinterpret_cast<loom::Communicator*>(comm);
    if (setting.fifoBytes == nullptr) {
      EXPECT_GT(communicator.forwardedBytes(), 0u) << "rank " << rank;
    }
    if (!setting.directReads) return;
    auto offered = [&] {
      uint64_t sends = 0;
      for (int peer = 0; peer < nranks; ++peer) {
        for (int l = 0; peer != rank && l < communicator.transport().linksPerPeer(); ++l) {
          const Link* link = communicator.transport().link(peer, l);  // nullptr: never connected
          if (link != nullptr) sends += link->offeredSends();
        }
      }
      return sends;
    };
    EXPECT_EQ(offered(), 0u) << "rank " << rank;
    // An allgather's receivers copy, so its sends are offered.
    std::vector<int32_t> all(count * static_cast<size_t>(nranks));
    ASSERT_EQ(loomAllGather(all.data() + count * static_cast<size_t>(rank), all.data(), count, loomInt32, comm, nullptr),
              loomSuccess);
    EXPECT_GT(offered(), 0u) << "rank " << rank;
  });
}

INSTANTIATE_TEST_SUITE_P(
    Shm, ShmForwarding,
    ::testing::Combine(::testing::Values(Mode::kThreads, Mode::kProcesses), ::testing::Values(2, 3, 4),
                       ::testing::Values(ForwardingSetting{"default_fifo", nullptr, nullptr},
                                         ForwardingSetting{"fifo_4096", "4096", nullptr},
                                         ForwardingSetting{"streaming", nullptr, "4096", "cached", "streaming"},
                                         ForwardingSetting{"streaming_plain_reductions", nullptr, "4096", "cached",
                                                           "cached"},
                                         ForwardingSetting{"streaming_fifo_stores", nullptr, nullptr, "streaming"},
                                         ForwardingSetting{"direct_reads", nullptr, nullptr, "cached", "auto", true})),
    [](const ::testing::TestParamInfo<ForwardingParam>& info) {
      return loomtest::modeName(std::get<0>(info.param)) + "_" + std::to_string(std::get<1>(info.param)) + "_" +
             std::get<2>(info.param).name;
    });

TEST(ShmFullTmpfs, IsASystemErrorThatSaysHowMuchAndHowToFixIt) {
  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  ScopedEnv env;
  env.set("LOOM_SHM_FIFO_BYTES", "262144");
  int pipeFds[2];
  ASSERT_EQ(::pipe(pipeFds), 0);
  std::fflush(nullptr);
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Reports "skip <why>" or "<result code> <message>" through the pipe.
    ::close(pipeFds[0]);
    std::string report;
    std::string why = mountTinyTmpfs(dir.path());
    if (!why.empty()) {
      report = "skip " + why;
    } else {
      loomComm_t comms[2] = {nullptr, nullptr};
      if (loomCommInitAll(comms, 2, nullptr) != loomSuccess) {
        report = "init failed: " + std::string(loomGetLastError(nullptr));
      } else {
        // Only the transport's segments go to the tiny tmpfs (the communicator's own are
        // made in the default directory).
        ::setenv("LOOM_SHM_DIR", dir.path().c_str(), 1);
        std::unique_ptr<ShmTransport> transport;
        loom::Status s = ShmTransport::create(bootstrapOf(comms[0]), {1}, fifoBytesOf(comms[0]), -1, &transport);
        if (s.isOk()) s = transport->connectOut({1}, loom::Deadline::afterMs(10000));
        report = std::to_string(s.code()) + " " + s.message();
        // The segment that did not fit must not stay behind either.
        if (!dir.entries().empty()) report += " LEFTOVER FILES";
      }
    }
    bool written = ::write(pipeFds[1], report.data(), report.size()) == static_cast<ssize_t>(report.size());
    ::_exit(written ? 0 : 1);
  }
  ::close(pipeFds[1]);
  std::string report;
  char buffer[512];
  for (ssize_t n; (n = ::read(pipeFds[0], buffer, sizeof(buffer))) > 0;) report.append(buffer, static_cast<size_t>(n));
  ::close(pipeFds[0]);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status << ": " << report;
  if (report.rfind("skip ", 0) == 0) GTEST_SKIP() << "no private tmpfs here: " << report.substr(5);
  std::printf("the error: %s\n", report.c_str());
  EXPECT_EQ(report.rfind(std::to_string(loomSystemError) + " ", 0), 0u) << report;
  for (const char* part : {"536576 bytes", "--shm-size", "remount,size=", "LOOM_SHM_FIFO_BYTES",
                           "LOOM_TRANSPORTS=socket", "ranks 0 and 1"}) {
    EXPECT_NE(report.find(part), std::string::npos) << "no \"" << part << "\" in: " << report;
  }
  EXPECT_EQ(report.find("LEFTOVER"), std::string::npos) << report;
}

}  // namespace
