// Status: a loomResult_t plus the sentence that explains it. Every internal function that
// can fail returns one; LOOM_TRY propagates the first failure unchanged, so the message
// that reaches loomGetLastError names what went wrong where it went wrong.
#pragma once

#include <string>
#include <utility>

#include "loom/loom.h"

namespace loom {

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(loomResult_t code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok() { return Status(); }

  bool isOk() const { return code_ == loomSuccess; }
  loomResult_t code() const { return code_; }
  const std::string& message() const { return message_; }

  // Prefixes the message with where the failure was seen from ("bootstrap: ...").
  Status withContext(const std::string& context) const {
    if (isOk()) return *this;
    return Status(code_, context + ": " + message_);
  }

 private:
  loomResult_t code_ = loomSuccess;
  std::string message_;
};

// printf-style message builder for errors and logs.
std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

// An error of the given code with a printf-style message.
Status error(loomResult_t code, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

// A loomSystemError naming the failed call and errno's text.
Status systemError(const char* what, int err);

}  // namespace loom

#define LOOM_TRY(call)                          \
  do {                                          \
    ::loom::Status loom_try_status_ = (call);   \
    if (!loom_try_status_.isOk()) return loom_try_status_; \
  } while (0)
