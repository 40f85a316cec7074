// Success, or the message of the first failure. loomrun is a standalone launcher that must
// not link the Loom library, so it carries its own small copy of the house error pattern.
#pragma once

#include <string>
#include <utility>

namespace loom::loomrun {

class Status {
 public:
  static Status ok() { return Status(); }
  // The message says what failed and with which value; callers pass it up unchanged.
  static Status error(std::string message) { return Status(std::move(message)); }

  bool isOk() const { return message_.empty(); }
  const std::string& message() const { return message_; }

 private:
  Status() = default;
  explicit Status(std::string message) : message_(std::move(message)) {}

  std::string message_;
};

}  // namespace loom::loomrun

// Returns the failure of `call` from the enclosing function, untouched.
#define LOOMRUN_TRY(call)                                        \
  do {                                                           \
    ::loom::loomrun::Status loomrun_try_status_ = (call);        \
    if (!loomrun_try_status_.isOk()) return loomrun_try_status_; \
  } while (0)
