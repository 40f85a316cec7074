// Addresses, unique ids and secrets: the bytes that cross between ranks.
#include <gtest/gtest.h>

#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cstring>

#include "base/socket.h"
#include "bootstrap/unique_id.h"

namespace {

using loom::SocketAddress;

TEST(SocketAddress, WireFormRoundTripsIpv4AndIpv6) {
  for (const char* host : {"127.0.0.1", "10.1.2.3", "::1", "[fe80::1]", "2001:db8::42"}) {
    SocketAddress a;
    ASSERT_TRUE(SocketAddress::resolve(host, 4242, &a).isOk()) << host;
    uint8_t wire[SocketAddress::kWireBytes];
    a.toWire(wire);
    SocketAddress b;
    ASSERT_TRUE(SocketAddress::fromWire(wire, &b).isOk()) << host;
    EXPECT_EQ(a.toString(), b.toString());
    EXPECT_EQ(b.port(), 4242);
    EXPECT_EQ(a.family(), b.family());
  }
  SocketAddress v6;
  ASSERT_TRUE(SocketAddress::resolve("[::1]", 7, &v6).isOk());
  EXPECT_EQ(v6.toString(), "[::1]:7");
  EXPECT_TRUE(v6.isLoopback());
}

TEST(SocketAddress, MalformedInputIsAnError) {
  SocketAddress a;
  EXPECT_EQ(SocketAddress::resolve("no-such-host.invalid", 1, &a).code(), loomInvalidArgument);
  EXPECT_EQ(SocketAddress::resolve("127.0.0.1", 70000, &a).code(), loomInvalidArgument);
  uint8_t junk[SocketAddress::kWireBytes];
  std::memset(junk, 0xff, sizeof(junk));
  EXPECT_EQ(SocketAddress::fromWire(junk, &a).code(), loomInvalidArgument);
}

TEST(Interfaces, NcclStyleSpecs) {
  auto lo = loom::matchInterfaces("lo");
  ASSERT_FALSE(lo.empty()) << "a loopback interface is always up";
  for (auto& [name, address] : lo) EXPECT_EQ(name.rfind("lo", 0), 0u);
  for (auto& [name, address] : loom::matchInterfaces("^lo")) EXPECT_NE(name.rfind("lo", 0), 0u);
  EXPECT_FALSE(loom::matchInterfaces("=lo").empty());
  EXPECT_TRUE(loom::matchInterfaces("=l").empty());
  EXPECT_TRUE(loom::matchInterfaces("definitely-not-an-interface").empty());
}

TEST(Secret, HexParsingIsStrict) {
  loom::Secret s;
  ASSERT_TRUE(loom::Secret::fromHex("00112233445566778899AABBCCDDEEFF", &s).isOk());
  EXPECT_EQ(s.bytes[0], 0x00);
  EXPECT_EQ(s.bytes[15], 0xff);
  EXPECT_EQ(loom::Secret::fromHex("0011", &s).code(), loomInvalidArgument);
  EXPECT_EQ(loom::Secret::fromHex("0011223344556677889900aabbccddgg", &s).code(), loomInvalidArgument);
}

TEST(Secret, MatchingAndDerivation) {
  loom::Secret a, b;
  ASSERT_TRUE(loom::Secret::random(&a).isOk());
  ASSERT_TRUE(loom::Secret::random(&b).isOk());
  EXPECT_TRUE(a.matches(a.bytes.data()));
  EXPECT_FALSE(a.matches(b.bytes.data()));
  EXPECT_EQ(loom::Secret::derive("h:1/2").bytes, loom::Secret::derive("h:1/2").bytes);
  EXPECT_NE(loom::Secret::derive("h:1/2").bytes, loom::Secret::derive("h:1/3").bytes);
}

TEST(UniqueId, EncodesAddressAndSecretIn128Bytes) {
  static_assert(sizeof(loomUniqueId) == 128);
  loom::UniqueId id;
  ASSERT_TRUE(SocketAddress::resolve("::1", 999, &id.root).isOk());
  ASSERT_TRUE(loom::Secret::random(&id.secret).isOk());
  loomUniqueId raw;
  id.encode(&raw);
  loom::UniqueId back;
  ASSERT_TRUE(loom::UniqueId::decode(raw, &back).isOk());
  EXPECT_EQ(back.root.toString(), "[::1]:999");
  EXPECT_EQ(back.secret.bytes, id.secret.bytes);
  raw.internal[4] = 9;  // another format version
  EXPECT_EQ(loom::UniqueId::decode(raw, &back).code(), loomInvalidArgument);
}

// A header and a payload leave in one call and arrive split however the receiver asks;
// nothing to read is 0 bytes, not an error; a closed peer is loomRemoteError.
TEST(SocketIo, PiecesGoOutAndComeInAsOneStream) {
  int fds[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, fds), 0);
  char header[24], body[40];
  for (size_t i = 0; i < sizeof header; ++i) header[i] = static_cast<char>('a' + i % 26);
  for (size_t i = 0; i < sizeof body; ++i) body[i] = static_cast<char>('0' + i % 10);
  const iovec out[2] = {{header, sizeof header}, {body, sizeof body}};
  size_t done = 0;
  ASSERT_TRUE(loom::sendSomeOf(fds[0], out, 2, &done).isOk());
  ASSERT_EQ(done, sizeof header + sizeof body);
  char first[10], second[64];
  const iovec in[2] = {{first, sizeof first}, {second, sizeof second}};
  ASSERT_TRUE(loom::recvSomeOf(fds[1], in, 2, &done).isOk());
  ASSERT_EQ(done, sizeof header + sizeof body);
  EXPECT_EQ(std::memcmp(first, header, sizeof first), 0);
  EXPECT_EQ(std::memcmp(second, header + sizeof first, sizeof header - sizeof first), 0);
  EXPECT_EQ(std::memcmp(second + sizeof header - sizeof first, body, sizeof body), 0);
  ASSERT_TRUE(loom::recvSomeOf(fds[1], in, 2, &done).isOk());
  EXPECT_EQ(done, 0u);
  ::close(fds[0]);
  loom::Status closed = loom::recvSomeOf(fds[1], in, 2, &done);
  EXPECT_EQ(closed.code(), loomRemoteError) << closed.message();
  ::close(fds[1]);
}

// The kernel stores twice what it was given (room for its bookkeeping), so 64 KiB reads
// back as 128 KiB; 0 leaves the socket as it was.
TEST(SocketIo, SendBufferIsCappedOrLeftToTheKernel) {
  const loom::Fd fd(::socket(AF_INET, SOCK_STREAM, 0));
  ASSERT_TRUE(fd.valid());
  int before = 0, after = 0;
  socklen_t len = sizeof before;
  ASSERT_EQ(::getsockopt(fd.get(), SOL_SOCKET, SO_SNDBUF, &before, &len), 0);
  loom::setSendBuffer(fd.get(), 0);
  ASSERT_EQ(::getsockopt(fd.get(), SOL_SOCKET, SO_SNDBUF, &after, &len), 0);
  EXPECT_EQ(after, before);
  loom::setSendBuffer(fd.get(), 65536);
  ASSERT_EQ(::getsockopt(fd.get(), SOL_SOCKET, SO_SNDBUF, &after, &len), 0);
  EXPECT_EQ(after, 2 * 65536);
}

}  // namespace
