// UCX links: the context, worker, endpoints and the byte stream over tagged messages
// (ucx_transport.h).
#include "transport/ucx_transport.h"

#include <ucp/api/ucp.h>

#include <poll.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>

#include "base/log.h"

namespace loom::transport {
namespace {

// A message's tag: the sender's rank and the link index.
uint64_t tagOf(int rank, int index) { return (static_cast<uint64_t>(rank) << 8) | static_cast<uint64_t>(index); }
constexpr uint64_t kFullMask = ~uint64_t{0};
// A send posts at most this much as one message: a message longer than the receive range it
// meets lands in staging and costs a copy, and the executor receives a reduction's bytes a
// slice (LOOM_CHUNK_SIZE, 512 KiB by default) at a time. On TCP loopback, capping the
// executor's joined ranges at 512 KiB took an 8 MiB allreduce from 1.15 to 1.97 GB/s.
constexpr size_t kMaxMessageBytes = 512 << 10;
// A header and a payload up to this size travel as one message.
constexpr size_t kPackBytes = 16 << 10;
// Giving up spends at most this long closing the endpoints.
constexpr auto kCloseOnFailureBudget = std::chrono::seconds(1);
// Flushing endpoints at destruction delivers what is in flight to peers that still run; a peer
// that is gone must not hold the communicator's destruction longer than this.
constexpr auto kCloseBudget = std::chrono::seconds(2);
constexpr auto kFlushBudget = std::chrono::milliseconds(250);
// Between runs the progress thread sleeps on the worker's descriptor at most this long: a
// wakeup UCX never signals costs no more than this.
constexpr int kBetweenRunsPollMs = 10;
// How long no run on the transport must have ended before that thread starts (see State).
constexpr std::chrono::milliseconds kIdleBeforeProgress{2};

Status ucxError(const char* what, ucs_status_t status) {
  return error(loomSystemError, "ucx transport: %s: %s", what, ucs_status_string(status));
}

// Waits for a request to finish, progressing the worker, at most until `until`; frees it.
ucs_status_t finish(ucp_worker_h worker, ucs_status_ptr_t request, std::chrono::steady_clock::time_point until) {
  if (request == nullptr) return UCS_OK;
  if (UCS_PTR_IS_ERR(request)) return UCS_PTR_STATUS(request);
  ucs_status_t status;
  while ((status = ucp_request_check_status(request)) == UCS_INPROGRESS && std::chrono::steady_clock::now() < until) {
    ucp_worker_progress(worker);
  }
  if (status == UCS_INPROGRESS) ucp_request_cancel(worker, request);
  ucp_request_free(request);
  return status;
}

}  // namespace

struct UcxTransport::State {
  // An endpoint's error callback names its peer.
  struct Peer {
    int rank = -1;
    ucp_ep_h ep = nullptr;
    ucs_status_t failure = UCS_OK;  // set by the error callback
    bool logged = false;
  };

  ~State() {
    stopProgress();
    // What this rank sent reaches peers that still run (flushed), then every endpoint closes
    // at once: a graceful close waits for the peer's answer, which never comes from a peer
    // closing its own endpoint at the same moment. A flush needs the peer's worker to make
    // progress, which a peer whose thread already left does not (communicators of one process
    // destroyed one after another): it gets a short budget.
    const auto until = std::chrono::steady_clock::now() + kFlushBudget;
    finish(worker, flushRequest, until);
    for (Peer& p : peers) {
      if (p.ep == nullptr || p.failure != UCS_OK) continue;
      ucp_request_param_t param{};
      finish(worker, ucp_ep_flush_nbx(p.ep, &param), until);
    }
    for (Peer& p : peers) {
      if (p.ep == nullptr) continue;
      ucp_request_param_t param{};
      param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
      param.flags = UCP_EP_CLOSE_FLAG_FORCE;
      finish(worker, ucp_ep_close_nbx(p.ep, &param), until + kCloseBudget);
    }
    if (worker != nullptr) ucp_worker_destroy(worker);
    if (context != nullptr) ucp_cleanup(context);
  }

  static void onError(void* arg, ucp_ep_h, ucs_status_t status) {
    Peer* p = static_cast<Peer*>(arg);
    if (p->failure == UCS_OK) p->failure = status;
  }

