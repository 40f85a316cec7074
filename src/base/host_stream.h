// A host stream: an in-order queue of work run by its own progress thread, so host
// collectives overlap with the caller's computation as device ones do on CUDA streams. A
// caller that synchronizes while work no thread has started is queued runs it itself: it
// would only wait, and handing the work to the progress thread and back costs two thread
// wakeups (on a machine with as many ranks as cores, more than a small collective).
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "base/status.h"

namespace loom {

class HostStream {
 public:
  using Work = std::function<Status()>;

  HostStream();
  // Runs what is queued, then stops the thread.
  ~HostStream();
  HostStream(const HostStream&) = delete;
  HostStream& operator=(const HostStream&) = delete;

  // Returns at once; work runs after everything enqueued before it.
  void enqueue(Work work);
  // Waits until the queue is empty, running what is queued itself while no thread runs work;
  // returns (and clears) the first error since the last call.
  Status synchronize();
  // loomInProgress while work is queued or running; otherwise like synchronize.
  Status query();

 private:
  void serve();
  // Runs the queue's front, with mutex_ held on entry and on return.
  void runFront(std::unique_lock<std::mutex>& lock);

  std::mutex mutex_;
  std::condition_variable workArrived_;  // the progress thread waits here
  std::condition_variable idle_;         // synchronize() waits here
  std::deque<Work> queue_;
  bool running_ = false;  // a work item is executing outside the lock
  bool stopping_ = false;
  Status firstError_;
  std::thread thread_;
};

}  // namespace loom
