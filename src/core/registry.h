// The one place Loom keeps process-wide mutable state: the log sink, the live
// communicators, host streams and DDP reducers (so a destroyed or made-up handle is an
// error, not a crash), and the bootstrap roots loomGetUniqueId started. Thread-safe.
#pragma once

#include <memory>
#include <mutex>
#include <unordered_set>
#include <vector>

#include "core/log.h"

namespace loom {

class BootstrapRoot;

// Handles the API gave out and has not taken back. Thread-safe.
class HandleSet {
 public:
  void add(const void* handle);
  void remove(const void* handle);
  bool contains(const void* handle) const;

 private:
  mutable std::mutex mutex_;
  std::unordered_set<const void*> handles_;
};

class Registry {
 public:
  static Registry& instance();

  log::Logger& logger();

  HandleSet& comms() { return comms_; }
  HandleSet& streams() { return streams_; }
  HandleSet& reducers() { return reducers_; }

  // Keeps a root running until it finishes.
  void keepRoot(std::unique_ptr<BootstrapRoot> root);
  // Joins and frees the roots that have finished (called after every init and destroy,
  // so no finished thread outlives the work it served).
  void reapRoots();

 private:
  Registry();
  ~Registry();
  // In a child after fork(): the parent's threads do not exist here, so the roots they
  // ran are forgotten (their memory is left alone), never joined.
  static void forgetInheritedThreads();

  std::once_flag loggerOnce_;
  std::unique_ptr<log::Logger> logger_;
  std::mutex mutex_;
  HandleSet comms_;
  HandleSet streams_;
  HandleSet reducers_;
  std::vector<std::unique_ptr<BootstrapRoot>> roots_;
};

}  // namespace loom
