// The probe kernels of loom-kernel-latency (probes.cu): each does one more piece of what the
// plan kernel does around its steps, so that the differences between their times say what
// each piece costs on the device.
#pragma once

#include <cstdint>

namespace loom::probe {

// What the probes touch: the plan kernel's own kinds of memory.
struct ProbeMemory {
  uint32_t* deviceCounter;  // device memory (LaunchState's counters)
  uint64_t* deviceWord;     // device memory (a step flag, a FIFO counter of a peer on this GPU)
  uint64_t* hostWords;      // pinned, mapped host memory, 4 words (Control: started, completed, ...)
  const uint32_t* hostAbort;  // pinned, mapped host memory (Control::abort)
};

enum class Probe {
  kEmpty,            // <<<1, 1>>>, a 16-byte parameter: the floor of a launch
  kEmptyPlanShape,   // <<<1, 512>>> with a parameter the size of the plan kernel's (LaunchArgs)
  kPrologue,         // + a device atomic and one store to host memory (the launch's "started")
  kEpilogueSys,      // + a system-scope fence and three stores to host memory (its end)
  kEpilogueGpu,      // the same with a device-scope fence
  kPollHost,         // + one system-scope acquire load of a host word (the abort word's poll)
  kHandshakeSys,     // + a release store and acquire load of a device word at system scope
  kHandshakeGpu,     // the same at device scope
};
constexpr int kProbes = 8;
const char* probeName(Probe p);

// Enqueues probe `p` on `stream` (a cudaStream_t); the launch's cudaError_t.
int launchProbe(Probe p, const ProbeMemory& memory, void* stream);

}  // namespace loom::probe
