// The queue behind the backend "loom": operations run one at a time, in the order they were
// issued (the order every rank issues them), as blocking Loom calls. The thread that runs one
// is the process group's worker or a caller whose wait() finds its operation still queued.
//
// Point-to-point operations are held back instead of queued at once: consecutive sends and
// receives gather into one Loom group, which starts when the program next waits on one of them,
// polls one, asks for its future, or issues any other operation (MPI's progress rule: a
// nonblocking operation progresses once the program calls into the library again). So
// `isend` then `irecv` on both ranks of a pair is one group on each and cannot wait on itself,
// as with Gloo; run one by one, a large send would wait for the receive queued behind it.
#pragma once

#include <torch/csrc/distributed/c10d/Work.hpp>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "loom/loom.h"

namespace loom::torch_backend {

// One operation: the Loom calls it makes (inside its batch's group) on a communicator and
// stream (NULL for host tensors: each call completes before it returns; for CUDA tensors the
// caller's current stream), what it does once they returned (copies out of temporaries, on the
// same stream), and the tensors its Work completes with.
struct LoomOp {
  std::function<loomResult_t(loomComm_t, loomStream_t)> launch;
  std::function<void()> finish;
  std::vector<at::Tensor> outputs;
  c10d::OpType type;
};

// Makes every op's calls on comm and stream, as one Loom group when there are several (so that
// sends and receives among them cannot wait on each other); every launch is made even after one
// failed, so the group always closes. Returns the first failure.
loomResult_t launchGrouped(std::vector<LoomOp>& ops, loomComm_t comm, loomStream_t stream);

class LoomWork;  // runner.cc

// Owns the communicator. Thread-safe: any thread may enqueue, wait and stop.
class Runner {
 public:
  explicit Runner(loomComm_t comm);
  ~Runner();  // destroys the communicator
  loomComm_t comm() const { return comm_; }
  Runner(const Runner&) = delete;
  Runner& operator=(const Runner&) = delete;

  // callerWaits: the caller returns only once op has run (torch 2's asyncOp false), so this
  // thread runs it, and what was queued before it, unless the worker is running a batch then.
  c10::intrusive_ptr<c10d::Work> enqueue(const std::shared_ptr<Runner>& self, int rank, LoomOp op,
                                         bool callerWaits);
  // Operations issued in between run as one group. endCoalescing returns a Work that completes
  // with the group (every Work of a batch completes at once); null when none was issued.
  void startCoalescing();
  c10::intrusive_ptr<c10d::Work> endCoalescing();
  // Queues the held-back point-to-point operations, if any (LoomWork calls it).
  void releaseHeld();
  // The worker thread: runs batches as they come until stop(), and what is queued then.
  void work();
  void stop();
  // A caller's wait(): runs the batches up to `seq` (the caller's own) that no thread has taken,
  // unless a thread runs one now.
  void runThrough(uint64_t seq);

 private:
  struct Batch {
    uint64_t seq = 0;
    std::vector<LoomOp> ops;
    std::vector<c10::intrusive_ptr<LoomWork>> works;
    void add(LoomOp op, c10::intrusive_ptr<LoomWork> work);
  };

  // Under mutex_; leaves *batch empty (nothing when it is).
  void queueBatch(Batch* batch, bool wakeWorker = true);
  Batch takeFront();              // under mutex_, !running_
  // Consumes the batch: its tensors and Works go before the caller takes mutex_ again, since
  // freeing a tensor Python knows takes the GIL, which a thread waiting on mutex_ may hold.
  void runBatch(Batch batch);
  void doneRunning();             // under mutex_

  loomComm_t comm_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Batch> queue_;
  std::atomic<size_t> queued_{0};  // queue_.size(), for the worker to look at without the lock
  bool running_ = false;           // a thread runs a batch: no other may start one
  uint64_t lastSeq_ = 0;
  bool coalescing_ = false;
  Batch coalesced_;
  Batch held_;                     // point-to-point operations not queued yet
  bool stopping_ = false;
};

}  // namespace loom::torch_backend
