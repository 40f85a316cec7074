// The FIFO protocol between two ranks' workers: one direction of one channel between a pair
// is a ring of slots in memory both ends reach, with counters that only grow. The sender
// writes a slot and advances `tail`; the receiver consumes it and advances `head`; the sender
// reuses a slot once `head` says it is free. Counters persist across launches (Connection::
// counters), so a kernel replayed from a CUDA graph carries on where the last one stopped.
//
//   the receiver's memory                              the sender's memory
//   +------+----------------+----------------+-----+   +------+--------+
//   | tail | SlotInfo x N   | data: N slots  | LL  |   | head | llHead |
//   +------+----------------+----------------+-----+   +------+--------+
//      ^ sender advances (simple)                          ^ receiver advances
//
// Two wires, chosen per call by the tuner:
// - simple: a step's bytes go in pieces of up to slotBytes, one slot each; the sender copies a
//   piece in (16-byte stores), publishes tail with release, and the receiver copies it out or
//   reduces it straight into its destination, then publishes head. Full bandwidth, one flag
//   round trip per slot.
// - low latency (LL): a slot is llLines 16-byte lines, each 8 data bytes beside two 4-byte
//   flags that equal the slot's number + 1. The receiver polls the lines themselves: data and
//   flag arrive in one store, with no fence and no tail. Half the bandwidth, for small
//   messages. Slot memory is never cleared: an old line carries an older number.
//
//   LL slot: line 0 {piece bytes, piece flags} | lines 1-3 the call header | data lines
//
// The first piece of a step whose call header travels (Step::header) carries it; the receiver
// compares bytes and header with its own step, so ranks that disagree on a call fail with the
// difference named instead of corrupting a buffer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "device/data_moves.h"
#include "device/fifo_layout.h"
#include "device/worker_context.h"
#include "kernels/hd.h"

namespace loom::device {

// ---- Simple wire --------------------------------------------------------------------------------

LOOM_HD uint64_t piecesOf(uint64_t bytes, uint64_t capacity, bool header) {
  if (bytes == 0) return header ? 1 : 0;
  return (bytes + capacity - 1) / capacity;
}

// Sends `bytes` from src. *done is the end's simple counter (read by every thread, advanced
// here). False when the worker had to give up.
template <class W>
LOOM_HD bool sendSimple(const Ctx<W>& ctx, const Connection& c, const uint8_t* src, uint64_t bytes,
                        const uint8_t* header, uint64_t* done) {
  W& w = ctx.w;
  const uint64_t capacity = c.shape.slotBytes, pieces = piecesOf(bytes, capacity, header != nullptr);
  for (uint64_t k = 0; k < pieces; ++k) {
    const uint64_t posted = *done;
    if (posted >= c.shape.slots &&
        !waitAtLeast(ctx, c.head, posted + 1 - c.shape.slots, c.peerStatus, Wait{kWaitSlot, 0})) {
      return false;
    }
    const uint64_t slot = posted % c.shape.slots, at = k * capacity;
    const uint64_t n = bytes - at < capacity ? bytes - at : capacity;
    copyBytes<false>(w, c.data + slot * capacity, src + at, n);
    if (w.thread() == 0) {
      SlotInfo& info = c.info[slot];
      info.bytes = static_cast<uint32_t>(n);
      info.flags = k == 0 && header != nullptr ? kPieceHeader : 0;
      if (k == 0 && header != nullptr) memcpy(info.header, header, sizeof info.header);
    }
    w.sync();
    if (w.thread() == 0) w.release(c.tail, posted + 1);
    *done = posted + 1;
  }
  return true;
}

// A slot's record as the sender last wrote it (past any stale cached copy).
template <class W>
LOOM_HD SlotInfo readSlotInfo(W& w, const SlotInfo* at) {
  uint64_t words[sizeof(SlotInfo) / 8];
  for (size_t i = 0; i < sizeof words / 8; ++i) {
    words[i] = w.template loadFresh<uint64_t>(reinterpret_cast<const uint8_t*>(at) + i * 8);
  }
  SlotInfo info;
  memcpy(&info, words, sizeof info);
  return info;
}

// memcmp, which device code lacks.
LOOM_HD bool sameBytes(const uint8_t* a, const uint8_t* b, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (a[i] != b[i]) return false;
  }
  return true;
}

