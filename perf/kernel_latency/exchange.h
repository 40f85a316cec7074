// Two kernels on one GPU meeting, as two thread ranks' plan kernels meet in an 8-byte
// allreduce (exchange.cu): each stores the number of its launch into a word of its own and
// waits until the other's word has that number. loom-kernel-latency times it with the
// launches coming from one host thread and from two, in loops and in CUDA graphs, to tell
// the device's part of a two-rank call from its launches' skew.
#pragma once

#include <cstdint>

namespace loom::probe {

struct ExchangeMemory {
  uint64_t* words;     // device memory, zeroed: side s posts at words[s * 16] and counts at words[s * 16 + 8]
  uint32_t* stalled;   // pinned, mapped host memory, zeroed: set once a kernel gave up waiting
};

// Seconds a kernel waits for the other side before it sets *stalled and ends (and every
// later kernel then ends at once): two kernels that cannot run side by side stop, not hang.
constexpr double kExchangeGiveUpSeconds = 1.0;

// Enqueues side `side`'s (0 or 1) next kernel on `stream` (a cudaStream_t); the launch's
// cudaError_t.
int launchExchange(const ExchangeMemory& memory, int side, void* stream);

}  // namespace loom::probe
