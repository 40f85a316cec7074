#include "core/device_executor.h"

#include <sched.h>

#include <chrono>
#include <cstring>
#include <deque>
#include <map>
#include <set>

#include "core/communicator.h"
#include "core/log.h"
#include "kernels/cuda/device_reduce.h"

namespace loom {
namespace {

using Clock = std::chrono::steady_clock;

// One control message, fixed size so that a link's byte stream splits into them without
// framing.
struct Message {
  enum Kind : uint8_t { kPost = 1, kDone = 2 };
  uint8_t kind = 0;
  uint8_t hasHeader = 0;
  uint8_t reserved[6] = {};
  uint64_t bytes = 0;
  uint8_t header[kCallInfoWireBytes] = {};
  transport::IpcRegion region;
};

enum class State : uint8_t {
  kWaiting,   // not started
  kIssued,    // its device work is on the stream (event pending)
  kPosted,    // a send the receiver has not finished reading yet
  kParked,    // a reduction done into scratch, waiting to be copied to its destination
  kFinished,
};

// Control traffic on one link: the message being read, posts not yet matched with a
// receive, messages waiting to go out (the front stays put while it is partly sent), and
// this rank's posted sends awaiting their done, in posting order.
struct LinkState {
  transport::Link* link = nullptr;
  int peer = -1;
  Message in;
  size_t inHave = 0;
  std::deque<Message> posts;
  std::deque<Message> out;
  size_t outSent = 0;
  std::deque<int> awaitingDone;
};

// Steps sharing a link and direction (or the local ones), in plan order.
struct Queue {
  LinkState* link = nullptr;
  std::vector<int> steps;
  size_t head = 0;
};

}  // namespace

class DeviceExecutor::Run {
 public:
  Run(DeviceExecutor& exec, Plan& plan) : exec_(exec), plan_(plan), comm_(*exec.comm_) {}
  Status go();

 private:
  Status connect();
  void buildQueues();
  Status pump(LinkState& l, bool* progressed);
  Status advance(Queue& q, bool* progressed);
  Status issueReceive(int index, const Message& post);
  Status pollIssued(bool* progressed);
  Status unpark(bool* progressed);
  Status record(int index);
  // Whether a receive may write its destination now: after `writeAfter` when that is device
  // work of this rank (stream order), after the peer's done when it is a send.
  bool mayWrite(const Step& s) const {
    return s.writeAfter == Step::kNone || plan_.steps[static_cast<size_t>(s.writeAfter)].kind != Step::Kind::kSend
               ? issuedOrDone(s.writeAfter)
               : finished(s.writeAfter);
  }
  bool issuedOrDone(int index) const {
    return index == Step::kNone || steps_[static_cast<size_t>(index)] == State::kFinished ||
           (steps_[static_cast<size_t>(index)] == State::kIssued &&
            plan_.steps[static_cast<size_t>(index)].kind != Step::Kind::kSend);
  }
  bool finished(int index) const {
    return index == Step::kNone || steps_[static_cast<size_t>(index)] == State::kFinished;
  }
  std::string describe(int index) const;

