// The memory of the FIFO protocol (fifo.h has the protocol itself): what a slot's record and
// a low-latency line are, the geometry every FIFO of a communicator shares, what the kernel
// knows of one end of a connection, and where each part sits in a rank's memory for a peer.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/hd.h"

namespace loom::device {

constexpr uint32_t kPieceHeader = 1;  // SlotInfo::flags: header holds the call's header

struct SlotInfo {
  uint32_t bytes;
  uint32_t flags;
  uint8_t header[24];
};
static_assert(sizeof(SlotInfo) == 32, "SlotInfo is one 32-byte record");

struct alignas(16) LLLine {
  uint32_t data0, flag0, data1, flag1;
};
constexpr uint32_t kLLControlLines = 4;  // piece bytes and flags, then 24 header bytes

// Geometry of every FIFO of a communicator.
struct FifoShape {
  uint32_t slots;      // simple slots
  uint32_t slotBytes;  // a multiple of 256
  uint32_t llSlots;
  uint32_t llLines;    // lines per LL slot, kLLControlLines + at least one

  LOOM_HD uint64_t llPayload() const { return static_cast<uint64_t>(llLines - kLLControlLines) * 8; }
};

// One end of one direction of one channel to one peer, as the kernel sees it. For a send end
// tail/info/data/ll are the receiver's (mapped), head/llHead this rank's; for a receive end the
// other way round. Off-host peers get local memory on both sides, which a proxy thread
// bridges to the network (proxy.h).
struct Connection {
  uint64_t* tail;
  SlotInfo* info;
  uint8_t* data;
  LLLine* ll;
  uint64_t* head;
  uint64_t* llHead;
  uint64_t* counters;          // this end's own: [0] simple slots, [1] LL slots it has done
  const uint32_t* peerStatus;  // the peer's status word (null: nothing to watch)
  uint32_t* ownStatus;         // this rank's status word where the peer watches it (null: none)
  int32_t peer;
  uint32_t ready;              // 1 once set up
  FifoShape shape;
};

// ---- Memory layout ---------------------------------------------------------------------------
// A rank's block for one peer: a line with this rank's status word as that peer sees it, then
// per channel the receive side of the peer -> this rank direction and head and llHead of the
// this rank -> peer direction.
//
//   | status | channel 0: tail | head | llHead | SlotInfo x slots | data | LL | channel 1 ...

constexpr size_t kBlockStatusBytes = 256;  // the status line, padded so channels stay aligned

struct ChannelLayout {
  static constexpr size_t kTailAt = 0, kHeadAt = 64, kLLHeadAt = 128, kInfoAt = 256;
  static size_t align(size_t n, size_t to) { return (n + to - 1) / to * to; }
  static size_t dataAt(const FifoShape& s) { return align(kInfoAt + sizeof(SlotInfo) * s.slots, 256); }
  static size_t llAt(const FifoShape& s) {
    return align(dataAt(s) + static_cast<size_t>(s.slots) * s.slotBytes, 256);
  }
  static size_t bytes(const FifoShape& s) {
    return align(llAt(s) + static_cast<size_t>(s.llSlots) * s.llLines * sizeof(LLLine), 4096);
  }
};

}  // namespace loom::device