  Status peerFailed(int peer, ucs_status_t status) const {
    return error(loomRemoteError, "ucx transport: rank %d: %s (the peer went away or its link failed)", peer,
                 ucs_status_string(status));
  }

  ucp_context_h context = nullptr;
  ucp_worker_h worker = nullptr;
  int eventFd = -1;  // the worker's wakeup descriptor (-1: none; the executor then spins)
  int rank = 0;
  std::vector<std::vector<uint8_t>> addresses;  // every rank's worker address
  std::vector<Peer> peers;
  bool closed = false;
  // A send completed since the worker's last flush was posted: its bytes may still be in
  // the worker (see flushSome).
  bool unflushed = false;
  ucs_status_ptr_t flushRequest = nullptr;  // the worker flush in flight

  // Progress that may have taken in a message some link has already looked for in this pass:
  // until the links looked again, the executor must not sleep (an armed descriptor signals
  // only what arrives later).
  void progress() {
    if (ucp_worker_progress(worker) != 0) movedSinceArm = true;
  }
  bool movedSinceArm = false;

  // Between runs (Transport::beginRun/endRun) a thread of the transport's own progresses the
  // worker, so that a peer never waits for this rank's next call on this communicator: for
  // bytes the worker still holds, or for the protocol messages (acknowledgements, the
  // endpoint's wireup) that complete that peer's sends and flushes. A flush that waited for
  // them at the end of a call instead deadlocked once the peer had gone on to another
  // communicator's call that waited for this rank. The thread makes UCX calls only while no
  // run does (runMutex), so the executor's state needs no lock of its own.
  std::mutex runMutex;
  std::condition_variable stopRequested;  // the thread otherwise looks every kIdleBeforeProgress
  int runs = 0;
  bool stopping = false;
  std::thread betweenRuns;

  // The thread starts only once no run has ended for kIdleBeforeProgress: a loop of calls
  // progresses the worker itself, and a wakeup of the thread between two calls (the second
  // core of two running it) doubled an 8-byte allreduce's time. Until then it looks every
  // kIdleBeforeProgress instead of being woken, so that ending a run costs no wakeup.
  std::chrono::steady_clock::time_point lastRunEnd;

  void progressBetweenRuns() {
    std::unique_lock<std::mutex> lock(runMutex);
    while (!stopping) {
      if (runs > 0 || closed || std::chrono::steady_clock::now() - lastRunEnd < kIdleBeforeProgress) {
        stopRequested.wait_for(lock, kIdleBeforeProgress);
        continue;
      }
      while (ucp_worker_progress(worker) != 0) {
      }
      const ucs_status_t armed = eventFd >= 0 ? ucp_worker_arm(worker) : UCS_ERR_UNSUPPORTED;
      // Unlocked whatever the answer: a worker that keeps refusing to arm must not keep a run
      // from beginning.
      lock.unlock();
      if (armed == UCS_OK) {
        pollfd fd{eventFd, POLLIN, 0};
        poll(&fd, 1, kBetweenRunsPollMs);
      } else if (armed == UCS_ERR_BUSY) {
        std::this_thread::yield();  // events came in meanwhile: progress them first
      } else {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      lock.lock();
    }
  }
  void stopProgress() {
    if (!betweenRuns.joinable()) return;
    {
      std::lock_guard<std::mutex> lock(runMutex);
      stopping = true;
    }
    stopRequested.notify_all();
    betweenRuns.join();
  }

  // loomCommRegister's regions (few: a scan finds the one holding a range). A device
  // communicator's proxy thread looks here too, outside the executor's lock, hence the mutex.
  std::mutex regionsMutex;
  std::vector<UcxRegistration*> regions;
  UcxRegistration* registrationOf(const void* data, size_t bytes);

  bool anyPeerFailed() const {
    for (const Peer& p : peers) {
      if (p.failure != UCS_OK) return true;
    }
    return false;
  }
};

class UcxTransport::UcxRegistration : public MemoryRegistration {
 public:
  UcxRegistration(State& state, void* base, size_t bytes, ucp_mem_h memh)
      : state_(state), begin_(reinterpret_cast<uintptr_t>(base)), end_(begin_ + bytes), memh_(memh) {
    std::lock_guard<std::mutex> lock(state_.regionsMutex);
    state_.regions.push_back(this);
  }
  ~UcxRegistration() override {
    {
      std::lock_guard<std::mutex> lock(state_.regionsMutex);
      state_.regions.erase(std::find(state_.regions.begin(), state_.regions.end(), this));
    }
    std::lock_guard<std::mutex> lock(state_.runMutex);  // not beside the thread's progress
    ucp_mem_unmap(state_.context, memh_);
  }
  UcxRegistration(const UcxRegistration&) = delete;
  UcxRegistration& operator=(const UcxRegistration&) = delete;

