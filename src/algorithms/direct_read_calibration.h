// Whether the processes of this machine should read each other's large sends straight from
// the sender's memory (cross-memory attach: one copy, by the kernel) or through the
// shared-memory FIFO (two copies: the sender's into the ring, the receiver's out of it). The
// answer differs between machines: on the AMD EPYC VM the FIFO was 1.25-1.8x faster, on the
// Intel Xeon VM the single copy 1.5-3x (docs/RESULTS.md), so the machine calibration measures
// it (machine_calibration.h) and sets shm.direct_min_bytes (ShmTransport).
//
// Two threads on two CPUs stand in for two ranks: before each transfer each writes its send
// buffer (untimed: a collective's input was just made on its core), then both transfer at once,
// each way, through a FIFO of LOOM_SHM_FIFO_BYTES's default size or by process_vm_readv on this
// process (the kernel's path is the same for another process's memory).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace loom {

struct DirectReadFigures {
  struct Size {
    size_t bytes;     // each way
    double fifoUs;    // best time of a transfer both ways through the FIFO
    double directUs;  // the same read straight from the other's buffer
  };
  std::vector<Size> sizes;  // ascending
  size_t minBytes = 0;      // directReadMinBytes(sizes)
};

// Measures on two CPUs, this process's own first (then others the system allows: a rank bound
// to one core); false, with *whyNot, where a thread may run on one CPU only or the kernel
// refuses process_vm_readv (containers, seccomp: then no rank could read another's memory
// either).
bool measureDirectReads(DirectReadFigures* out, std::string* whyNot);

// The smallest measured size from which, at every larger size too, reading straight from the
// sender takes at most 0.97 of the FIFO's time (within that, a tie, which keeps the FIFO); 0
// (the FIFO at every size) when it does not at the largest.
size_t directReadMinBytes(const std::vector<DirectReadFigures::Size>& sizes);

}  // namespace loom
