// Making, encoding and decoding the unique id and its secret (unique_id.h).
#include "bootstrap/unique_id.h"

#include <sys/random.h>

#include <cerrno>
#include <cstring>

namespace loom {
namespace {
constexpr uint8_t kMagic[4] = {'L', 'M', 'I', 'D'};
constexpr uint16_t kFormatVersion = 1;
constexpr size_t kSecretOffset = 8;
constexpr size_t kAddressOffset = 24;
static_assert(kAddressOffset + SocketAddress::kWireBytes <= LOOM_UNIQUE_ID_BYTES);

int hexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

uint64_t fnv1a(const std::string& data, uint64_t seed) {
  uint64_t h = seed;
  for (unsigned char c : data) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}
}  // namespace

Status randomBytes(void* out, size_t bytes) {
  auto* p = static_cast<uint8_t*>(out);
  while (bytes > 0) {
    ssize_t n = ::getrandom(p, bytes, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return systemError("getrandom", errno);
    }
    p += n;
    bytes -= static_cast<size_t>(n);
  }
  return Status::ok();
}

Status Secret::random(Secret* out) { return randomBytes(out->bytes.data(), out->bytes.size()); }

Status Secret::fromHex(const std::string& hex, Secret* out) {
  if (hex.size() != 32) {
    return error(loomInvalidArgument, "LOOM_SECRET must be 32 hex digits (128 bits), got %zu characters",
                 hex.size());
  }
  for (size_t i = 0; i < 16; ++i) {
    int hi = hexValue(hex[2 * i]), lo = hexValue(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) {
      return error(loomInvalidArgument, "LOOM_SECRET must be 32 hex digits; character %zu is not one",
                   hi < 0 ? 2 * i : 2 * i + 1);
    }
    out->bytes[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  return Status::ok();
}

Secret Secret::derive(const std::string& material) {
  Secret s;
  uint64_t a = fnv1a("loom-derived-secret/a/" + material, 0xcbf29ce484222325ull);
  uint64_t b = fnv1a("loom-derived-secret/b/" + material, a);
  std::memcpy(s.bytes.data(), &a, 8);
  std::memcpy(s.bytes.data() + 8, &b, 8);
  return s;
}

bool Secret::matches(const uint8_t other[16]) const {
  uint8_t diff = 0;
  for (size_t i = 0; i < bytes.size(); ++i) diff |= static_cast<uint8_t>(bytes[i] ^ other[i]);
  return diff == 0;
}

void UniqueId::encode(loomUniqueId* out) const {
  auto* raw = reinterpret_cast<uint8_t*>(out->internal);
  std::memset(raw, 0, LOOM_UNIQUE_ID_BYTES);
  std::memcpy(raw, kMagic, 4);
  raw[4] = kFormatVersion >> 8;
  raw[5] = kFormatVersion & 0xff;
  std::memcpy(raw + kSecretOffset, secret.bytes.data(), 16);
  root.toWire(raw + kAddressOffset);
}

Status UniqueId::decode(const loomUniqueId& in, UniqueId* out) {
  const auto* raw = reinterpret_cast<const uint8_t*>(in.internal);
  if (std::memcmp(raw, kMagic, 4) != 0) {
    return error(loomInvalidArgument,
                 "the unique id is not one loomGetUniqueId made (bad magic); was it copied whole "
                 "to every rank?");
  }
  int version = raw[4] << 8 | raw[5];
  if (version != kFormatVersion) {
    return error(loomInvalidArgument, "the unique id has format version %d, this Loom reads %d",
                 version, kFormatVersion);
  }
  std::memcpy(out->secret.bytes.data(), raw + kSecretOffset, 16);
  return SocketAddress::fromWire(raw + kAddressOffset, &out->root);
}

}  // namespace loom