// Checks a piece's size and header against what this step expects; thread 0 records a
// mismatch. The same answer on every thread.
template <class W>
LOOM_HD_CALLED bool pieceMatches(const Ctx<W>& ctx, uint32_t bytes, uint32_t flags, const uint8_t* header, uint64_t expected,
                          const uint8_t* expectedHeader) {
  bool ok = bytes == expected && ((flags & kPieceHeader) != 0) == (expectedHeader != nullptr);
  if (ok && expectedHeader != nullptr) ok = sameBytes(header, expectedHeader, 24);
  if (!ok && ctx.w.thread() == 0) {
    if (((flags & kPieceHeader) != 0) != (expectedHeader != nullptr)) {
      ctx.fail(kOutOfStep, expectedHeader != nullptr, (flags & kPieceHeader) != 0, nullptr);
    } else if (expectedHeader != nullptr && !sameBytes(header, expectedHeader, 24)) {
      ctx.fail(kWrongHeader, expected, bytes, header);
    } else {
      ctx.fail(kWrongBytes, expected, bytes, nullptr);
    }
  }
  return ok;
}

// Receives `bytes`, handing each piece to consume.range(offset in the step, FIFO bytes, n),
// which every thread of the worker calls together. *done is the end's simple counter.
template <class W, class Consumer>
LOOM_HD bool recvSimple(const Ctx<W>& ctx, const Connection& c, uint64_t bytes, const uint8_t* header,
                        Consumer& consume, uint64_t* done) {
  W& w = ctx.w;
  const uint64_t capacity = c.shape.slotBytes, pieces = piecesOf(bytes, capacity, header != nullptr);
  for (uint64_t k = 0; k < pieces; ++k) {
    const uint64_t taken = *done;
    if (!waitAtLeast(ctx, c.tail, taken + 1, c.peerStatus, Wait{kWaitPiece, 0})) return false;
    const uint64_t slot = taken % c.shape.slots, at = k * capacity;
    const uint64_t n = bytes - at < capacity ? bytes - at : capacity;
    const SlotInfo info = readSlotInfo(w, &c.info[slot]);
    if (!pieceMatches(ctx, info.bytes, info.flags, info.header, n, k == 0 ? header : nullptr)) return false;
    consume.range(at, c.data + slot * capacity, n);
    w.sync();
    if (w.thread() == 0) w.release(c.head, taken + 1);
    *done = taken + 1;
  }
  return true;
}

// ---- Low-latency wire ---------------------------------------------------------------------------

// The `n` (<= 8) bytes at p as the low bytes of a word.
LOOM_HD uint64_t gather8(const uint8_t* p, uint64_t n) {
  uint64_t v = 0;
  if (n == 8 && reinterpret_cast<uintptr_t>(p) % 8 == 0) return *reinterpret_cast<const uint64_t*>(p);
  memcpy(&v, p, n);
  return v;
}

