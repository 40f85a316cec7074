// The proxy thread that carries device FIFOs to off-host peers over socket links (proxy.h).
#include "device/proxy.h"

#include <sched.h>
#include <time.h>

#include <cstring>

#include "base/log.h"
#include "topology/affinity.h"
#include "transport/transport.h"

namespace loom::device {
namespace {

uint64_t loadAcquire(const uint8_t* at) { return __atomic_load_n(reinterpret_cast<const uint64_t*>(at), __ATOMIC_ACQUIRE); }
void storeRelease(uint8_t* at, uint64_t v) { __atomic_store_n(reinterpret_cast<uint64_t*>(at), v, __ATOMIC_RELEASE); }

}  // namespace

Proxy::Proxy(int rank, transport::Transport& transport, const std::vector<int>& cpus)
    : rank_(rank), transport_(transport) {
  // The proxy drives these links for as long as it lives: the transport makes no progress of
  // its own meanwhile (Transport::beginRun).
  transport_.beginRun();
  thread_ = std::thread([this, cpus] {
    // Near the GPU: the host-mapped FIFOs it copies were first touched there.
    std::string note;
    if (!cpus.empty()) {
      topo::bindCurrentThread(cpus, &note);
      LOOM_INFO("rank %d: device proxy thread: %s", rank_, note.c_str());
    }
    serve();
  });
}

Proxy::~Proxy() {
  stopping_.store(true, std::memory_order_release);
  thread_.join();
  transport_.endRun();
}

void Proxy::add(int peer, int channel, const FifoShape& shape, uint8_t* in, uint8_t* out) {
  transport::Link* link = transport_.link(peer, channel % transport_.linksPerPeer());
  std::lock_guard<std::mutex> lock(mutex_);
  Wire* wire = nullptr;
  for (auto& w : wires_) {
    if (w->link == link) wire = w.get();
  }
  if (wire == nullptr) {
    wires_.push_back(std::make_unique<Wire>());
    wire = wires_.back().get();
    wire->peer = peer;
    wire->link = link;
    wire->shape = shape;
  }
  wire->out.push_back(Fifo{channel, out});
  wire->in.push_back(Fifo{channel, in});
}

bool Proxy::sendsPending() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& w : wires_) {
    if (w->failed) continue;
    if (w->sending != kNone) return true;
    for (const Fifo& f : w->out) {
      if (loadAcquire(f.region + ChannelLayout::kTailAt) > f.moved) return true;
    }
  }
  return false;
}

void Proxy::drain(std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (sendsPending() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

void Proxy::fail(Wire& w, const char* what, const std::string& message) {
  w.failed = true;
  int none = -1;
  failedPeer_.compare_exchange_strong(none, w.peer, std::memory_order_acq_rel);
  LOOM_WARN("rank %d: device proxy %s rank %d: %s", rank_, what, w.peer, message.c_str());
}

// Sends the slots the kernel filled, a whole frame at a time per link.
bool Proxy::pumpOut(Wire& w) {
  bool progressed = false;
  for (;;) {
    if (w.sending == kNone) {
      for (size_t k = 0; k < w.out.size() && w.sending == kNone; ++k) {
        const size_t i = (w.nextOut + k) % w.out.size();
        if (loadAcquire(w.out[i].region + ChannelLayout::kTailAt) <= w.out[i].moved) continue;
        w.sending = i;
        w.nextOut = (i + 1) % w.out.size();
      }
      if (w.sending == kNone) return progressed;
      const Fifo& f = w.out[w.sending];
      const uint64_t slot = f.moved % w.shape.slots;
      w.sendFrame.channel = static_cast<uint32_t>(f.channel);
      std::memcpy(&w.sendFrame.info, f.region + ChannelLayout::kInfoAt + slot * sizeof(SlotInfo), sizeof(SlotInfo));
      w.sendDone = 0;
    }
    Fifo& f = w.out[w.sending];
    const uint8_t* data = f.region + ChannelLayout::dataAt(w.shape) + (f.moved % w.shape.slots) * w.shape.slotBytes;
    const size_t total = sizeof(Frame) + w.sendFrame.info.bytes;
    while (w.sendDone < total) {
      size_t done = 0;
      Status s = w.sendDone < sizeof(Frame)
                     ? w.link->sendWithHeader(reinterpret_cast<const uint8_t*>(&w.sendFrame) + w.sendDone,
                                              sizeof(Frame) - w.sendDone, data, w.sendFrame.info.bytes, &done)
                     : w.link->sendSome(data + (w.sendDone - sizeof(Frame)), total - w.sendDone, &done);
      if (!s.isOk()) {
        fail(w, "sending to", s.message());
        return progressed;
      }
      if (done == 0) return progressed;
      w.sendDone += done;
      progressed = true;
    }
    ++f.moved;
    storeRelease(f.region + ChannelLayout::kHeadAt, f.moved);
    w.sending = kNone;
  }
}

// Places the frames that arrive, each once its channel's FIFO has room.
bool Proxy::pumpIn(Wire& w) {
  bool progressed = false;
  for (;;) {
    while (w.recvDone < sizeof(Frame)) {
      size_t done = 0;
      Status s = w.link->recvSome(reinterpret_cast<uint8_t*>(&w.recvFrame) + w.recvDone, sizeof(Frame) - w.recvDone,
                                  &done);
      if (!s.isOk()) {
        fail(w, "receiving from", s.message());
        return progressed;
      }
      if (done == 0) return progressed;
      w.recvDone += done;
      progressed = true;
    }
    Fifo* f = nullptr;
    for (Fifo& candidate : w.in) {
      if (static_cast<uint32_t>(candidate.channel) == w.recvFrame.channel) f = &candidate;
    }
    if (f == nullptr || w.recvFrame.info.bytes > w.shape.slotBytes) {
      fail(w, "receiving from", format("a frame for channel %u of %u bytes, which this rank cannot place",
                                       w.recvFrame.channel, w.recvFrame.info.bytes));
      return progressed;
    }
    if (f->moved - loadAcquire(f->region + ChannelLayout::kHeadAt) >= w.shape.slots) return progressed;
    const uint64_t slot = f->moved % w.shape.slots;
    uint8_t* data = f->region + ChannelLayout::dataAt(w.shape) + slot * w.shape.slotBytes;
    const size_t total = sizeof(Frame) + w.recvFrame.info.bytes;
    while (w.recvDone < total) {
      size_t done = 0;
      Status s = w.link->recvSome(data + (w.recvDone - sizeof(Frame)), total - w.recvDone, &done);
      if (!s.isOk()) {
        fail(w, "receiving from", s.message());
        return progressed;
      }
      if (done == 0) return progressed;
      w.recvDone += done;
      progressed = true;
    }
    std::memcpy(f->region + ChannelLayout::kInfoAt + slot * sizeof(SlotInfo), &w.recvFrame.info, sizeof(SlotInfo));
    ++f->moved;
    storeRelease(f->region + ChannelLayout::kTailAt, f->moved);
    w.recvDone = 0;
  }
}

void Proxy::serve() {
  unsigned idle = 0;
  while (!stopping_.load(std::memory_order_acquire)) {
    bool progressed = false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (auto& w : wires_) {
        if (w->failed) continue;
        progressed = pumpOut(*w) || progressed;
        progressed = pumpIn(*w) || progressed;
      }
    }
    // The kernel signals nothing the thread could sleep on: look often while data flows, then
    // less often.
    if (progressed) {
      idle = 0;
    } else if (++idle < 64) {
      sched_yield();
    } else {
      const timespec nap{0, 50000};
      nanosleep(&nap, nullptr);
    }
  }
}

}  // namespace loom::device
