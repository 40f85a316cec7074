// The bootstrap under attack and under delay: strangers, garbage and stalled connections
// on the root's port do not break init, nor on every port of a working communicator its
// collectives; a missing rank turns into loomTimeout naming it; IPv6 roots work.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "base/socket.h"
#include "bootstrap/handshake.h"
#include "bootstrap/unique_id.h"
#include "core/communicator.h"
#include "multirank/harness.h"

#if defined(__SANITIZE_ADDRESS__)
// The sanitizer runtime's (GCC ships no sanitizer/allocator_interface.h to declare it).
extern "C" size_t __sanitizer_get_current_allocated_bytes();
#endif

namespace {

loom::UniqueId decode(const loomUniqueId& raw) {
  loom::UniqueId id;
  EXPECT_TRUE(loom::UniqueId::decode(raw, &id).isOk());
  return id;
}

loom::Fd connectRaw(const loom::SocketAddress& address) {
  loom::Fd fd;
  loom::Status s = loom::connectTo(address, loom::Deadline::afterMs(5000), -1, &fd);
  EXPECT_TRUE(s.isOk()) << s.message();
  return fd;
}

void sendRaw(const loom::Fd& fd, const void* data, size_t bytes) {
  loom::Status s = loom::sendAll(fd.get(), data, bytes, loom::Deadline::afterMs(5000), -1);
  EXPECT_TRUE(s.isOk()) << s.message();
}

// Ranks init in threads against an id whose root already has visitors.
void initAllRanks(const loomUniqueId& id, int nranks) {
  std::vector<loomComm_t> comms(static_cast<size_t>(nranks), nullptr);
  std::vector<std::thread> threads;
  loomConfig_t config = LOOM_CONFIG_INITIALIZER;
  config.initTimeoutMs = 20000;
  for (int r = 0; r < nranks; ++r) {
    threads.emplace_back([&, r] {
      LOOM_EXPECT_OK(loomCommInitRankConfig(&comms[static_cast<size_t>(r)], nranks, id, r, &config), nullptr);
      LOOM_EXPECT_OK(loomBarrier(comms[static_cast<size_t>(r)], nullptr), comms[static_cast<size_t>(r)]);
    });
  }
  for (std::thread& t : threads) t.join();
  for (loomComm_t c : comms) LOOM_EXPECT_OK(loomCommDestroy(c), nullptr);
}

TEST(Bootstrap, StrangersOnTheRootPortAreDroppedAndInitCarriesOn) {
  loomUniqueId raw;
  LOOM_ASSERT_OK(loomGetUniqueId(&raw), nullptr);
  loom::UniqueId id = decode(raw);

  // 1. garbage bytes; 2. a well-formed hello with the wrong secret; 3. a connection that
  // says nothing at all (it would stall a naive root); 4. a truncated hello.
  loom::Fd garbage = connectRaw(id.root);
  std::string junk(4096, '\xab');
  sendRaw(garbage, junk.data(), junk.size());

  loom::Secret wrong = id.secret;
  wrong.bytes[0] ^= 1;
  loom::Fd impostor;
  loom::Hello hello{loom::Purpose::kRegister, 0, 2, 0};
  ASSERT_TRUE(loom::connectAndGreet(id.root, wrong, hello, loom::Deadline::afterMs(5000), -1, &impostor).isOk());

  loom::Fd silent = connectRaw(id.root);
  loom::Fd truncated = connectRaw(id.root);
  sendRaw(truncated, "LMHS", 4);

  initAllRanks(raw, 2);

  // The impostor got no reply: the root closed it.
  char byte;
  EXPECT_LE(::recv(impostor.get(), &byte, 1, 0), 0);
}

TEST(Bootstrap, AcceptorCountsEveryKindOfRejection) {
  loom::Secret secret;
  ASSERT_TRUE(loom::Secret::random(&secret).isOk());
  loom::SocketAddress any;
  ASSERT_TRUE(loom::SocketAddress::resolve("127.0.0.1", 0, &any).isOk());
  loom::Fd listenFd;
  loom::SocketAddress bound;
  ASSERT_TRUE(loom::listenOn(any, &listenFd, &bound).isOk());
  loom::Acceptor acceptor(std::move(listenFd), bound, secret, loom::Purpose::kBootstrap,
                          /*handshakeTimeoutMs=*/300);

  loom::Fd garbage = connectRaw(bound);
  std::string junk(64, 'x');
  sendRaw(garbage, junk.data(), junk.size());
  loom::Secret wrong = secret;
  wrong.bytes[15] ^= 0x80;
  loom::Fd impostor, otherPort, good;
  loom::Hello hello{loom::Purpose::kBootstrap, 1, 2, 7};
  auto later = loom::Deadline::afterMs(5000);
  ASSERT_TRUE(loom::connectAndGreet(bound, wrong, hello, later, -1, &impostor).isOk());
  loom::Hello transport{loom::Purpose::kTransport, 1, 2, 7};
  ASSERT_TRUE(loom::connectAndGreet(bound, secret, transport, later, -1, &otherPort).isOk());
  loom::Fd notice;  // failure notices belong on transport ports only
  loom::Hello noticeHello{loom::Purpose::kBootstrap, 1, 2, 7, 0, loom::Intent::kNotice};
  ASSERT_TRUE(loom::connectAndGreet(bound, secret, noticeHello, later, -1, &notice).isOk());
  loom::Fd staller = connectRaw(bound);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_TRUE(loom::connectAndGreet(bound, secret, hello, later, -1, &good).isOk());

  loom::Acceptor::Connection conn;
  loom::Status s = acceptor.next(loom::Deadline::afterMs(5000), -1, &conn);
  ASSERT_TRUE(s.isOk()) << s.message();
  EXPECT_EQ(conn.hello.rank, 1);
  EXPECT_EQ(conn.hello.commId, 7u);
  EXPECT_EQ(acceptor.rejected(), 4);  // garbage, wrong secret, wrong purpose, intent on the wrong port

  // The staller is dropped once its handshake time is up; nothing else arrives.
  s = acceptor.next(loom::Deadline::afterMs(800), -1, &conn);
  EXPECT_EQ(s.code(), loomTimeout) << s.message();
  EXPECT_EQ(acceptor.rejected(), 5);
}

TEST(Bootstrap, MissingRankIsATimeoutNamingIt) {
  loomUniqueId id;
  LOOM_ASSERT_OK(loomGetUniqueId(&id), nullptr);
  loomConfig_t config = LOOM_CONFIG_INITIALIZER;
  config.initTimeoutMs = 1500;
  loomComm_t comm = nullptr;
  auto start = std::chrono::steady_clock::now();
  // Ranks 0 and 2 of 3 come; rank 1 never does.
  std::thread other([&] {
    loomComm_t c = nullptr;
    EXPECT_EQ(loomCommInitRankConfig(&c, 3, id, 2, &config), loomTimeout);
    EXPECT_EQ(c, nullptr);
  });
  EXPECT_EQ(loomCommInitRankConfig(&comm, 3, id, 0, &config), loomTimeout);
  other.join();
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(comm, nullptr);
  std::string message = loomGetLastError(nullptr);
  EXPECT_NE(message.find("rank(s) 1 never arrived"), std::string::npos) << message;
  EXPECT_LT(seconds, 6.0);
}

TEST(Bootstrap, MismatchedNranksIsRejected) {
  loomUniqueId id;
  LOOM_ASSERT_OK(loomGetUniqueId(&id), nullptr);
  loomConfig_t config = LOOM_CONFIG_INITIALIZER;
  config.initTimeoutMs = 1500;
  loomComm_t a = nullptr, b = nullptr;
  std::thread first([&] { EXPECT_EQ(loomCommInitRankConfig(&a, 2, id, 0, &config), loomTimeout); });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(loomCommInitRankConfig(&b, 3, id, 1, &config), loomInvalidUsage);
  EXPECT_NE(std::string(loomGetLastError(nullptr)).find("nranks=3"), std::string::npos)
      << loomGetLastError(nullptr);
  first.join();
}

TEST(Bootstrap, Ipv6Root) {
  loom::SocketAddress probe;
  loom::Fd fd;
  loom::SocketAddress bound;
  if (!loom::SocketAddress::resolve("::1", 0, &probe).isOk() || !loom::listenOn(probe, &fd, &bound).isOk()) {
    GTEST_SKIP() << "skipped: this machine has no IPv6 loopback";
  }
  fd.reset();
  ::setenv("LOOM_MASTER_ADDR", "::1", 1);
  loomUniqueId id;
  loomResult_t r = loomGetUniqueId(&id);
  ::unsetenv("LOOM_MASTER_ADDR");
  LOOM_ASSERT_OK(r, nullptr);
  EXPECT_EQ(decode(id).root.family(), AF_INET6);
  initAllRanks(id, 3);
}

// A connection that knows the secret but claims another communicator (a stale job, a
// confused peer) is dropped by the rank's bootstrap listener; the ranks carry on.
TEST(Bootstrap, RankListenerDropsClaimsForOtherCommunicators) {
  // Three ranks: during init rank 2 only ever heard from rank 1 (the ring), so rank 0's
  // connection below comes after the strangers' in rank 2's accept queue.
  std::vector<loomComm_t> comms(3);
  LOOM_ASSERT_OK(loomCommInitAll(comms.data(), 3, nullptr), nullptr);
  loom::Bootstrap& b = reinterpret_cast<loom::Communicator*>(comms[2])->bootstrap();
  loom::Fd stale, garbage;
  loom::Hello wrongComm{loom::Purpose::kBootstrap, 0, 3, b.commId() ^ 1};
  ASSERT_TRUE(loom::connectAndGreet(b.address(), b.secret(), wrongComm, loom::Deadline::afterMs(5000), -1, &stale).isOk());
  garbage = connectRaw(b.address());
  sendRaw(garbage, "GET / HTTP/1.0\r\n\r\n", 18);

  // Rank 0 -> rank 2 over the bootstrap channel, which must skip both strangers.
  std::thread sender([&] {
    int value = 77;
    auto* rank0 = reinterpret_cast<loom::Communicator*>(comms[0]);
    loom::Status s = rank0->bootstrap().send(2, 5, &value, sizeof(value));
    EXPECT_TRUE(s.isOk()) << s.message();
  });
  int got = 0;
  loom::Status s = b.recv(0, 5, &got, sizeof(got));
  sender.join();
  EXPECT_TRUE(s.isOk()) << s.message();
  EXPECT_EQ(got, 77);
  for (loomComm_t c : comms) LOOM_EXPECT_OK(loomCommDestroy(c), nullptr);
}

// Word that may go unread (Bootstrap::offer, core/remote_announcements.h): offered until the
// connection takes no more, never blocking and never cut short; the peer then reads every one
// whole and in order, and a message sent after them arrives intact.
TEST(Bootstrap, OffersStopWhenTheConnectionIsFullAndAreNeverCutShort) {
  std::vector<loomComm_t> comms(2);
  LOOM_ASSERT_OK(loomCommInitAll(comms.data(), 2, nullptr), nullptr);
  loom::Bootstrap& from = reinterpret_cast<loom::Communicator*>(comms[0])->bootstrap();
  loom::Bootstrap& to = reinterpret_cast<loom::Communicator*>(comms[1])->bootstrap();
  struct Word {
    uint64_t index;
    uint8_t rest[40];
  };
  constexpr uint32_t kOffered = 9, kAfter = 10;
  constexpr uint64_t kMost = 1 << 22;
  uint64_t offered = 0;
  const auto start = std::chrono::steady_clock::now();
  for (Word w{}; offered < kMost; w.index = ++offered) {
    std::memset(w.rest, static_cast<int>(offered & 0xff), sizeof w.rest);
    if (!from.offer(1, kOffered, &w, sizeof w, loom::Deadline::afterMs(1000))) break;
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_LT(offered, kMost) << "the connection took every offer";
  EXPECT_GT(offered, 100u);
  EXPECT_LT(seconds, 5.0) << "an offer waited";
  for (uint64_t i = 0; i < offered; ++i) {
    Word w{};
    const loom::Status s = to.recv(0, kOffered, &w, sizeof w, loom::Deadline::afterMs(5000));
    ASSERT_TRUE(s.isOk()) << "word " << i << " of " << offered << ": " << s.message();
    ASSERT_EQ(w.index, i);
    ASSERT_EQ(w.rest[39], static_cast<uint8_t>(i & 0xff)) << "word " << i;
  }
  // Again, taken in one pass this time (as RemoteAnnouncements::listen takes them).
  uint64_t again = 0;
  for (Word w{}; again < kMost; w.index = ++again) {
    if (!from.offer(1, kOffered, &w, sizeof w, loom::Deadline::afterMs(1000))) break;
  }
  uint64_t drained = 0;
  // What the sender's side still held comes as the reads open the window.
  const loom::Deadline until = loom::Deadline::afterMs(5000);
  while (drained < again && !until.expired()) {
    to.drain(kOffered, [&](int peer, const uint8_t* data, size_t bytes) {
      Word w{};
      ASSERT_EQ(peer, 0);
      ASSERT_EQ(bytes, sizeof w);
      std::memcpy(&w, data, sizeof w);
      ASSERT_EQ(w.index, drained++);
    });
  }
  EXPECT_EQ(drained, again);
  std::thread sender([&] {
    const int value = 77;
    const loom::Status s = from.send(1, kAfter, &value, sizeof value);
    EXPECT_TRUE(s.isOk()) << s.message();
  });
  int got = 0;
  const loom::Status s = to.recv(0, kAfter, &got, sizeof got);
  sender.join();
  EXPECT_TRUE(s.isOk()) << s.message();
  EXPECT_EQ(got, 77);
  std::printf("%llu offers taken before the connection was full, in %.3f s\n",
              static_cast<unsigned long long>(offered), seconds);
  for (loomComm_t c : comms) LOOM_EXPECT_OK(loomCommDestroy(c), nullptr);
}

TEST(Bootstrap, SocketIfnameChoosesTheInterface) {
  ::setenv("LOOM_SOCKET_IFNAME", "=lo", 1);
  loomUniqueId id;
  loomResult_t r = loomGetUniqueId(&id);
  LOOM_EXPECT_OK(r, nullptr);
  if (r == loomSuccess) {
    EXPECT_TRUE(decode(id).root.isLoopback()) << decode(id).root.toString();
    initAllRanks(id, 2);
  }
  ::setenv("LOOM_SOCKET_IFNAME", "no-such-interface", 1);
  EXPECT_EQ(loomGetUniqueId(&id), loomInvalidArgument);
  EXPECT_NE(std::string(loomGetLastError(nullptr)).find("LOOM_SOCKET_IFNAME=\"no-such-interface\" matches no interface"),
            std::string::npos) << loomGetLastError(nullptr);
  ::unsetenv("LOOM_SOCKET_IFNAME");
}

// The TCP ports this process listens on (IPv4 and IPv6), from /proc: the sockets of its own
// descriptors whose /proc/net entry is in state LISTEN.
std::vector<loom::SocketAddress> listeningPorts() {
  std::set<std::string> ours;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    const std::string target = std::filesystem::read_symlink(entry.path(), ec).string();
    if (!ec && target.rfind("socket:[", 0) == 0) ours.insert(target.substr(8, target.size() - 9));
  }
  std::vector<loom::SocketAddress> out;
  for (const char* table : {"/proc/self/net/tcp", "/proc/self/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      std::istringstream f(line);
      std::string slot, local, remote, state, queues, timer, retransmits, uid, timeout, inode;
      f >> slot >> local >> remote >> state >> queues >> timer >> retransmits >> uid >> timeout >> inode;
      if (state != "0A" || ours.count(inode) == 0) continue;
      const size_t colon = local.find(':');
      const std::string hex = local.substr(0, colon);
      const int port = std::stoi(local.substr(colon + 1), nullptr, 16);
      sockaddr_storage ss{};
      socklen_t len = 0;
      if (hex.size() == 8) {
        auto* a = reinterpret_cast<sockaddr_in*>(&ss);
        a->sin_family = AF_INET;
        a->sin_port = htons(static_cast<uint16_t>(port));
        a->sin_addr.s_addr = static_cast<uint32_t>(std::stoul(hex, nullptr, 16));  // as the kernel printed it
        len = sizeof(sockaddr_in);
      } else {
        auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
        a->sin6_family = AF_INET6;
        a->sin6_port = htons(static_cast<uint16_t>(port));
        for (int w = 0; w < 4; ++w) {
          const uint32_t word = static_cast<uint32_t>(std::stoul(hex.substr(8 * static_cast<size_t>(w), 8), nullptr, 16));
          std::memcpy(a->sin6_addr.s6_addr + 4 * w, &word, 4);
        }
        len = sizeof(sockaddr_in6);
      }
      out.emplace_back(reinterpret_cast<const sockaddr*>(&ss), len);
    }
  }
  return out;
}

// Socket-level fuzzing: while two ranks run checked allreduces over TCP, a stranger keeps
// connecting to every port the process listens on (bootstrap, transport) with what an
// attacker without the job's secret can send: nothing, random bytes, a hello with the magic
// but a wrong secret, a truncated hello left hanging, a megabyte of noise. The collectives
// must all come out right, on time, without the process's memory growing with the junk.
TEST(Bootstrap, StrangersOnEveryPortDoNotDisturbAWorkingCommunicator) {
  ::setenv("LOOM_TRANSPORTS", "socket", 1);
  ::setenv("LOOM_HANDSHAKE_TIMEOUT_MS", "200", 1);
  std::vector<loomComm_t> comms(2);
  LOOM_ASSERT_OK(loomCommInitAll(comms.data(), 2, nullptr), nullptr);
  ::unsetenv("LOOM_TRANSPORTS");
  ::unsetenv("LOOM_HANDSHAKE_TIMEOUT_MS");
  const std::vector<loom::SocketAddress> ports = listeningPorts();
  ASSERT_GE(ports.size(), 2u) << "each rank listens for its bootstrap and its socket transport";

  std::atomic<bool> stop{false};
  std::atomic<int> connections{0};
  std::thread stranger([&] {
    std::mt19937_64 rng(7);
    std::vector<loom::Fd> hanging;
    for (uint64_t i = 0; !stop.load(); ++i) {
      loom::Fd fd;
      if (!loom::connectTo(ports[i % ports.size()], loom::Deadline::afterMs(1000), -1, &fd).isOk()) continue;
      ++connections;
      // Nothing; random bytes; a hello's magic and version with a wrong secret; a hello cut
      // short (kept open); a megabyte of noise.
      const int kind = static_cast<int>(rng() % 5);
      const size_t sizes[] = {0, 1 + rng() % 65536, loom::kHelloBytes, 20, size_t{1} << 20};
      std::vector<uint8_t> junk(sizes[kind]);
      for (uint8_t& b : junk) b = static_cast<uint8_t>(rng());
      if (kind == 2) std::memcpy(junk.data(), "LMHS\x01\x00", 6);
      size_t sent = 0;
      // The peer may drop us at any point: what got through is what counts.
      (void)loom::sendSome(fd.get(), junk.data(), junk.size(), &sent);
      if (kind == 3) hanging.push_back(std::move(fd));
      if (hanging.size() > 16) hanging.erase(hanging.begin());
    }
  });

  // Resident memory; under ASan the heap's live bytes instead, as its quarantine keeps every
  // freed block resident (the strangers' megabytes of noise: 45-67 MiB more over a run).
  auto rssKiB = [] {
#if defined(__SANITIZE_ADDRESS__)
    return static_cast<long>(__sanitizer_get_current_allocated_bytes() / 1024);
#else
    std::ifstream status("/proc/self/status");
    for (std::string line; std::getline(status, line);) {
      if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
    }
    return 0L;
#endif
  };
  // Rounds of calls until the stranger has made enough connections to mean something, at least
  // 300 calls: on a loaded machine its thread gets the CPU less often (42 connections in 300
  // calls once, while a build ran beside the test). The bound keeps a stranger that cannot
  // connect at all from holding the test: the count below then fails it.
  const int kCallsPerRound = 100;
  int calls = 0;
  long rssAfterFirst = 0;
  std::atomic<int> wrong{0};
  for (int round = 0; round < 100 && (round < 3 || connections.load() <= 50); ++round) {
    std::vector<std::thread> ranks;
    for (int r = 0; r < 2; ++r) {
      ranks.emplace_back([&, r] {
        std::vector<float> send(65536), recv(65536);
        for (int i = calls; i < calls + kCallsPerRound; ++i) {
          std::fill(send.begin(), send.end(), static_cast<float>(r + 1 + i));
          LOOM_EXPECT_OK(loomAllReduce(send.data(), recv.data(), send.size(), loomFloat32, loomSum,
                                       comms[static_cast<size_t>(r)], nullptr),
                         comms[static_cast<size_t>(r)]);
          for (float v : recv) wrong += v != static_cast<float>(3 + 2 * i);
          if (r == 0 && i == 10) rssAfterFirst = rssKiB();
        }
      });
    }
    for (std::thread& t : ranks) t.join();
    calls += kCallsPerRound;
  }
  stop = true;
  stranger.join();
  const long growth = rssKiB() - rssAfterFirst;
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_GT(connections.load(), 50) << "the stranger hardly got in";
  EXPECT_LT(growth, 64 * 1024) << "memory (resident; live heap under ASan) grew by " << growth << " KiB";
  for (loomComm_t c : comms) LOOM_EXPECT_OK(loomCommDestroy(c), nullptr);
  std::printf("%d stranger connections on %zu ports during %d allreduces per rank: every result right, "
              "memory (resident; live heap under ASan) %+ld KiB\n", connections.load(), ports.size(), calls, growth);
}

}  // namespace
