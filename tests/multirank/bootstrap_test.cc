// The bootstrap under attack and under delay: strangers, garbage and stalled connections
// on the root's port do not break init; a missing rank turns into loomTimeout naming it;
// IPv6 roots work.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "core/communicator.h"
#include "core/handshake.h"
#include "core/socket.h"
#include "core/unique_id.h"
#include "multirank/harness.h"

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

}  // namespace
