// Status: a loomResult_t plus the sentence that explains it. Every internal function that
// can fail returns one; LOOM_TRY propagates the first failure unchanged, so the message
// that reaches loomGetLastError names what went wrong where it went wrong.
#pragma once

#include <memory>
#include <string>
#include <utility>

#include "loom/loom.h"

namespace loom {

class [[nodiscard]] Status {
 public:
  Status() = default;
  // A success code keeps no message.
  Status(loomResult_t code, std::string message)
      : failure_(code == loomSuccess ? nullptr : std::make_unique<Failure>(Failure{code, std::move(message)})) {}
  Status(const Status& other) : failure_(other.failure_ ? std::make_unique<Failure>(*other.failure_) : nullptr) {}
  Status& operator=(const Status& other) {
    if (this != &other) failure_ = other.failure_ ? std::make_unique<Failure>(*other.failure_) : nullptr;
    return *this;
  }
  Status(Status&&) noexcept = default;
  Status& operator=(Status&&) noexcept = default;

  static Status ok() { return Status(); }

  bool isOk() const { return failure_ == nullptr; }
  loomResult_t code() const { return failure_ ? failure_->code : loomSuccess; }
  const std::string& message() const { return failure_ ? failure_->message : noMessage(); }

  // Prefixes the message with where the failure was seen from ("bootstrap: ...").
  Status withContext(const std::string& context) const {
    if (isOk()) return *this;
    return Status(failure_->code, context + ": " + failure_->message);
  }

 private:
  // Only a failure is allocated: a success is one null pointer, which every call on the hot
  // path makes and drops several times.
  struct Failure {
    loomResult_t code;
    std::string message;
  };
  static const std::string& noMessage();
  std::unique_ptr<Failure> failure_;
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