  uint64_t uses() const override { return uses_; }
  bool holds(const void* data, size_t bytes) const {
    const auto at = reinterpret_cast<uintptr_t>(data);
    return at >= begin_ && at + bytes <= end_;
  }
  // The request's memory handle, for a message that moves through this region.
  void use(ucp_request_param_t* param) {
    param->op_attr_mask |= UCP_OP_ATTR_FIELD_MEMH;
    param->memh = memh_;
    ++uses_;
  }

 private:
  State& state_;
  uintptr_t begin_;
  uintptr_t end_;
  ucp_mem_h memh_;
  uint64_t uses_ = 0;
};

UcxTransport::UcxRegistration* UcxTransport::State::registrationOf(const void* data, size_t bytes) {
  std::lock_guard<std::mutex> lock(regionsMutex);
  for (UcxRegistration* r : regions) {
    if (r->holds(data, bytes)) return r;
  }
  return nullptr;
}

class UcxTransport::UcxLink : public Link {
 public:
  UcxLink(State& state, int peer, int index) : state_(state), peer_(state.peers[static_cast<size_t>(peer)]), index_(index) {}
  ~UcxLink() override {
    const auto until = std::chrono::steady_clock::now() + kCloseBudget;
    finish(state_.worker, sendRequest_, until);
    finish(state_.worker, recvRequest_, until);
  }

  Status sendSome(const void* data, size_t bytes, size_t* done) override {
    *done = 0;
    LOOM_TRY(usable());
    if (bytes == 0) return Status::ok();
    if (sendRequest_ == nullptr) return post(data, std::min(bytes, kMaxMessageBytes), done);
    return progressSend(done);
  }

  // A small payload goes in one message with its header (a copy costs less than a second
  // message); the receiver's recvSome of the header stages the rest for the next receive.
  Status sendWithHeader(const void* header, size_t headerBytes, const void* body, size_t bodyBytes,
                        size_t* done) override {
    if (sendRequest_ != nullptr || bodyBytes == 0 || headerBytes + bodyBytes > kPackBytes) {
      return sendSome(header, headerBytes, done);
    }
    *done = 0;
    LOOM_TRY(usable());
    packed_.resize(headerBytes + bodyBytes);
    std::memcpy(packed_.data(), header, headerBytes);
    std::memcpy(packed_.data() + headerBytes, body, bodyBytes);
    return post(packed_.data(), packed_.size(), done);
  }

  Status recvSome(void* data, size_t bytes, size_t* done) override {
    *done = 0;
    if (stagedAt_ < staged_.size()) {
      *done = std::min(bytes, staged_.size() - stagedAt_);
      std::memcpy(data, staged_.data() + stagedAt_, *done);
      stagedAt_ += *done;
      return Status::ok();
    }
    LOOM_TRY(usable());
    if (bytes == 0) return Status::ok();
    if (recvRequest_ == nullptr) {
      state_.progress();
      ucp_tag_recv_info_t info{};
      ucp_tag_message_h message =
          ucp_tag_probe_nb(state_.worker, tagOf(peer_.rank, index_), kFullMask, 1, &info);
      if (message == nullptr) return usable();
      // A message longer than the range (the sender joined ranges this side splits) lands
      // in staging, the rest in place.
      const bool direct = info.length <= bytes;
      if (!direct) {
        staged_.resize(info.length);
        stagedAt_ = staged_.size();  // nothing to drain until it has landed
      }
      recvInto_ = direct ? data : staged_.data();
      recvBytes_ = info.length;
      ucp_request_param_t param{};
      if (UcxRegistration* region = state_.registrationOf(recvInto_, info.length)) region->use(&param);
      ucs_status_ptr_t request = ucp_tag_msg_recv_nbx(state_.worker, recvInto_, info.length, message, &param);
      if (UCS_PTR_IS_ERR(request)) return state_.peerFailed(peer_.rank, UCS_PTR_STATUS(request));
      if (request == nullptr) return delivered(data, bytes, done);
      recvRequest_ = request;
      recvRange_ = data;
    } else if (data != recvRange_) {
      return error(loomInternalError, "ucx transport: rank %d: the receive range moved while a message was landing in it",
                   peer_.rank);
    }
    state_.progress();
    const ucs_status_t status = ucp_request_check_status(recvRequest_);
    if (status == UCS_INPROGRESS) return usable();
    ucp_request_free(recvRequest_);
    recvRequest_ = nullptr;
    if (status != UCS_OK) return state_.peerFailed(peer_.rank, status);
    return delivered(data, bytes, done);
  }

