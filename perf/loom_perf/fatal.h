// loom-perf stops at the first failed Loom call: it prints what failed and exits with status
// 1 at once, so that no rank of the job waits for a rank that gave up (the others see a dead
// peer and stop too).
#pragma once

#include <loom/loom.h>

namespace loomperf {

[[noreturn]] void fatal(const char* format, ...) __attribute__((format(printf, 1, 2)));

// fatal() naming `what`, the result and loomGetLastError(comm) unless r is loomSuccess.
void require(loomResult_t r, loomComm_t comm, const char* what);

}  // namespace loomperf
