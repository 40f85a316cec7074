// The one place Loom keeps process-wide mutable state: the log sink, the live
// communicators and host streams (so a destroyed or made-up handle is an error, not a
// crash), and the bootstrap roots loomGetUniqueId started. Thread-safe.
#pragma once

#include <memory>
#include <mutex>
#include <unordered_set>
#include <vector>

#include "core/log.h"

namespace loom {

class BootstrapRoot;
class Communicator;
class HostStream;

class Registry {
 public:
  static Registry& instance();

  log::Logger& logger();

  void addComm(Communicator* comm);
  void removeComm(Communicator* comm);
  bool isLiveComm(const void* comm);

  void addStream(HostStream* stream);
  void removeStream(HostStream* stream);
  bool isLiveStream(const void* stream);

  // Keeps a root running until it finishes; finished ones are freed on the next call.
  void keepRoot(std::unique_ptr<BootstrapRoot> root);

 private:
  Registry();
  ~Registry();
  // In a child after fork(): the parent's threads do not exist here, so the roots they
  // ran are forgotten (their memory is left alone), never joined.
  static void forgetInheritedThreads();

  std::once_flag loggerOnce_;
  std::unique_ptr<log::Logger> logger_;
  std::mutex mutex_;
  std::unordered_set<const void*> comms_;
  std::unordered_set<const void*> streams_;
  std::vector<std::unique_ptr<BootstrapRoot>> roots_;
};

}  // namespace loom