  DeviceExecutor& exec_;
  Plan& plan_;
  Communicator& comm_;
  std::vector<State> steps_;
  size_t finishedCount_ = 0;
  std::map<transport::Link*, LinkState> links_;
  std::vector<Queue> queues_;
  // Issued device work, oldest first: the step and the event recorded after it.
  std::deque<std::pair<int, cuda::EventPtr>> issued_;
  // Receives whose peer has been told they are done reading (the done goes once).
  std::vector<bool> doneSent_;
  // Reductions done into scratch because their destination was still being read by a peer
  // (recursive doubling in place: both partners read what the other is about to overwrite,
  // and waiting for each other's done would wait forever): step -> scratch.
  std::map<int, char*> parked_;
};

std::string DeviceExecutor::Run::describe(int index) const {
  const Step& s = plan_.steps[static_cast<size_t>(index)];
  const CallInfo& call = plan_.callOfStep(static_cast<size_t>(index));
  const std::string what = call.describeNumbered();
  switch (s.kind) {
    case Step::Kind::kSend:
      return format("%s: waiting for rank %d to read %zu bytes from this rank's device memory", what.c_str(), s.peer,
                    s.bytes);
    case Step::Kind::kRecv:
    case Step::Kind::kRecvReduce:
      return format("%s: waiting for rank %d to offer %zu bytes of device memory", what.c_str(), s.peer, s.bytes);
    default:
      return format("%s: waiting for a local device copy", what.c_str());
  }
}

Status DeviceExecutor::Run::connect() {
  std::set<int> set;
  for (const Step& s : plan_.steps)
    if (s.peer != Step::kNone) set.insert(s.peer);
  if (set.empty()) return Status::ok();
  std::vector<int> peers(set.begin(), set.end());
  Deadline deadline = Deadline::afterMs(comm_.config().timeoutMs);
  LOOM_TRY(comm_.transport().connectOut(peers, deadline));
  return comm_.transport().acceptIn(peers, deadline);
}

void DeviceExecutor::Run::buildQueues() {
  transport::Transport& transport = comm_.transport();
  const int links = transport.linksPerPeer();
  std::map<std::pair<transport::Link*, bool>, size_t> index;
  size_t local = SIZE_MAX;
  for (size_t k = 0; k < plan_.steps.size(); ++k) {
    const Step& s = plan_.steps[k];
    size_t* slot = &local;
    LinkState* state = nullptr;
    if (s.peer != Step::kNone) {
      transport::Link* link = transport.link(s.peer, s.channel % links);
      state = &links_[link];
      state->link = link;
      state->peer = s.peer;
      slot = &index.emplace(std::make_pair(link, s.kind == Step::Kind::kSend), SIZE_MAX).first->second;
    }
    if (*slot == SIZE_MAX) {
      *slot = queues_.size();
      queues_.push_back(Queue{state, {}, 0});
    }
    queues_[*slot].steps.push_back(static_cast<int>(k));
  }
}

Status DeviceExecutor::Run::pump(LinkState& l, bool* progressed) {
  while (!l.out.empty()) {
    size_t done = 0;
    const char* front = reinterpret_cast<const char*>(&l.out.front());
    Status s = l.link->sendSome(front + l.outSent, sizeof(Message) - l.outSent, &done);
    if (!s.isOk()) return s.withContext(format("control message to rank %d", l.peer));
    if (done == 0) break;
    *progressed = true;
    l.outSent += done;
    if (l.outSent < sizeof(Message)) break;
    l.out.pop_front();
    l.outSent = 0;
  }
  for (;;) {
    size_t got = 0;
    Status s = l.link->recvSome(reinterpret_cast<char*>(&l.in) + l.inHave, sizeof(Message) - l.inHave, &got);
    if (!s.isOk()) return s.withContext(format("control message from rank %d", l.peer));
    if (got == 0) return Status::ok();
    *progressed = true;
    l.inHave += got;
    if (l.inHave < sizeof(Message)) continue;
    l.inHave = 0;
    if (l.in.kind == Message::kPost) {
      l.posts.push_back(l.in);
    } else if (l.in.kind == Message::kDone && !l.awaitingDone.empty()) {
      steps_[static_cast<size_t>(l.awaitingDone.front())] = State::kFinished;
      ++finishedCount_;
      l.awaitingDone.pop_front();
    } else {
      return error(loomRemoteError, "rank %d sent a control message this rank did not expect (kind %u)", l.peer,
                   l.in.kind);
    }
  }
}

Status DeviceExecutor::Run::record(int index) {
  cuda::EventPtr event;
  if (exec_.idleEvents_.empty()) {
    LOOM_TRY(cuda::makeEvent(&event));
  } else {
    event = std::move(exec_.idleEvents_.back());
    exec_.idleEvents_.pop_back();
  }
  LOOM_CUDA_TRY(cudaEventRecord(event.get(), exec_.stream()));
  steps_[static_cast<size_t>(index)] = State::kIssued;
  issued_.emplace_back(index, std::move(event));
  return Status::ok();
}

Status DeviceExecutor::Run::issueReceive(int index, const Message& post) {
  const Step& s = plan_.steps[static_cast<size_t>(index)];
  const CallInfo& call = plan_.callOfStep(static_cast<size_t>(index));
  if (s.header != (post.hasHeader != 0)) {
    return error(loomInvalidUsage, "rank %d's messages are out of step with this rank's %s (a call differs)", s.peer,
                 call.describe().c_str());
  }
  if (s.header) LOOM_TRY(checkCallInfo(post.header, call, s.peer));
  if (post.bytes != s.bytes) {
    return error(loomInvalidUsage, "rank %d offered %llu bytes where this rank's %s expects %zu", s.peer,
                 static_cast<unsigned long long>(post.bytes), call.describe().c_str(), s.bytes);
  }
  cudaStream_t stream = exec_.stream();
  const int divisor = s.finalize ? comm_.nranks() : 0;
  if (s.bytes > 0) {
    const void* peerSrc = nullptr;
    LOOM_TRY(exec_.ipc_.open(post.region, s.peer, &peerSrc));
    const size_t count = s.bytes / typeSize(call.type);
    if (s.kind == Step::Kind::kRecvReduce) {
      void* dst = s.dst;
      if (!mayWrite(s)) {
        char* parked = plan_.scratch(s.bytes);
        parked_[index] = parked;
        dst = parked;
      }
      LOOM_CUDA_TRY(static_cast<cudaError_t>(
          cuda::reduce(dst, nullptr, s.src, peerSrc, count, call.type, call.op, divisor, stream)));
    } else {
      LOOM_CUDA_TRY(static_cast<cudaError_t>(cuda::copy(s.dst, peerSrc, s.bytes, stream)));
      if (divisor > 0) {
        LOOM_CUDA_TRY(static_cast<cudaError_t>(cuda::scale(s.dst, s.dst, count, call.type, divisor, stream)));
      }
    }
  }
  return record(index);
}

Status DeviceExecutor::Run::advance(Queue& q, bool* progressed) {
  while (q.head < q.steps.size()) {
    const int index = q.steps[q.head];
    const Step& s = plan_.steps[static_cast<size_t>(index)];
    switch (s.kind) {
      case Step::Kind::kCopy: {
        if (!issuedOrDone(s.after)) return Status::ok();
        const CallInfo& call = plan_.callOfStep(static_cast<size_t>(index));
        if (s.dst != s.src && s.bytes > 0) {
          LOOM_CUDA_TRY(static_cast<cudaError_t>(cuda::copy(s.dst, s.src, s.bytes, exec_.stream())));
        }
        if (s.finalize && s.bytes > 0) {
          LOOM_CUDA_TRY(static_cast<cudaError_t>(cuda::scale(s.dst, s.dst, s.bytes / typeSize(call.type), call.type,
                                                             comm_.nranks(), exec_.stream())));
        }
        LOOM_TRY(record(index));
        break;
      }
      case Step::Kind::kSend: {
        // Another process reads the bytes once posted: they must be complete, not only issued.
        if (!finished(s.after)) return Status::ok();
        Message m;
        m.kind = Message::kPost;
        m.bytes = s.bytes;
        m.hasHeader = s.header;
        if (s.header) encodeCallInfo(plan_.callOfStep(static_cast<size_t>(index)), m.header);
        if (s.bytes > 0) m.region = transport::CudaIpc::describe(s.src);
        q.link->out.push_back(m);
        q.link->awaitingDone.push_back(index);
        steps_[static_cast<size_t>(index)] = State::kPosted;
        break;
      }
      case Step::Kind::kRecv:
      case Step::Kind::kRecvReduce: {
        if (!issuedOrDone(s.after) || q.link->posts.empty()) return Status::ok();
        if (s.kind == Step::Kind::kRecv && !mayWrite(s)) return Status::ok();
        Message post = q.link->posts.front();
        q.link->posts.pop_front();
        LOOM_TRY(issueReceive(index, post));
        break;
      }
      case Step::Kind::kOneShot:
        return error(loomInternalError, "a one-shot step reached the device executor (the board holds host memory)");
    }
    ++q.head;
    *progressed = true;
  }
  return Status::ok();
}

Status DeviceExecutor::Run::pollIssued(bool* progressed) {
  while (!issued_.empty()) {
    cudaError_t e = cudaEventQuery(issued_.front().second.get());
    if (e == cudaErrorNotReady) return Status::ok();
    LOOM_CUDA_TRY(e);
    const int index = issued_.front().first;
    exec_.idleEvents_.push_back(std::move(issued_.front().second));
    issued_.pop_front();
    const Step& s = plan_.steps[static_cast<size_t>(index)];
    if (s.peer != Step::kNone && !doneSent_[static_cast<size_t>(index)]) {
      // The peer's bytes have been read: it may reuse them.
      transport::Link* link = comm_.transport().link(s.peer, s.channel % comm_.transport().linksPerPeer());
      Message done;
      done.kind = Message::kDone;
      links_[link].out.push_back(done);
      doneSent_[static_cast<size_t>(index)] = true;
    }
    *progressed = true;
    if (parked_.count(index) != 0) {
      steps_[static_cast<size_t>(index)] = State::kParked;
      continue;
    }
    steps_[static_cast<size_t>(index)] = State::kFinished;
    ++finishedCount_;
  }
  return Status::ok();
}

Status DeviceExecutor::Run::unpark(bool* progressed) {
  for (auto it = parked_.begin(); it != parked_.end();) {
    const int index = it->first;
    const Step& s = plan_.steps[static_cast<size_t>(index)];
    if (steps_[static_cast<size_t>(index)] != State::kParked || !mayWrite(s)) {
      ++it;
      continue;
    }
    LOOM_CUDA_TRY(static_cast<cudaError_t>(cuda::copy(s.dst, it->second, s.bytes, exec_.stream())));
    LOOM_TRY(record(index));
    it = parked_.erase(it);
    *progressed = true;
  }
  return Status::ok();
}

Status DeviceExecutor::Run::go() {
  steps_.assign(plan_.steps.size(), State::kWaiting);
  doneSent_.assign(plan_.steps.size(), false);
  LOOM_TRY(connect());
  buildQueues();
  const auto timeout = std::chrono::milliseconds(comm_.config().timeoutMs);
  Clock::time_point lastProgress = Clock::now();
  unsigned idle = 0;
  for (;;) {
    bool progressed = false;
    for (auto& [link, state] : links_) LOOM_TRY(pump(state, &progressed));
    for (Queue& q : queues_) LOOM_TRY(advance(q, &progressed));
    LOOM_TRY(pollIssued(&progressed));
    LOOM_TRY(unpark(&progressed));
    bool flushed = true;
    for (auto& [link, state] : links_) flushed = flushed && state.out.empty();
    if (finishedCount_ == plan_.steps.size() && flushed) return Status::ok();
    if (progressed) {
      lastProgress = Clock::now();
      idle = 0;
      continue;
    }
    LOOM_TRY(comm_.usable());
    if (Clock::now() - lastProgress > timeout) {
      for (Queue& q : queues_) {
        if (q.head < q.steps.size()) {
          return error(loomTimeout, "%s: no progress for %lld ms (LOOM_TIMEOUT_MS)", describe(q.steps[q.head]).c_str(),
                       static_cast<long long>(comm_.config().timeoutMs));
        }
      }
      return error(loomTimeout, "device work or a peer's done message outstanding for %lld ms (LOOM_TIMEOUT_MS)",
                   static_cast<long long>(comm_.config().timeoutMs));
    }
    // Spin briefly (a kernel step takes microseconds), then give the CPU to the ranks
    // sharing it.
    if (++idle > 64) sched_yield();
  }
}

Status DeviceExecutor::create(Communicator* comm, std::unique_ptr<DeviceExecutor>* out) {
  std::unique_ptr<DeviceExecutor> exec(new DeviceExecutor(comm));
  LOOM_TRY(cuda::makeStream(&exec->stream_));
  *out = std::move(exec);
  return Status::ok();
}

Status DeviceExecutor::run(Plan& plan) {
  Run run(*this, plan);
  Status s = run.go();
  // Work already issued may still read peers' memory or write the user's: let it finish
  // before the caller reports anything or releases the user's stream.
  cudaError_t drained = cudaStreamSynchronize(stream_.get());
  if (s.isOk() && drained != cudaSuccess) s = cuda::cudaFailure(drained, "cudaStreamSynchronize", __FILE__, __LINE__);
  if (s.isOk()) ipc_.trim();
  return s;
}

}  // namespace loom
