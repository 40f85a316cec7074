// Joining the job a launcher started (loomCommInitFromEnv), for the multi-host rank programs.
#pragma once

#include <cstdio>

#include "loom/loom.h"

namespace loomtest {

// The communicator with *rank and *nranks filled in; nullptr (after printing why) on failure.
inline loomComm_t joinJob(int* rank, int* nranks) {
  loomComm_t comm = nullptr;
  const loomResult_t r = loomCommInitFromEnv(&comm, nullptr);
  if (r != loomSuccess) {
    std::fprintf(stderr, "loomCommInitFromEnv: %s: %s\n", loomGetErrorString(r), loomGetLastError(nullptr));
    return nullptr;
  }
  loomCommUserRank(comm, rank);
  loomCommCount(comm, nranks);
  return comm;
}

}  // namespace loomtest
