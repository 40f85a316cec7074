// The proxy: a host thread that carries a device communicator's FIFOs to peers on other
// hosts. For such a peer the kernel's FIFOs are local, host-mapped memory (device_connect.cc);
// the proxy sends each slot the kernel fills over the communicator's socket links and frees
// it, and places each slot that arrives into the receiving FIFO once the kernel has freed
// room. It touches only that memory and the sockets, never a stream.
//
//   kernel --slot--> out FIFO --proxy--> socket ==> socket --proxy--> in FIFO --slot--> kernel
//
// On the wire each slot is a frame {channel, SlotInfo, the slot's bytes}. Channels share a
// link when there are more channels than links (c % LOOM_SOCKET_NSOCKS or LOOM_UCX_LINKS); a frame
// waits on its link until its channel has room, which delays but cannot deadlock the others,
// since no step of one channel waits for another channel (the algorithms keep channels
// apart).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "device/fifo_layout.h"

namespace loom {

namespace transport {
class Link;
class Transport;
}

namespace device {

class Proxy {
 public:
  // Starts the thread, bound to `cpus` (none: unbound), for rank `rank`, whose links to
  // off-host peers `transport` holds.
  Proxy(int rank, transport::Transport& transport, const std::vector<int>& cpus);
  // Stops the thread (what is in flight stays unsent: the communicator is going away).
  ~Proxy();
  Proxy(const Proxy&) = delete;
  Proxy& operator=(const Proxy&) = delete;

  // Carries channel `channel` to `peer`: `in` and `out` are its incoming and outgoing FIFO
  // regions (ChannelLayout, host view). The links to the peer must exist.
  void add(int peer, int channel, const FifoShape& shape, uint8_t* in, uint8_t* out);
  // A peer whose link failed or closed (it is gone), or -1.
  int failedPeer() const { return failedPeer_.load(std::memory_order_acquire); }
  // Waits (up to `limit`) until every slot the kernel filled has left on its link, or the link
  // failed: the communicator's kernels have finished, and what they sent must reach peers
  // that are still running before this rank closes its sockets.
  void drain(std::chrono::milliseconds limit);

 private:
  struct Frame {
    uint32_t channel;
    uint32_t reserved;
    SlotInfo info;
  };
  // One direction of one channel.
  struct Fifo {
    int channel;
    uint8_t* region;
    uint64_t moved = 0;  // slots sent (outgoing) or placed (incoming)
  };
  // One socket link to a peer, with the channels that use it and what it is moving now.
  struct Wire {
    int peer;
    transport::Link* link;
    FifoShape shape;
    std::vector<Fifo> out, in;
    size_t nextOut = 0;        // round robin over the outgoing channels
    size_t sending = kNone;    // the frame going out (index into out), and how far
    Frame sendFrame{};
    size_t sendDone = 0;
    Frame recvFrame{};         // the frame coming in, and how far
    size_t recvDone = 0;
    bool failed = false;
  };

  static constexpr size_t kNone = ~size_t{0};

  void serve();
  bool sendsPending();
  bool pumpOut(Wire& w);
  bool pumpIn(Wire& w);
  void fail(Wire& w, const char* what, const std::string& message);

  const int rank_;
  transport::Transport& transport_;
  std::mutex mutex_;  // guards wires_ against add() while the thread runs
  std::vector<std::unique_ptr<Wire>> wires_;
  std::atomic<bool> stopping_{false};
  std::atomic<int> failedPeer_{-1};
  std::thread thread_;
};

}  // namespace device
}  // namespace loom