template <class W>
LOOM_HD bool sendLowLatency(const Ctx<W>& ctx, const Connection& c, const uint8_t* src, uint64_t bytes,
                            const uint8_t* header, uint64_t* done) {
  W& w = ctx.w;
  const uint64_t capacity = c.shape.llPayload(), pieces = piecesOf(bytes, capacity, header != nullptr);
  for (uint64_t k = 0; k < pieces; ++k) {
    const uint64_t posted = *done;
    if (posted >= c.shape.llSlots && !waitAtLeast(ctx, c.llHead, posted + 1 - c.shape.llSlots, c.peerStatus,
                                                      Wait{kWaitSlot, 0})) {
      return false;
    }
    const uint32_t flag = static_cast<uint32_t>(posted + 1);
    LLLine* lines = c.ll + (posted % c.shape.llSlots) * c.shape.llLines;
    const uint64_t at = k * capacity, n = bytes - at < capacity ? bytes - at : capacity;
    const bool withHeader = k == 0 && header != nullptr;
    const uint64_t count = kLLControlLines + (n + 7) / 8;
    for (uint64_t i = static_cast<uint64_t>(w.thread()); i < count; i += static_cast<uint64_t>(w.threads())) {
      uint64_t word;
      if (i == 0) {
        word = n | static_cast<uint64_t>(withHeader ? kPieceHeader : 0) << 32;
      } else if (i < kLLControlLines) {
        word = withHeader ? gather8(header + (i - 1) * 8, 8) : 0;
      } else {
        const uint64_t from = (i - kLLControlLines) * 8;
        word = gather8(src + at + from, n - from < 8 ? n - from : 8);
      }
      w.storeLine(&lines[i], static_cast<uint32_t>(word), static_cast<uint32_t>(word >> 32), flag);
    }
    *done = posted + 1;
  }
  return true;
}

// Each thread polls line i until its flags say it arrived; false when it had to give up.
template <class W>
LOOM_HD bool awaitLine(const Ctx<W>& ctx, const Connection& c, const LLLine* line, uint32_t flag, uint64_t* word) {
  uint32_t lo = 0, hi = 0;
  uint64_t since = 0;
  for (uint32_t spins = 1; !ctx.w.loadLine(line, flag, &lo, &hi); ++spins) {
    if ((spins & (W::kChecksEvery - 1)) == 0 && ctx.mustStop(c.peerStatus, Wait{kWaitLine, 0}, flag, 0, &since)) {
      return false;
    }
    ctx.w.pause(spins);
  }
  *word = lo | static_cast<uint64_t>(hi) << 32;
  return true;
}

// Receives `bytes`, handing each data line to consume.word(offset in the step, the 8 bytes,
// how many of them count), on the thread that polled it. *done is the end's LL counter.
template <class W, class Consumer>
LOOM_HD bool recvLowLatency(const Ctx<W>& ctx, const Connection& c, uint64_t bytes, const uint8_t* header,
                            Consumer& consume, uint64_t* done) {
  W& w = ctx.w;
  const uint64_t capacity = c.shape.llPayload(), pieces = piecesOf(bytes, capacity, header != nullptr);
  for (uint64_t k = 0; k < pieces; ++k) {
    const uint64_t taken = *done;
    const uint32_t flag = static_cast<uint32_t>(taken + 1);
    const LLLine* lines = c.ll + (taken % c.shape.llSlots) * c.shape.llLines;
    const uint64_t at = k * capacity, n = bytes - at < capacity ? bytes - at : capacity;
    // Every thread reads the control lines itself, so all agree on the piece.
    uint64_t control[kLLControlLines];
    bool gaveUp = false;
    for (uint32_t i = 0; i < kLLControlLines && !gaveUp; ++i) gaveUp = !awaitLine(ctx, c, &lines[i], flag, &control[i]);
    if (w.syncAny(gaveUp)) return false;
    uint8_t peerHeader[24];
    memcpy(peerHeader, &control[1], sizeof peerHeader);
    if (!pieceMatches(ctx, static_cast<uint32_t>(control[0]), static_cast<uint32_t>(control[0] >> 32), peerHeader, n,
                      k == 0 ? header : nullptr)) {
      return false;
    }
    const uint64_t count = (n + 7) / 8;
    for (uint64_t i = static_cast<uint64_t>(w.thread()); i < count && !gaveUp; i += static_cast<uint64_t>(w.threads())) {
      uint64_t word = 0;
      gaveUp = !awaitLine(ctx, c, &lines[kLLControlLines + i], flag, &word);
      if (!gaveUp) consume.word(at + i * 8, word, n - i * 8 < 8 ? n - i * 8 : 8);
    }
    if (w.syncAny(gaveUp)) return false;
    if (w.thread() == 0) w.release(c.llHead, taken + 1);
    *done = taken + 1;
  }
  return true;
}

}  // namespace loom::device
