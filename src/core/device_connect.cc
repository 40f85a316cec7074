// The device executor: a call's plans and the FIFOs they need (device_comm_impl.h).
#include <unistd.h>

#include <set>

#include "base/log.h"
#include "core/call_check.h"
#include "core/communicator.h"
#include "core/device_comm_impl.h"
#include "core/p2p.h"
#include "device/fifo_layout.h"

namespace loom::device_comm {

namespace {
constexpr uint32_t kConnectTag = 0x44455601;  // "DEV" 1: a peer's block handle

// For the connection's INFO line: which blocks are in pinned host memory (agreeOnDevices).
const char* hostFifoWords(bool own, bool peer) {
  if (own && peer) return "; FIFOs in pinned host memory both ways";
  if (own) return "; this rank's FIFOs for the peer in pinned host memory";
  return peer ? "; the peer's FIFOs for this rank in pinned host memory" : "";
}
}  // namespace

Status DeviceCommImpl::prepare(const DeviceJob& job) {
  arena_->reset();
  plans_.clear();
  connecting_.clear();
  try {
    if (job.barrier) {
      Plan& plan = plans_.emplace_back();
      plan.comm = comm_;
      plan.deviceMemory = true;
      plan.scratchSource = arena_.get();
      appendBarrier(plan, comm_->rank(), comm_->nranks());
    } else {
      LOOM_TRY(group::buildPlans(job.calls.data(), job.calls.size(), &plans_, arena_.get()));
    }
  } catch (const std::bad_alloc&) {
    return error(loomSystemError, "out of device memory for a call's scratch on device %d", comm_->device());
  }
  LOOM_TRY(checkCalls(plans_));
  std::set<int> needed;
  for (const Plan& plan : plans_) {
    for (const Step& s : plan.steps) {
      if (s.peer == Step::kNone) continue;
      if (!peers_[static_cast<size_t>(s.peer)].connected.load(std::memory_order_acquire)) needed.insert(s.peer);
    }
  }
  connecting_.assign(needed.begin(), needed.end());
  if (!connecting_.empty()) {
    std::vector<CallInfo> calls;
    std::set<int> peers;
    for (const Plan& plan : plans_) {
      calls.insert(calls.end(), plan.calls.begin(), plan.calls.end());
      for (const Step& s : plan.steps) {
        if (s.peer != Step::kNone) peers.insert(s.peer);
      }
    }
    std::lock_guard<std::mutex> walking(agreementMutex_);
    connectAgreement_.reset(calls, std::vector<int>(peers.begin(), peers.end()));
    connectSince_ = Clock::now();
  }
  return Status::ok();
}

// A peer's word on the bootstrap, awaited in slices: a peer that never sends it may be in
// another call, one that needs no connection to this rank (a reduce to another root), which
// the board or the watchdog's channel says (group_agreement.h). Not while this rank's earlier
// launches run: the watchdog compares theirs.
Status DeviceCommImpl::receiveConnectWord(int peer, void* data, size_t bytes, const std::string& what) {
  const Deadline deadline = Deadline::afterMs(comm_->config().timeoutMs);
  auto compare = [&] {
    if (Clock::now() - connectSince_ < GroupAgreement::kLookAfter || launchesOutstanding()) return Status::ok();
    std::lock_guard<std::mutex> walking(agreementMutex_);
    return connectAgreement_.look(*comm_, watchAnnouncements_.get());
  };
  for (;;) {
    const Deadline slice = deadline.earlier(Deadline::afterMs(GroupAgreement::kLookAfter.count()));
    const Status s = comm_->bootstrap().recv(peer, kConnectTag, data, bytes, slice);
    if (s.isOk()) return s;
    // A peer that found the mismatch first and went away closed its connection: what it
    // announced still names the mismatch, which says more.
    LOOM_TRY(compare());
    if (s.code() != loomTimeout || deadline.expired()) return s.withContext(what);
  }
}

Status DeviceCommImpl::connectOut() {
  const std::vector<PeerInfo>& info = comm_->bootstrap().peers();
  const PeerInfo& self = info[static_cast<size_t>(comm_->rank())];
  std::vector<int> remote;
  for (int p : connecting_) {
    PeerState& peer = peers_[static_cast<size_t>(p)];
    const PeerInfo& them = info[static_cast<size_t>(p)];
    peer.offHost = them.hostHash != self.hostHash;
    if (peer.offHost) {
      void* host = nullptr;
      void* device = nullptr;
      LOOM_TRY(runtime_->allocHostMapped(blockBytes(shape_, true), &host, &device));
      peer.hostBlock = static_cast<uint8_t*>(host);
      peer.block = static_cast<uint8_t*>(device);
      remote.push_back(p);
      continue;
    }
    SharedHandle handle;
    void* block = nullptr;
    LOOM_TRY(runtime_->allocShared(blockBytes(shapeOf(peer.hostFifo), false), them.pid, peer.hostFifo, &block,
                                   &handle));
    peer.block = static_cast<uint8_t*>(block);
    LOOM_TRY(comm_->bootstrap().send(p, kConnectTag, &handle, sizeof handle).withContext(
        format("device connection to rank %d", p)));
  }
  if (!remote.empty()) {
    LOOM_TRY(comm_->transport().connectOut(remote, Deadline::afterMs(comm_->config().timeoutMs)));
  }
  return Status::ok();
}

Status DeviceCommImpl::acceptIn() {
  const std::vector<PeerInfo>& info = comm_->bootstrap().peers();
  std::vector<int> remote;
  for (int p : connecting_) {
    if (peers_[static_cast<size_t>(p)].offHost) remote.push_back(p);
  }
  if (!remote.empty()) {
    LOOM_TRY(comm_->transport().acceptIn(remote, Deadline::afterMs(comm_->config().timeoutMs)));
    if (proxy_ == nullptr) proxy_ = std::make_unique<Proxy>(comm_->rank(), comm_->transport(), comm_->deviceCpus());
  }
  for (int p : connecting_) {
    PeerState& peer = peers_[static_cast<size_t>(p)];
    const PeerInfo& them = info[static_cast<size_t>(p)];
    if (!peer.offHost) {
      SharedHandle handle;
      LOOM_TRY(receiveConnectWord(p, &handle, sizeof handle, format("device connection from rank %d", p)));
      peer.peerHostFifo = handle.hostMemory != 0;
      if (handle.bytes != blockBytes(shapeOf(peer.peerHostFifo), false)) {
        return error(loomInternalError,
                     "rank %d's device FIFOs for this rank take %u bytes where this rank expects %zu", p,
                     handle.bytes, blockBytes(shapeOf(peer.peerHostFifo), false));
      }
      void* mapped = nullptr;
      LOOM_TRY(runtime_->openShared(handle, p, &mapped));
      peer.peerBlock = static_cast<uint8_t*>(mapped);
      if (them.pid != ::getpid()) {
        peer.process.identify(them.pid, them.pidNamespace);
        const uint8_t mappedNotice = 1;
        LOOM_TRY(comm_->bootstrap().send(p, kConnectTag, &mappedNotice, sizeof mappedNotice).withContext(
            format("device connection to rank %d", p)));
      }
    }
    LOOM_TRY(fillConnections(p));
    if (peer.offHost) {
      for (int c = 0; c < channels_; ++c) {
        const size_t at = kBlockStatusBytes + static_cast<size_t>(c) * 2 * ChannelLayout::bytes(shape_);
        proxy_->add(p, c, shape_, peer.hostBlock + at, peer.hostBlock + at + ChannelLayout::bytes(shape_));
      }
    }
    peer.connected.store(true, std::memory_order_release);
    LOOM_INFO("comm %016llx rank %d: device connection to rank %d: %s, %d channel(s)%s",
              static_cast<unsigned long long>(comm_->commId()), comm_->rank(), p,
              peer.offHost ? "another host: local FIFOs bridged to sockets by the proxy thread"
              : them.pid == ::getpid() ? "same process: the peer's memory by address"
              : std::strcmp(runtime_->name(), "cuda") == 0 && !peer.peerHostFifo ? "CUDA IPC"
                                                                                   : "shared memory",
              channels_, hostFifoWords(peer.hostFifo, peer.peerHostFifo));
  }
  // A process's block stays open to its peer until the peer has mapped it: a sender whose
  // call fits the FIFO may finish and destroy its communicator (removing the block's name)
  // before the receiver, just connected, has opened it. (A thread rank's block waits in the
  // process's handover table instead, which no wait here could replace: one thread may drive
  // both ranks.)
  for (int p : connecting_) {
    if (peers_[static_cast<size_t>(p)].offHost || info[static_cast<size_t>(p)].pid == ::getpid()) continue;
    uint8_t mappedNotice = 0;
    LOOM_TRY(receiveConnectWord(p, &mappedNotice, sizeof mappedNotice,
                                format("device connection from rank %d: waiting for it to map this rank's block", p)));
  }
  connecting_.clear();
  return Status::ok();
}

// Points the table's entries for `peer` at the FIFOs (fifo_layout.h): a same-host peer's
// receive side is in the receiver's block, head and llHead in the sender's; an off-host
// peer's channel c is two local regions, incoming then outgoing. A direction's FIFOs take the
// shape of the block they are in (shapeOf: device or pinned host memory), which both ends know.
// The peer's entries (one run of the table: connIndex) then go to the kernel's copy.
Status DeviceCommImpl::fillConnections(int peer) {
  PeerState& p = peers_[static_cast<size_t>(peer)];
  const FifoShape& own = p.offHost ? shape_ : shapeOf(p.hostFifo);
  const FifoShape& theirs = p.offHost ? shape_ : shapeOf(p.peerHostFifo);
  for (int c = 0; c < channels_; ++c) {
    uint8_t *in, *out, *headsOut, *headsIn;
    if (p.offHost) {
      const size_t channelBytes = ChannelLayout::bytes(shape_);
      in = p.block + kBlockStatusBytes + static_cast<size_t>(c) * 2 * channelBytes;
      out = in + channelBytes;
      headsOut = out;  // the proxy moves the outgoing slots and frees them
      headsIn = in;    // the proxy reads what the kernel freed
    } else {
      in = p.block + kBlockStatusBytes + static_cast<size_t>(c) * ChannelLayout::bytes(own);
      out = p.peerBlock + kBlockStatusBytes + static_cast<size_t>(c) * ChannelLayout::bytes(theirs);
      headsOut = in;   // the peer frees this rank's slots in this rank's block
      headsIn = out;   // this rank frees the peer's slots in the peer's block
    }
    auto fill = [&](bool send, uint8_t* fifo, uint8_t* heads, const FifoShape& shape) {
      const int index = connIndex(peer, c, send);
      Connection& k = conns_[index];
      k.tail = reinterpret_cast<uint64_t*>(fifo + ChannelLayout::kTailAt);
      k.info = reinterpret_cast<SlotInfo*>(fifo + ChannelLayout::kInfoAt);
      k.data = fifo + ChannelLayout::dataAt(shape);
      k.ll = reinterpret_cast<LLLine*>(fifo + ChannelLayout::llAt(shape));
      k.head = reinterpret_cast<uint64_t*>(heads + ChannelLayout::kHeadAt);
      k.llHead = reinterpret_cast<uint64_t*>(heads + ChannelLayout::kLLHeadAt);
      k.counters = counters_ + 2 * static_cast<size_t>(index);
      k.peerStatus = p.offHost ? nullptr : reinterpret_cast<const uint32_t*>(p.peerBlock);
      k.ownStatus = p.offHost ? nullptr : reinterpret_cast<uint32_t*>(p.block);
      k.peer = peer;
      k.shape = shape;
      k.ready = 1;
    };
    fill(true, out, headsOut, theirs);
    fill(false, in, headsIn, own);
  }
  const size_t first = static_cast<size_t>(connIndex(peer, 0, true)), count = static_cast<size_t>(channels_) * 2;
  return runtime_->copyToDevice(connsDevice_ + first, &conns_[first], count * sizeof(Connection));
}

}  // namespace loom::device_comm
