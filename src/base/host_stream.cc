// A host stream's queue and progress thread (host_stream.h).
#include "base/host_stream.h"

namespace loom {

HostStream::HostStream() : thread_([this] { serve(); }) {}

HostStream::~HostStream() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  workArrived_.notify_all();
  thread_.join();
}

void HostStream::enqueue(Work work) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(std::move(work));
  }
  workArrived_.notify_one();
}

Status HostStream::synchronize() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!running_ && !queue_.empty()) runFront(lock);
  idle_.wait(lock, [this] { return queue_.empty() && !running_; });
  Status result = firstError_;
  firstError_ = Status();
  return result;
}

Status HostStream::query() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!queue_.empty() || running_) return Status(loomInProgress, "work is still queued on the stream");
  }
  return synchronize();
}

// Work runs one item at a time, in order, whichever thread runs it.
void HostStream::runFront(std::unique_lock<std::mutex>& lock) {
  Work work = std::move(queue_.front());
  queue_.pop_front();
  running_ = true;
  lock.unlock();
  Status s = work();
  lock.lock();
  running_ = false;
  if (!s.isOk() && firstError_.isOk()) firstError_ = s;
  idle_.notify_all();
  // A caller ran this item while more came: the progress thread waits for it to end.
  if (!queue_.empty()) workArrived_.notify_one();
}

void HostStream::serve() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    workArrived_.wait(lock, [this] { return !running_ && (stopping_ || !queue_.empty()); });
    if (queue_.empty()) return;  // stopping, and everything ran
    runFront(lock);
  }
}

}  // namespace loom
