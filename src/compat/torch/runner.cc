// The queue behind the backend "loom" (runner.h) and the Work it completes.
#include "compat/torch/runner.h"

#include <ATen/ATen.h>

#include <pthread.h>

#include <chrono>
#include <exception>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>

#include "compat/torch/loom_error.h"

namespace loom::torch_backend {
namespace {

// How long a caller's wait() on the worker and the worker after an operation look again
// (yielding) before they block: a short call is over, and a caller's next call issued, well
// within it, and blocking costs each side a wakeup of tens of microseconds, more than the
// whole of a small Loom call. The executor looks as long before it naps, for the same reason.
constexpr auto kLookBeforeBlocking = std::chrono::microseconds(200);

// Yields until done() or kLookBeforeBlocking has passed; returns done().
template <typename Done>
bool lookAWhile(Done done) {
  const auto until = std::chrono::steady_clock::now() + kLookBeforeBlocking;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= until) return false;
    std::this_thread::yield();
  }
  return true;
}

bool isPointToPoint(c10d::OpType type) { return type == c10d::OpType::SEND || type == c10d::OpType::RECV; }

}  // namespace

// A Work whose Future completes with the operation's outputs (or its error).
class LoomWork : public c10d::Work {
 public:
  LoomWork(std::shared_ptr<Runner> runner, int rank, c10d::OpType type, std::vector<at::Tensor> outputs)
      : c10d::Work(rank, type),
        runner_(std::move(runner)),
        outputs_(std::move(outputs)),
        future_(c10::make_intrusive<at::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))) {}

  // Polling a held-back operation, or asking for its future, starts it (runner.h).
  bool isCompleted() override {
    if (future_->completed()) return true;
    startIfHeld();
    return false;
  }
  bool isSuccess() const override { return future_->completed() && !future_->hasError(); }
  std::exception_ptr exception() const override { return future_->exception_ptr(); }
  std::vector<at::Tensor> result() override { return outputs_; }
  // Loom's own deadline (the process group's timeout) bounds the wait.
  bool wait(std::chrono::milliseconds) override {
    startIfHeld();
    const uint64_t seq = seq_.load(std::memory_order_acquire);
    if (seq != 0 && !future_->completed()) runner_->runThrough(seq);
    if (!lookAWhile([this] { return future_->completed(); })) future_->wait();
    if (future_->hasError()) std::rethrow_exception(future_->exception_ptr());
    return true;
  }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
    startIfHeld();
    return future_;
  }

  // Its batch's place in the queue (0 until the batch is queued: held back or coalescing).
  void queuedAs(uint64_t seq) { seq_.store(seq, std::memory_order_release); }
  void complete(std::exception_ptr error) {
    if (error) {
      future_->setError(error);
    } else {
      future_->markCompleted(c10::IValue(outputs_));
    }
  }

 private:
  void startIfHeld() {
    if (seq_.load(std::memory_order_acquire) == 0) runner_->releaseHeld();
  }

  std::shared_ptr<Runner> runner_;
  std::atomic<uint64_t> seq_{0};
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<at::ivalue::Future> future_;
};

Runner::Runner(loomComm_t comm) : comm_(comm) {}

Runner::~Runner() { loomCommDestroy(comm_); }

void Runner::Batch::add(LoomOp op, c10::intrusive_ptr<LoomWork> work) {
  ops.push_back(std::move(op));
  works.push_back(std::move(work));
}

c10::intrusive_ptr<c10d::Work> Runner::enqueue(const std::shared_ptr<Runner>& self, int rank, LoomOp op,
                                              bool callerWaits) {
  auto work = c10::make_intrusive<LoomWork>(self, rank, op.type, op.outputs);
  const bool pointToPoint = isPointToPoint(op.type);
  std::unique_lock<std::mutex> lock(mutex_);
  if (coalescing_) {
    coalesced_.add(std::move(op), work);
  } else if (pointToPoint) {
    held_.add(std::move(op), work);
  } else {
    queueBatch(&held_);
    Batch batch;
    batch.add(std::move(op), work);
    // An idle worker is left asleep: waking it for a call this thread runs next costs a wakeup
    // and, where no core is spare, the core the call's own thread needs. A worker that is
    // running takes the batch after its own if this thread cannot start it now.
    queueBatch(&batch, /*wakeWorker=*/!callerWaits);
    if (callerWaits) {
      const uint64_t seq = lastSeq_;  // this batch's
      lock.unlock();
      runThrough(seq);
    }
  }
  return work;
}