  int waitFd() const override { return state_.eventFd; }
  // The worker's descriptor signals only once armed, and arming fails while events wait to
  // be progressed (then the executor looks again). Every direction waits for input on it.
  bool prepareWait(bool /*send*/, pollfd* fd) override {
    if (state_.eventFd < 0 || state_.movedSinceArm) {
      state_.movedSinceArm = false;
      return false;
    }
    if (ucp_worker_arm(state_.worker) != UCS_OK) return false;
    *fd = {state_.eventFd, POLLIN, 0};
    return true;
  }

 private:
  // Posts one message; *done is its length once UCX has taken it (at once, or later through
  // progressSend). Its bytes may still wait in the worker then: see flushSome.
  Status post(const void* data, size_t bytes, size_t* done) {
    ucp_request_param_t param{};
    if (UcxRegistration* region = state_.registrationOf(data, bytes)) region->use(&param);
    ucs_status_ptr_t request = ucp_tag_send_nbx(peer_.ep, data, bytes, tagOf(state_.rank, index_), &param);
    if (UCS_PTR_IS_ERR(request)) return state_.peerFailed(peer_.rank, UCS_PTR_STATUS(request));
    if (request == nullptr) {  // sent (or buffered) at once
      state_.unflushed = true;
      *done = bytes;
      return Status::ok();
    }
    sendRequest_ = request;
    sendBytes_ = bytes;
    return progressSend(done);
  }

  Status progressSend(size_t* done) {
    state_.progress();
    const ucs_status_t status = ucp_request_check_status(sendRequest_);
    if (status == UCS_INPROGRESS) return usable();
    ucp_request_free(sendRequest_);
    sendRequest_ = nullptr;
    if (status != UCS_OK) return state_.peerFailed(peer_.rank, status);
    state_.unflushed = true;
    logTransportsOnce();
    *done = sendBytes_;
    return Status::ok();
  }

  // A message has landed in recvInto_: in the caller's range, or in staging to be drained.
  Status delivered(void* data, size_t bytes, size_t* done) {
    if (recvInto_ == data) {
      *done = recvBytes_;
      return Status::ok();
    }
    stagedAt_ = 0;
    return recvSome(data, bytes, done);
  }

  Status usable() {
    if (state_.closed) return error(loomRemoteError, "ucx transport: rank %d: the link was closed", peer_.rank);
    if (peer_.failure != UCS_OK) return state_.peerFailed(peer_.rank, peer_.failure);
    return Status::ok();
  }

  // Which UCX transports carry this pair, once it has carried a message (UCX wires an
  // endpoint up on its first use).
  void logTransportsOnce() {
    if (peer_.logged || !log::enabled(log::Level::kInfo)) return;
    peer_.logged = true;
    char* text = nullptr;
    size_t length = 0;
    FILE* out = open_memstream(&text, &length);
    if (out == nullptr) return;
    ucp_ep_print_info(peer_.ep, out);
    std::fclose(out);
    std::string lanes;
    for (const char* line = text; line != nullptr && *line != '\0';) {
      const char* end = std::strchr(line, '\n');
      std::string one(line, end ? static_cast<size_t>(end - line) : std::strlen(line));
      if (one.find("lane[") != std::string::npos) lanes += (lanes.empty() ? "" : "; ") + one.substr(one.find("lane["));
      line = end ? end + 1 : nullptr;
    }
    std::free(text);
    LOOM_INFO("ucx transport: rank %d -> rank %d: %s", state_.rank, peer_.rank, lanes.c_str());
  }

