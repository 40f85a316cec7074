// The job's secret and the unique id that carries it with the root's address.
//
// loomUniqueId layout (128 bytes):
//   [0..3]   magic "LMID"        [4..5] format version   [6..7] zero
//   [8..23]  secret (16 bytes)   [24..55] root address (SocketAddress wire form)
//   [56..127] zero
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "base/socket.h"
#include "base/status.h"
#include "loom/loom.h"

namespace loom {

// 128 bits every connection must present. Compared in constant time.
struct Secret {
  std::array<uint8_t, 16> bytes{};

  static Status random(Secret* out);
  // Exactly 32 hex digits (LOOM_SECRET's format).
  static Status fromHex(const std::string& hex, Secret* out);
  // A secret anyone who knows `material` can compute: separates jobs, authenticates nothing.
  static Secret derive(const std::string& material);

  bool matches(const uint8_t other[16]) const;
};

struct UniqueId {
  SocketAddress root;
  Secret secret;

  void encode(loomUniqueId* out) const;
  static Status decode(const loomUniqueId& in, UniqueId* out);
};

// Fresh random bytes from the kernel (getrandom).
Status randomBytes(void* out, size_t bytes);

}  // namespace loom