void Runner::startCoalescing() {
  std::lock_guard<std::mutex> lock(mutex_);
  queueBatch(&held_);
  coalescing_ = true;
}

c10::intrusive_ptr<c10d::Work> Runner::endCoalescing() {
  std::lock_guard<std::mutex> lock(mutex_);
  coalescing_ = false;
  c10::intrusive_ptr<c10d::Work> last;
  if (!coalesced_.works.empty()) last = coalesced_.works.back();
  queueBatch(&coalesced_);
  return last;
}

void Runner::releaseHeld() {
  std::lock_guard<std::mutex> lock(mutex_);
  queueBatch(&held_);
}

void Runner::queueBatch(Batch* batch, bool wakeWorker) {
  if (batch->ops.empty()) return;
  batch->seq = ++lastSeq_;
  for (auto& work : batch->works) work->queuedAs(batch->seq);
  queue_.push_back(std::move(*batch));
  *batch = Batch{};
  queued_.fetch_add(1, std::memory_order_release);
  if (wakeWorker) changed_.notify_all();
}

Runner::Batch Runner::takeFront() {
  Batch batch = std::move(queue_.front());
  queue_.pop_front();
  queued_.fetch_sub(1, std::memory_order_relaxed);
  running_ = true;
  return batch;
}

// The worker is woken only when it may take the next batch, so that a caller running its
// own operation has no thread waking beside it.
void Runner::doneRunning() {
  running_ = false;
  if (!queue_.empty() || stopping_) changed_.notify_all();
}

void Runner::work() {
  // Named for `top -H` and the tests, which tell by its context switches whether it woke.
  pthread_setname_np(pthread_self(), "loom-torch");
  bool ranOne = false;
  for (;;) {
    if (ranOne) lookAWhile([this] { return queued_.load(std::memory_order_acquire) != 0; });
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [this] { return !running_ && (stopping_ || !queue_.empty()); });
    if (queue_.empty()) return;
    Batch batch = takeFront();
    lock.unlock();
    runBatch(std::move(batch));
    lock.lock();
    doneRunning();
    ranOne = true;
  }
}

void Runner::stop() {
  std::lock_guard<std::mutex> lock(mutex_);
  queueBatch(&held_);
  stopping_ = true;
  changed_.notify_all();
}

void Runner::runThrough(uint64_t seq) {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!running_ && !queue_.empty() && queue_.front().seq <= seq) {
    Batch batch = takeFront();
    lock.unlock();
    runBatch(std::move(batch));
    lock.lock();
    doneRunning();
  }
}

loomResult_t launchGrouped(std::vector<LoomOp>& ops, loomComm_t comm, loomStream_t stream) {
  const bool group = ops.size() > 1;
  loomResult_t result = group ? loomGroupStart() : loomSuccess;
  for (LoomOp& op : ops) {
    const loomResult_t r = op.launch(comm, stream);
    if (result == loomSuccess) result = r;
  }
  if (group) {
    const loomResult_t r = loomGroupEnd();
    if (result == loomSuccess) result = r;
  }
  return result;
}

// A batch is one launch (a group where it holds several operations); then every Work of the
// batch completes, with the first error.
void Runner::runBatch(Batch batch) {
  const loomResult_t result = launchGrouped(batch.ops, comm_, nullptr);
  std::exception_ptr error;
  if (result != loomSuccess) {
    error = std::make_exception_ptr(loomError(comm_));
  }
  for (size_t i = 0; i < batch.ops.size(); ++i) {
    std::exception_ptr own = error;
    if (!own && batch.ops[i].finish) {
      try {
        batch.ops[i].finish();
      } catch (...) {
        own = std::current_exception();
      }
    }
    batch.works[i]->complete(own);
  }
}

}  // namespace loom::torch_backend
