// Statuses: their formatted sentences, and errors from errno (status.h).
#include "base/status.h"

#include <cstdarg>
#include <cstdio>
#include <cstring>

namespace loom {
namespace {

std::string vformat(const char* fmt, va_list args) {
  va_list copy;
  va_copy(copy, args);
  int needed = std::vsnprintf(nullptr, 0, fmt, copy);
  va_end(copy);
  if (needed <= 0) return std::string();
  std::string out(static_cast<size_t>(needed), '\0');
  std::vsnprintf(out.data(), out.size() + 1, fmt, args);
  return out;
}

}  // namespace

const std::string& Status::noMessage() {
  static const std::string empty;
  return empty;
}

std::string format(const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  std::string out = vformat(fmt, args);
  va_end(args);
  return out;
}

Status error(loomResult_t code, const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  std::string message = vformat(fmt, args);
  va_end(args);
  return Status(code, std::move(message));
}

Status systemError(const char* what, int err) {
  return Status(loomSystemError, format("%s failed: %s (errno %d)", what, std::strerror(err), err));
}

}  // namespace loom
