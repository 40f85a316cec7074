#include "fatal.h"

#include <cstdarg>
#include <cstdio>
#include <cstdlib>

namespace loomperf {

void fatal(const char* format, ...) {
  std::fflush(stdout);
  std::fputs("loom-perf: ", stderr);
  va_list args;
  va_start(args, format);
  std::vfprintf(stderr, format, args);
  va_end(args);
  std::fputc('\n', stderr);
  std::fflush(stderr);
  // Not exit(): other threads are inside Loom calls, and static destructors must not run
  // under them.
  std::_Exit(1);
}

void require(loomResult_t r, loomComm_t comm, const char* what) {
  if (r != loomSuccess) fatal("%s: %s: %s", what, loomGetErrorString(r), loomGetLastError(comm));
}

}  // namespace loomperf
