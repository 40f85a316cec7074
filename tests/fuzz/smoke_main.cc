// A driver for wire_fuzz.cc where libFuzzer is not built (gcc): seeded random inputs and
// mutations of well-formed ones, so every build runs the parsers on hostile bytes.
//
//   wire_fuzz_smoke [INPUTS]     (default 1000000)
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "algorithms/plan.h"
#include "base/socket.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main(int argc, char** argv) {
  const long inputs = argc > 1 ? std::atol(argv[1]) : 1000000;
  std::mt19937_64 rng(12345);
  // Well-formed starting points: a call header and an address, which random bytes would
  // almost never produce.
  std::vector<std::vector<uint8_t>> seeds;
  {
    loom::CallInfo info;
    info.kind = loom::CallInfo::Kind::kReduce;
    info.count = 1000;
    info.root = 2;
    std::vector<uint8_t> s(1 + loom::kCallInfoWireBytes, 3);
    loom::encodeCallInfo(info, s.data() + 1);
    seeds.push_back(s);
    loom::SocketAddress address;
    if (loom::SocketAddress::resolve("127.0.0.1", 29500, &address).isOk()) {
      std::vector<uint8_t> a(1 + loom::SocketAddress::kWireBytes, 2);
      address.toWire(a.data() + 1);
      seeds.push_back(a);
    }
  }
  for (long i = 0; i < inputs; ++i) {
    std::vector<uint8_t> input;
    if (!seeds.empty() && i % 2 == 0) {
      input = seeds[static_cast<size_t>(i / 2) % seeds.size()];
      for (int flips = 1 + static_cast<int>(rng() % 4); flips > 0; --flips) input[rng() % input.size()] ^= static_cast<uint8_t>(1u << (rng() % 8));
    } else {
      input.resize(rng() % 200);
      for (uint8_t& b : input) b = static_cast<uint8_t>(rng());
    }
    LLVMFuzzerTestOneInput(input.data(), input.size());
  }
  std::printf("wire_fuzz_smoke: %ld inputs, no crash\n", inputs);
  return 0;
}
