// Fuzz target for the parsers of bytes that arrive from the network or a peer: the
// connection hello (before and after the secret check), the unique id, socket addresses on
// the wire, the bootstrap root's registration, and the call header a peer's first message
// carries. The first input byte picks the parser; the rest is its input. Nothing here may
// crash, read out of bounds or hit undefined behaviour, whatever the bytes.
//
// Built two ways (tests/fuzz/meson.build): with clang's libFuzzer (-Dfuzz=true; run by
// run_libfuzzer.sh for a bounded time), and with a plain driver (smoke_main.cc) that feeds
// it seeded random and mutated inputs in every build.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "algorithms/plan.h"
#include "base/socket.h"
#include "bootstrap/handshake.h"
#include "bootstrap/unique_id.h"

namespace {

// The fuzzer's secret is all zeros, so that inputs can get past the secret check too.
const loom::Secret& zeroSecret() {
  static const loom::Secret secret{};
  return secret;
}

template <size_t N>
bool take(const uint8_t*& data, size_t& size, uint8_t (&out)[N]) {
  if (size < N) return false;
  std::memcpy(out, data, N);
  data += N;
  size -= N;
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t which = data[0] % 5;
  ++data;
  --size;
  switch (which) {
    case 0: {  // the hello every Loom port reads first
      uint8_t hello[loom::kHelloBytes];
      if (!take(data, size, hello)) return 0;
      for (uint32_t purpose = 1; purpose <= 3; ++purpose) {
        loom::Hello out;
        const char* why = loom::parseHello(hello, zeroSecret(), static_cast<loom::Purpose>(purpose), &out);
        if (why == nullptr && out.purpose != static_cast<loom::Purpose>(purpose)) __builtin_trap();
        // Intents other than a plain connection exist only on transport ports.
        const auto intent = static_cast<uint16_t>(out.intent);
        if (why == nullptr && (intent > 2 || (intent != 0 && purpose != 3))) __builtin_trap();
      }
      break;
    }
    case 1: {  // a unique id handed over by the user (from anywhere)
      loomUniqueId raw;
      if (size < sizeof raw.internal) return 0;
      std::memcpy(raw.internal, data, sizeof raw.internal);
      loom::UniqueId id;
      if (loom::UniqueId::decode(raw, &id).isOk()) (void)id.root.toString();
      break;
    }
    case 2: {  // an address on the wire (bootstrap peers, registration)
      uint8_t wire[loom::SocketAddress::kWireBytes];
      if (!take(data, size, wire)) return 0;
      loom::SocketAddress address;
      if (loom::SocketAddress::fromWire(wire, &address).isOk()) {
        uint8_t again[loom::SocketAddress::kWireBytes];
        address.toWire(again);
        (void)address.toString();
      }
      break;
    }
    case 3: {  // the call header of a peer's first message of a call
      uint8_t header[loom::kCallInfoWireBytes];
      if (!take(data, size, header)) return 0;
      loom::CallInfo got;
      if (loom::decodeCallInfo(header, &got)) (void)got.describe();
      loom::CallInfo expected;
      expected.kind = loom::CallInfo::Kind::kAllReduce;
      (void)loom::checkCallInfo(header, expected, 1).message();
      break;
    }
    default: {  // everything at once: a hello followed by a header and an address
      uint8_t hello[loom::kHelloBytes];
      uint8_t header[loom::kCallInfoWireBytes];
      uint8_t wire[loom::SocketAddress::kWireBytes];
      if (!take(data, size, hello) || !take(data, size, header) || !take(data, size, wire)) return 0;
      loom::Hello out;
      (void)loom::parseHello(hello, zeroSecret(), loom::Purpose::kBootstrap, &out);
      loom::CallInfo got;
      (void)loom::decodeCallInfo(header, &got);
      loom::SocketAddress address;
      (void)loom::SocketAddress::fromWire(wire, &address);
      break;
    }
  }
  return 0;
}