  State& state_;
  State::Peer& peer_;
  int index_;
  ucs_status_ptr_t sendRequest_ = nullptr;
  size_t sendBytes_ = 0;
  std::vector<uint8_t> packed_;  // a header and a small payload, sent as one message
  ucs_status_ptr_t recvRequest_ = nullptr;
  void* recvInto_ = nullptr;   // where the landing message goes
  void* recvRange_ = nullptr;  // the caller's range it was posted for
  size_t recvBytes_ = 0;
  std::vector<uint8_t> staged_;  // a message longer than the range it arrived for
  size_t stagedAt_ = 0;
};

UcxTransport::UcxTransport(std::unique_ptr<State> state, int linksPerPeer)
    : state_(std::move(state)), linksPerPeer_(linksPerPeer) {
  links_.resize(state_->peers.size() * static_cast<size_t>(linksPerPeer_));
}

UcxTransport::~UcxTransport() {
  state_->stopProgress();
  links_.clear();  // requests finish before the endpoints and worker go
  state_.reset();
}

Status UcxTransport::create(Bootstrap& bootstrap, int linksPerPeer, std::unique_ptr<UcxTransport>* out) {
  auto state = std::make_unique<State>();
  state->rank = bootstrap.rank();
  state->peers.resize(static_cast<size_t>(bootstrap.nranks()));
  for (size_t r = 0; r < state->peers.size(); ++r) state->peers[r].rank = static_cast<int>(r);

  ucp_config_t* config = nullptr;
  ucs_status_t status = ucp_config_read(nullptr, nullptr, &config);
  if (status != UCS_OK) return ucxError("reading the UCX configuration (UCX_* variables)", status);
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP;
  status = ucp_init(&params, config, &state->context);
  ucp_config_release(config);
  if (status != UCS_OK) return ucxError("ucp_init", status);
  ucp_worker_params_t workerParams{};
  workerParams.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  // The executor of a communicator runs on one thread at a time, but not always the same one
  // (the caller's, a host stream's, a device communicator's proxy).
  workerParams.thread_mode = UCS_THREAD_MODE_MULTI;
  status = ucp_worker_create(state->context, &workerParams, &state->worker);
  if (status != UCS_OK) return ucxError("ucp_worker_create", status);
  if (ucp_worker_get_efd(state->worker, &state->eventFd) != UCS_OK) state->eventFd = -1;

  ucp_address_t* address = nullptr;
  size_t length = 0;
  status = ucp_worker_get_address(state->worker, &address, &length);
  if (status != UCS_OK) return ucxError("ucp_worker_get_address", status);
  std::vector<uint8_t> mine(reinterpret_cast<uint8_t*>(address), reinterpret_cast<uint8_t*>(address) + length);
  ucp_worker_release_address(state->worker, address);

  // Two allgathers: the lengths, then the addresses padded to the longest.
  const size_t n = state->peers.size();
  std::vector<uint64_t> lengths(n);
  lengths[static_cast<size_t>(state->rank)] = length;
  LOOM_TRY(bootstrap.allGather(lengths.data(), sizeof(uint64_t)).withContext("ucx transport: address lengths"));
  size_t longest = 0;
  for (uint64_t l : lengths) longest = std::max<size_t>(longest, l);
  std::vector<uint8_t> table(longest * n);
  std::memcpy(table.data() + longest * static_cast<size_t>(state->rank), mine.data(), length);
  LOOM_TRY(bootstrap.allGather(table.data(), longest).withContext("ucx transport: worker addresses"));
  state->addresses.resize(n);
  for (size_t r = 0; r < n; ++r) {
    state->addresses[r].assign(table.data() + longest * r, table.data() + longest * r + lengths[r]);
  }
  State* st = state.get();
  out->reset(new UcxTransport(std::move(state), linksPerPeer));
  st->betweenRuns = std::thread([st] { st->progressBetweenRuns(); });
  return Status::ok();
}

void UcxTransport::beginRun() {
  std::lock_guard<std::mutex> lock(state_->runMutex);
  ++state_->runs;
}

void UcxTransport::endRun() {
  std::lock_guard<std::mutex> lock(state_->runMutex);
  --state_->runs;
  state_->lastRunEnd = std::chrono::steady_clock::now();
}

Status UcxTransport::connectOut(const std::vector<int>& peers, const Deadline&) {
  for (int peer : peers) {
    State::Peer& p = state_->peers[static_cast<size_t>(peer)];
    if (p.ep != nullptr) continue;
    ucp_ep_params_t params{};
    params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                        UCP_EP_PARAM_FIELD_ERR_HANDLER;
    params.address = reinterpret_cast<const ucp_address_t*>(state_->addresses[static_cast<size_t>(peer)].data());
    params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    params.err_handler.cb = &State::onError;
    params.err_handler.arg = &p;
    const ucs_status_t status = ucp_ep_create(state_->worker, &params, &p.ep);
    if (status != UCS_OK) {
      p.ep = nullptr;
      connectFailureCause_ = peer;
      return error(loomRemoteError, "ucx transport: connecting to rank %d: %s", peer, ucs_status_string(status));
    }
    for (int index = 0; index < linksPerPeer_; ++index) {
      links_[static_cast<size_t>(peer * linksPerPeer_ + index)] = std::make_unique<UcxLink>(*state_, peer, index);
    }
  }
  return Status::ok();
}

// UCX connects an endpoint on its first message; nothing to wait for here.
Status UcxTransport::acceptIn(const std::vector<int>& peers, const Deadline& deadline) {
  return connectOut(peers, deadline);
}

Link* UcxTransport::link(int peer, int index) {
  if (index < 0 || index >= linksPerPeer_ || peer < 0 || static_cast<size_t>(peer) >= state_->peers.size()) {
    return nullptr;
  }
  return links_[static_cast<size_t>(peer * linksPerPeer_ + index)].get();
}

// The cause reaches peers through the executor's notices over the bootstrap
// (core/failure_notices.h): a notice over UCX would need the worker progressed while peers'
// endpoints fail, where UCX 1.13's TCP transport trips its own assertions.
void UcxTransport::closeAll(int /*causeRank*/) {
  State& st = *state_;
  std::lock_guard<std::mutex> lock(st.runMutex);  // called in a run, or with none (abort)
  if (st.closed) return;
  // Force: what is still in flight (a send a stuck peer never takes) ends with an error, so
  // the links' requests are done and the caller's buffers free once the failed call returns.
  const auto until = std::chrono::steady_clock::now() + kCloseOnFailureBudget;
  for (State::Peer& p : st.peers) {
    if (p.ep == nullptr) continue;
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    param.flags = UCP_EP_CLOSE_FLAG_FORCE;
    finish(st.worker, ucp_ep_close_nbx(p.ep, &param), until);
    p.ep = nullptr;
  }
  finish(st.worker, st.flushRequest, until);
  st.flushRequest = nullptr;
  st.closed = true;
  for (auto& link : links_) link.reset();
}

// A worker flush, not one per endpoint: flushes of the endpoints sent to, tried first, did not
// complete in collectives_test's UCX runs (UCX 1.13; cause not found), while a worker with
// nothing outstanding answers at once. Once a peer failed, a flush may wait on its endpoint
// for good (it held a survivor for the whole timeout once): it is dropped then, since the
// communicator is failing anyway and the failed link reports why.
bool UcxTransport::flushSome() {
  State& st = *state_;
  if (st.closed) return true;
  if (st.flushRequest == nullptr) {
    if (!st.unflushed) return true;
    // Sends that complete from here on need the next flush.
    st.unflushed = false;
    ucp_request_param_t param{};
    ucs_status_ptr_t request = ucp_worker_flush_nbx(st.worker, &param);
    if (request == nullptr || UCS_PTR_IS_ERR(request)) return !st.unflushed;
    st.flushRequest = request;
  }
  st.progress();
  if (ucp_request_check_status(st.flushRequest) == UCS_INPROGRESS && !st.anyPeerFailed()) return false;
  ucp_request_free(st.flushRequest);
  st.flushRequest = nullptr;
  return !st.unflushed;
}

Status UcxTransport::registerMemory(void* base, size_t bytes, std::unique_ptr<MemoryRegistration>* out) {
  ucp_mem_map_params_t params{};
  params.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
  params.address = base;
  params.length = bytes;
  ucp_mem_h memh = nullptr;
  std::unique_lock<std::mutex> lock(state_->runMutex);  // not beside the thread's progress
  const ucs_status_t status = ucp_mem_map(state_->context, &params, &memh);
  lock.unlock();
  if (status != UCS_OK) return ucxError("ucp_mem_map (registering a buffer)", status);
  *out = std::make_unique<UcxRegistration>(*state_, base, bytes, memh);
  return Status::ok();
}

}  // namespace loom::transport
