// Shared-memory FIFO links between the ranks of one host (shm_transport.h).
#include "transport/shm_transport.h"

#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cerrno>
#include <cstring>
#include <new>
#include <optional>
#include <thread>
#include <type_traits>

#include "base/env.h"
#include "base/log.h"
#include "base/peer_process.h"
#include "base/tsan_handoff.h"
#include "kernels/reduce.h"
#include "transport/shm_segment.h"


namespace loom::transport {
namespace {

// Segment layout. Each side of the pair owns the lines it writes, so the two never write
// the same cache line; counters only grow (position in a FIFO = counter & (fifoBytes - 1)).
//
//   offset 0     magic | fifoBytes
//                ends[0]   creator (lower rank): attached, closed, cause
//                ends[1]   opener  (higher rank): same
//                fifos[0]  creator -> opener:  head | tail | posted send | reader's answers
//                fifos[1]  opener -> creator:  same
//                mail[0]   creator -> opener:  small-message slots
//                mail[1]   opener -> creator:  same
//   kDataOffset  data of fifos[0]   (fifoBytes)
//                data of fifos[1]   (fifoBytes)
//
// Every byte sent has a position in the pair's stream (the writer's head counts them all);
// where it lies depends on how it went:
//
// A small write (up to kMailBytes) goes into the next mail slot when the reader is done with
// it: the bytes and their position, then a stamp {message number, length} in the same cache
// line, so a reader that polls the stamp gets the data with it, one line crossing the cores
// where the ring takes two (its head counter, then its data), and the slots, few and reused,
// stay in the two caches. The ring's positions under a mail message stay unused, and `head`
// is not stored for it. The reader takes the message it waits for once its position is the
// reader's own; ring bytes run up to that position or `head`, whichever is lower (the writer
// stores a stamp before the `head` that follows it, so one seen with `head` is never missed).
//
// A posted send is a large message the reader copies straight from the writer's memory:
// the writer publishes {address, length, offset = head} and puts nothing more in the FIFO
// until the reader has read it all (directRead counts the bytes), refused it (the kernel
// will not let it read: the writer streams the rest through the FIFO at the same offset,
// and every later send too) or declined it (it wants to reduce the bytes from the FIFO:
// the writer streams the rest of this send and keeps posting later ones).
constexpr size_t kCacheLine = 64;
constexpr uint64_t kMagic = 0x334d48534d4f4f4cull;  // "LOOMSHM3"

using Counter = std::atomic<uint64_t>;
using Flag = std::atomic<uint32_t>;
// Lock-free atomics are address-free, so they work between processes mapping one file.
static_assert(Counter::is_always_lock_free && Flag::is_always_lock_free,
              "shared-memory atomics must be lock-free");

struct alignas(kCacheLine) End {
  Flag attached;
  Flag closed;  // its link is gone: calls that wait on it fail instead
  Flag cause;   // written before `closed`: 1 + the rank whose failure closed it (0: none)
};

struct Fifo {
  alignas(kCacheLine) Counter head;  // bytes written, ever (writer)
  alignas(kCacheLine) Counter tail;  // bytes read, ever (reader)
  // Writer: the sequence number of the latest posted send, set after its fields.
  alignas(kCacheLine) Counter posted;
  uint64_t address;
  uint64_t length;
  uint64_t offset;
  // Reader: bytes of posted sends read, ever; the sequence numbers of the last send refused
  // and declined; copies from the writer's memory in progress.
  alignas(kCacheLine) Counter directRead;
  Counter refused;
  Counter declined;
  Flag copying;
};

// A mail slot's stamp holds (1 + the message's number) << 8 | its length, 0 until the first:
// the reader knows the number it waits for, so a stamp is fresh only when it matches.
constexpr size_t kMailSlotBytes = 256;
constexpr size_t kMailSlots = 16;
struct alignas(kCacheLine) MailSlot {
  Counter stamp;      // stored after the other fields
  uint64_t position;  // in the stream
  uint8_t bytes[kMailSlotBytes - sizeof(Counter) - sizeof(uint64_t)];
};
constexpr size_t kMailBytes = sizeof(MailSlot::bytes);
// The largest message moved whole (Link::sendWhole), header and 32 KiB: a plan's making and
// running (core/quick_messages.h) still cost a 2-rank exchange of 32 KiB 0.7 of its 11 us on the
// AMD EPYC (Zen 1) VM, as at 8 bytes (docs/RESULTS.md, "Small messages without a plan").
constexpr size_t kWholeBytes = 32768 + Link::kMostWholeHeaderBytes;
static_assert(kMailBytes < 256 && sizeof(MailSlot) == kMailSlotBytes, "a mail length fits the stamp's low byte");

struct Header {
  uint64_t magic;
  uint64_t fifoBytes;
  End ends[2];
  Fifo fifos[2];
  MailSlot mail[2][kMailSlots];
};
static_assert(std::is_standard_layout<Header>::value && std::is_trivially_destructible<Header>::value,
              "the header lives in shared memory");

constexpr size_t kDataOffset = (sizeof(Header) + 4095) / 4096 * 4096;

size_t segmentBytes(size_t fifoBytes) { return kDataOffset + 2 * fifoBytes; }

// The longest segment path the offer carries.
constexpr size_t kMaxName = 240;

// A higher rank waiting for an offer checks the lower rank's process this often.
constexpr long long kOfferSliceMs = 100;
// How long a rank that gives up spends telling each waiting peer.
constexpr long long kGaveUpNoticeMs = 1000;
// A peer whose segment is gone may have sent why: wait this long for that notice.
constexpr long long kGoneNoticeWaitMs = 100;

Header& headerOf(const ShmSegment& segment) { return *static_cast<Header*>(segment.data()); }

void attach(End& end) { end.attached.store(1, std::memory_order_release); }

// The creator's half: starts the lifetime of the shared header (the file is zeroed).
void initSegment(ShmSegment& segment, size_t fifoBytes) {
  auto* header = new (segment.data()) Header();
  header->magic = kMagic;
  header->fifoBytes = fifoBytes;
  attach(header->ends[0]);
}

Status attachSegment(ShmSegment& segment, size_t fifoBytes) {
  Header& header = headerOf(segment);
  if (header.magic != kMagic || header.fifoBytes != fifoBytes) {
    return error(loomInternalError, "shared memory %s is not a Loom shm segment of %zu-byte FIFOs",
                 segment.name().c_str(), fifoBytes);
  }
  attach(header.ends[1]);
  return Status::ok();
}

void copyIntoRing(uint8_t* ring, size_t mask, uint64_t at, const uint8_t* src, size_t n, bool streaming) {
  size_t start = static_cast<size_t>(at) & mask;
  size_t first = std::min(n, mask + 1 - start);
  if (streaming) {
    kernels::copyStreaming(ring + start, src, first);
    kernels::copyStreaming(ring, src + first, n - first);
    return;
  }
  std::memcpy(ring + start, src, first);
  std::memcpy(ring, src + first, n - first);
}

void copyOutOfRing(const uint8_t* ring, size_t mask, uint64_t at, uint8_t* dst, size_t n) {
  size_t start = static_cast<size_t>(at) & mask;
  size_t first = std::min(n, mask + 1 - start);
  std::memcpy(dst, ring + start, first);
  std::memcpy(dst + first, ring, n - first);
}

// Nanoseconds from `clock`: CLOCK_MONOTONIC_COARSE costs a few nanoseconds to read (ticks of a
// few ms), CLOCK_MONOTONIC times a copy of a few microseconds.
uint64_t nowNs(clockid_t clock) {
  timespec ts;
  ::clock_gettime(clock, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000u + static_cast<uint64_t>(ts.tv_nsec);
}

// A call that moves nothing checks whether the peer still lives at most this often.
constexpr uint64_t kAliveCheckNs = 1000000;

// A reader gives the ring's room back a piece of this many bytes at a time (a quarter of a
// smaller ring), so that the writer fills one piece while the reader copies out the next.
// A reader that copied all it found before giving any room back left the writer waiting
// for the whole ring, and the two took turns: a one-way 64 MiB broadcast through the FIFO
// ran 1.6-1.8x (out of place) and 2.4-2.9x (in place) slower on the Intel Xeon VM
// (docs/RESULTS.md).
constexpr size_t kHandOverBytes = size_t{64} << 10;

}  // namespace

// What the lower rank sends the higher one on the bootstrap: a segment, or (an empty name)
// word that it gave up before offering one.
struct ShmTransport::SegmentOffer {
  uint64_t fifoBytes;
  int32_t gaveUpFor;        // empty name: the rank whose failure made it give up (-1: none)
  char name[kMaxName + 8];  // NUL-terminated
};

// One end of a pair's segment: writes into one FIFO, reads from the other.
class ShmTransport::ShmLink : public Link {
 public:
  // side 0: this rank created the segment; 1: it opened it.
  // peerInfo: the peer as the bootstrap reported it, so that its process is watched from the
  // start (a peer that dies before it maps the segment never attaches).
  // directMinBytes: from which size the pair reads each other's sends directly (0: never).
  ShmLink(ShmSegment segment, int side, int peer, const PeerInfo& peerInfo, size_t directMinBytes,
          const Settings& settings);
  ~ShmLink() override;

  Status sendSome(const void* data, size_t bytes, size_t* done) override;
  Status sendBuffered(const void* data, size_t bytes, size_t* done) override;
  // Header and body in one mail message where they fit; the header alone into the ring
  // otherwise, where the body follows it (the reader finds both behind one head counter).
  Status sendWithHeader(const void* header, size_t headerBytes, const void* body, size_t bodyBytes,
                        size_t* done) override;
  // Into a mail slot where one is free and the message fits, else into the ring where it has
  // room for all of it; up to kWholeBytes, a quarter of the ring, and short of a send the
  // receiver would read directly (its header in the ring, the rest posted: never whole there).
  size_t wholeMessageBytes() const override {
    return std::min({kWholeBytes, (mask_ + 1) / 4, directMinBytes_ > 0 ? directMinBytes_ : kWholeBytes});
  }
  bool sendWhole(const void* header, size_t headerBytes, const void* body, size_t bodyBytes) override;
  Whole receiveWhole(const void* header, size_t headerBytes, void* body, size_t bodyBytes) override;
  bool copiesSends() const override { return true; }
  size_t sendCopy(const void* data, size_t bytes) override;
  Status recvSome(void* data, size_t bytes, size_t* done) override;
  int waitFd() const override { return -1; }
  // FIFO bytes in place (a posted send is read with recvSome).
  void peek(const void** data, size_t bytes, size_t* available) override;
  void consume(size_t bytes) override;
  // Declines a posted send that is next in the stream, so that it comes through the FIFO.
  void preferMapped() override;
  uint64_t offeredSends() const override { return postedCount_; }
  // After a failure the bytes in flight do not matter: close without waiting for the peer,
  // telling it which rank's failure (-1: none known) made this one give up.
  void abandon(int causeRank) {
    abandoned_ = true;
    if (causeRank >= 0) ownEnd_.cause.store(static_cast<uint32_t>(causeRank) + 1, std::memory_order_relaxed);
  }
  int closedBecauseOf() const override {
    return static_cast<int>(peerEnd_.cause.load(std::memory_order_acquire)) - 1;
  }
  // Whether the peer has mapped the segment (the creator's side asks).
  bool peerAttached() const { return peerEnd_.attached.load(std::memory_order_acquire) != 0; }

 private:
  // A send of this rank that the peer reads from this process's memory.
  struct PostedSend {
    const uint8_t* base;
    size_t length;
    size_t reported;      // bytes sendSome has reported done
    uint64_t seq;
    uint64_t readBefore;  // the peer's directRead when it was posted
  };
  // A send of the peer that this rank is reading from the peer's memory.
  struct PeerSend {
    uint64_t seq;
    uint64_t address;
    size_t length;
    size_t read;
  };

  // Into a mail slot where the bytes fit one and it is free, else into the ring (writeRing:
  // what room there is).
  size_t writeFifo(const void* data, size_t bytes);
  size_t writeRing(const void* data, size_t bytes);
  // Bytes the ring can take now, looking at the reader's tail again when fewer than `wanted`.
  size_t ringRoom(size_t wanted);
  // kHandOverBytes, or a quarter of a smaller ring.
  size_t handOverBytes() const { return std::min(kHandOverBytes, (mask_ + 1) / 4); }
  // `a` then `b` as one mail message, if the next slot is free; all or nothing.
  bool writeMail(const void* a, size_t aBytes, const void* b, size_t bBytes);
  // sendSome (mayOffer) and sendBuffered: a large send is offered for a direct read only where
  // the caller may; the rest of an earlier send comes first either way.
  Status send(const void* data, size_t bytes, bool mayOffer, size_t* done);
  void post(const void* data, size_t bytes);
  Status continuePosted(const void* data, size_t bytes, size_t* done);

  size_t readFifo(void* data, size_t bytes);
  // Bytes ready at tail_ in one piece, looking at the shared counters again when fewer than
  // `bytes` were known; *inMail: they are a mail message's (at mailData()), else the ring's.
  size_t ready(size_t bytes, bool* inMail);
  size_t readyKnown(bool* inMail) const;
  // Notes the next mail message when its stamp is fresh (it may lie past ring bytes).
  void lookForMail();
  const uint8_t* mailData() const { return inMail_[mailRead_ % kMailSlots].bytes + (tail_ - mailStart_); }
  void advanceTail(size_t bytes);
  Status receive(void* data, size_t bytes, size_t* done);
  bool takePeerSend();
  Status readPeerSend(void* data, size_t bytes, size_t* done);
  // Tells the writer to stream the rest of the send being read through the FIFO, writing
  // its sequence number to `answer`: in_.refused for good (the kernel will not let this
  // rank read), in_.declined for this send only.
  void answerPeerSend(Counter& answer);

  // Called when a call moved nothing: an error once the peer closed or died.
  Status stalled();
  Status closedError() const;
  Status exitedError() const;

  // The creator's end closing before the peer mapped the segment: wait (while the peer lives,
  // up to lingerMs) so that bytes already sent are not lost with the segment's name.
  void lingerForPeer();

  ShmSegment segment_;
  const Settings& settings_;
  int peer_;
  int side_;
  bool abandoned_ = false;
  size_t mask_;
  End& peerEnd_;
  End& ownEnd_;
  Fifo& out_;
  Fifo& in_;
  uint8_t* outData_;
  const uint8_t* inData_;
  MailSlot* outMail_;
  const MailSlot* inMail_;
  PeerProcess process_;
  uint64_t lastAliveCheckNs_ = 0;

  size_t directMinBytes_;

  // Writing.
  bool postLarge_;         // until the peer refuses a posted send
  uint64_t head_ = 0;
  uint64_t tailSeen_ = 0;  // the reader's tail when last looked at
  uint64_t postedCount_ = 0;
  std::optional<PostedSend> posted_;
  size_t declinedLeft_ = 0;  // bytes of a declined send still to write into the FIFO
  uint64_t mailSent_ = 0;    // mail messages written, ever
  uint64_t mailSlotEnd_[kMailSlots] = {};  // where each slot's last message ends: free once read
  StoreChooser stores_;

  // Reading.
  bool readPeerMemory_;    // until the kernel refuses, or the peer turns out foreign
  uint64_t tail_ = 0;
  uint64_t headSeen_ = 0;
  uint64_t handled_ = 0;   // sequence number of the last peer send read or refused
  uint64_t directRead_ = 0;
  std::optional<PeerSend> reading_;
  uint64_t mailRead_ = 0;    // mail messages read, ever
  uint64_t mailStart_ = 0;   // the next one's position and length, once seen (0 bytes: not yet)
  size_t mailBytes_ = 0;
};

ShmTransport::ShmLink::ShmLink(ShmSegment segment, int side, int peer, const PeerInfo& peerInfo,
                               size_t directMinBytes, const Settings& settings)
    : segment_(std::move(segment)),
      settings_(settings),
      peer_(peer),
      side_(side),
      mask_(headerOf(segment_).fifoBytes - 1),
      peerEnd_(headerOf(segment_).ends[1 - side]),
      ownEnd_(headerOf(segment_).ends[side]),
      out_(headerOf(segment_).fifos[side]),
      in_(headerOf(segment_).fifos[1 - side]),
      outData_(static_cast<uint8_t*>(segment_.data()) + kDataOffset + static_cast<size_t>(side) * (mask_ + 1)),
      inData_(static_cast<uint8_t*>(segment_.data()) + kDataOffset + static_cast<size_t>(1 - side) * (mask_ + 1)),
      outMail_(headerOf(segment_).mail[side]),
      inMail_(headerOf(segment_).mail[1 - side]),
      directMinBytes_(directMinBytes),
      postLarge_(directMinBytes > 0),
      stores_(StoreChooser::fifoRules(settings.fifoStores)),
      readPeerMemory_(directMinBytes > 0) {
  process_.identify(peerInfo.pid, peerInfo.pidNamespace);
  if (readPeerMemory_ && process_.foreign()) {
    LOOM_INFO("shm: rank %d runs in another pid namespace; its large sends come through the FIFO", peer_);
    readPeerMemory_ = false;
  }
  const char* stores = storesName(settings.fifoStores);
  if (readPeerMemory_) {
    LOOM_INFO("shm: link with rank %d: FIFO of %zu bytes each way (%s stores); sends of %zu bytes or more "
              "are read by the receiver straight from the sender's memory (%s)",
              peer_, mask_ + 1, stores, directMinBytes_,
              process_.sameProcess() ? "same process: memcpy" : "process_vm_readv");
  } else {
    LOOM_INFO("shm: link with rank %d: FIFO of %zu bytes each way (%s stores), all sends through it", peer_,
              mask_ + 1, stores);
  }
}

void ShmTransport::ShmLink::lingerForPeer() {
  if (abandoned_ || side_ != 0 || head_ == 0 || peerEnd_.attached.load(std::memory_order_acquire) != 0) return;
  auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(settings_.lingerMs);
  while (peerEnd_.attached.load(std::memory_order_acquire) == 0 && process_.alive() &&
         std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

ShmTransport::ShmLink::~ShmLink() {
  lingerForPeer();
  ownEnd_.closed.store(1, std::memory_order_seq_cst);
  // A reader in this process may still be copying from a posted buffer, which the caller
  // may free once this link is gone. The reader checks `closed` after raising `copying`,
  // so once this sees no copy, no new one starts.
  if (!posted_) return;
  if (process_.sameProcess()) {
    while (out_.copying.load(std::memory_order_seq_cst) != 0) std::this_thread::yield();
    tsanAcquire(posted_->base);
  }
}

// ---- Writing ----

Status ShmTransport::ShmLink::sendSome(const void* data, size_t bytes, size_t* done) {
  return send(data, bytes, true, done);
}

Status ShmTransport::ShmLink::sendBuffered(const void* data, size_t bytes, size_t* done) {
  return send(data, bytes, false, done);
}

Status ShmTransport::ShmLink::send(const void* data, size_t bytes, bool mayOffer, size_t* done) {
  *done = 0;
  if (posted_) return continuePosted(data, bytes, done);
  if (bytes == 0) return Status::ok();
  size_t take = bytes;
  if (declinedLeft_ > 0) {
    take = std::min(bytes, declinedLeft_);
  } else if (mayOffer && postLarge_ && bytes >= directMinBytes_) {
    post(data, bytes);
    return Status::ok();
  }
  *done = writeFifo(data, take);
  declinedLeft_ -= std::min(declinedLeft_, *done);
  return *done > 0 ? Status::ok() : stalled();
}

Status ShmTransport::ShmLink::sendWithHeader(const void* header, size_t headerBytes, const void* body,
                                             size_t bodyBytes, size_t* done) {
  if (posted_ || declinedLeft_ > 0) return sendSome(header, headerBytes, done);
  if (headerBytes + bodyBytes <= kMailBytes && writeMail(header, headerBytes, body, bodyBytes)) {
    *done = headerBytes + bodyBytes;
    return Status::ok();
  }
  *done = writeRing(header, headerBytes);
  return *done > 0 ? Status::ok() : stalled();
}

bool ShmTransport::ShmLink::sendWhole(const void* header, size_t headerBytes, const void* body, size_t bodyBytes) {
  const size_t whole = headerBytes + bodyBytes;
  // A posted send, or a declined one's rest, comes first in the stream.
  if (posted_ || declinedLeft_ > 0 || whole > wholeMessageBytes()) return false;
  if (whole <= kMailBytes && writeMail(header, headerBytes, body, bodyBytes)) return true;
  if (ringRoom(whole) < whole) return false;
  copyIntoRing(outData_, mask_, head_, static_cast<const uint8_t*>(header), headerBytes, false);
  if (bodyBytes > 0) {
    copyIntoRing(outData_, mask_, head_ + headerBytes, static_cast<const uint8_t*>(body), bodyBytes, false);
  }
  head_ += whole;
  out_.head.store(head_, std::memory_order_release);
  return true;
}

size_t ShmTransport::ShmLink::sendCopy(const void* data, size_t bytes) {
  // A posted send, or a declined one's rest, comes first in the stream.
  if (posted_ || declinedLeft_ > 0) return 0;
  return writeFifo(data, bytes);
}

size_t ShmTransport::ShmLink::writeFifo(const void* data, size_t bytes) {
  if (bytes <= kMailBytes && writeMail(data, bytes, nullptr, 0)) return bytes;
  return writeRing(data, bytes);
}

size_t ShmTransport::ShmLink::ringRoom(size_t wanted) {
  // Mail messages not read yet may take the stream past a ring's length ahead of the reader.
  auto room = [&] { return mask_ + 1 - std::min(mask_ + 1, static_cast<size_t>(head_ - tailSeen_)); };
  if (room() < wanted) tailSeen_ = out_.tail.load(std::memory_order_acquire);
  return room();
}

size_t ShmTransport::ShmLink::writeRing(const void* data, size_t bytes) {
  size_t n = std::min(bytes, ringRoom(bytes));
  if (n == 0) return 0;
  const StoreChooser::Choice stores = stores_.next(n);
  copyIntoRing(outData_, mask_, head_, static_cast<const uint8_t*>(data), n, stores.streaming);
  if (stores.timed && stores_.ended(stores, n)) {
    LOOM_TRACE("shm: link with rank %d: %s stores into the FIFO from now on (plain copies %.1f GB/s, "
               "non-temporal %.1f)",
               peer_, stores_.streaming() ? "non-temporal" : "plain", stores_.recentGbps(false),
               stores_.recentGbps(true));
  }
  head_ += n;
  out_.head.store(head_, std::memory_order_release);
  return n;
}

bool ShmTransport::ShmLink::writeMail(const void* a, size_t aBytes, const void* b, size_t bBytes) {
  if (aBytes + bBytes == 0) return true;  // a stamp of length 0 would read as no message yet
  const size_t slot = mailSent_ % kMailSlots;
  if (mailSlotEnd_[slot] > tailSeen_) {
    tailSeen_ = out_.tail.load(std::memory_order_acquire);
    if (mailSlotEnd_[slot] > tailSeen_) return false;
  }
  MailSlot& mail = outMail_[slot];
  std::memcpy(mail.bytes, a, aBytes);
  if (bBytes > 0) std::memcpy(mail.bytes + aBytes, b, bBytes);
  mail.position = head_;
  mail.stamp.store((mailSent_ + 1) << 8 | (aBytes + bBytes), std::memory_order_release);
  head_ += aBytes + bBytes;
  mailSlotEnd_[slot] = head_;
  ++mailSent_;
  return true;
}

void ShmTransport::ShmLink::post(const void* data, size_t bytes) {
  // The reader looks at these fields only after seeing the new sequence number, and it is
  // done with the previous send's, so they are free to overwrite.
  out_.address = reinterpret_cast<uint64_t>(data);
  out_.length = bytes;
  out_.offset = head_;
  posted_ = PostedSend{static_cast<const uint8_t*>(data), bytes, 0, ++postedCount_,
                       out_.directRead.load(std::memory_order_acquire)};
  tsanRelease(data);
  out_.posted.store(posted_->seq, std::memory_order_release);
}

Status ShmTransport::ShmLink::continuePosted(const void* data, size_t bytes, size_t* done) {
  PostedSend& p = *posted_;
  if (data != p.base + p.reported || bytes != p.length - p.reported) {
    return error(loomInternalError,
                 "shm link to rank %d: a send of %zu bytes at %p is in progress (%zu left); the "
                 "next send must pass what is left until it is done, not %zu bytes at %p",
                 peer_, p.length, static_cast<const void*>(p.base), p.length - p.reported, bytes, data);
  }
  // `refused` and `declined` first: the reader stores directRead before them, so the count
  // is final then.
  bool refused = out_.refused.load(std::memory_order_acquire) == p.seq;
  bool declined = out_.declined.load(std::memory_order_acquire) == p.seq;
  size_t read = static_cast<size_t>(out_.directRead.load(std::memory_order_acquire) - p.readBefore);
  *done = read - p.reported;
  p.reported = read;
  if (*done > 0 || refused || declined) tsanAcquire(p.base);
  if (refused) {
    LOOM_INFO("shm: rank %d cannot read this process's memory; sending through the FIFO from now on", peer_);
    postLarge_ = false;
    posted_.reset();
    return Status::ok();
  }
  if (declined) {
    declinedLeft_ = p.length - read;
    posted_.reset();
    return Status::ok();
  }
  if (read == p.length) posted_.reset();
  return *done > 0 ? Status::ok() : stalled();
}

// ---- Reading ----

Status ShmTransport::ShmLink::recvSome(void* data, size_t bytes, size_t* done) {
  *done = 0;
  if (bytes == 0) return Status::ok();
  LOOM_TRY(receive(data, bytes, done));
  if (*done > 0) return Status::ok();
  Status gone = stalled();
  if (gone.isOk()) return gone;
  // What the peer sent before it closed or died is delivered before the error.
  LOOM_TRY(receive(data, bytes, done));
  return *done > 0 ? Status::ok() : gone;
}

Status ShmTransport::ShmLink::receive(void* data, size_t bytes, size_t* done) {
  *done = readFifo(data, bytes);
  if (*done > 0 || (!reading_ && !takePeerSend())) return Status::ok();
  if (!readPeerMemory_) {
    answerPeerSend(in_.refused);
    return Status::ok();
  }
  return readPeerSend(data, bytes, done);
}

Link::Whole ShmTransport::ShmLink::receiveWhole(const void* header, size_t headerBytes, void* body,
                                                size_t bodyBytes) {
  const size_t whole = headerBytes + bodyBytes;
  bool inMail = false;
  const size_t n = ready(whole, &inMail);
  if (n < headerBytes) return Whole::kNotThere;
  // The header the ring holds may run past its end.
  uint8_t ringHeader[kMostWholeHeaderBytes];
  const uint8_t* got = inMail ? mailData() : ringHeader;
  if (!inMail) copyOutOfRing(inData_, mask_, tail_, ringHeader, std::min(headerBytes, sizeof ringHeader));
  if (std::memcmp(got, header, std::min(headerBytes, sizeof ringHeader)) != 0) return Whole::kOther;
  if (n < whole) return Whole::kNotThere;
  if (bodyBytes > 0 && inMail) std::memcpy(body, got + headerBytes, bodyBytes);
  if (bodyBytes > 0 && !inMail) {
    copyOutOfRing(inData_, mask_, tail_ + headerBytes, static_cast<uint8_t*>(body), bodyBytes);
  }
  advanceTail(whole);
  return Whole::kMoved;
}

void ShmTransport::ShmLink::peek(const void** data, size_t bytes, size_t* available) {
  bool inMail = false;
  const size_t n = ready(bytes, &inMail);
  if (inMail) {
    *data = mailData();
    *available = std::min(bytes, n);
    return;
  }
  size_t offset = static_cast<size_t>(tail_) & mask_;
  *data = inData_ + offset;
  *available = std::min({bytes, n, mask_ + 1 - offset, handOverBytes()});  // contiguous up to the ring's end
}

void ShmTransport::ShmLink::preferMapped() {
  bool inMail = false;
  if (ready(1, &inMail) > 0) return;  // FIFO bytes come first
  if (reading_ || takePeerSend()) answerPeerSend(in_.declined);
}

void ShmTransport::ShmLink::consume(size_t bytes) { advanceTail(bytes); }

size_t ShmTransport::ShmLink::readFifo(void* data, size_t bytes) {
  bool inMail = false;
  const size_t n = std::min(bytes, ready(bytes, &inMail));
  if (n == 0) return 0;
  if (inMail) {
    std::memcpy(data, mailData(), n);
    advanceTail(n);
    return n;
  }
  for (size_t done = 0; done < n;) {
    const size_t piece = std::min(n - done, handOverBytes());
    copyOutOfRing(inData_, mask_, tail_, static_cast<uint8_t*>(data) + done, piece);
    advanceTail(piece);
    done += piece;
  }
  return n;
}

size_t ShmTransport::ShmLink::ready(size_t bytes, bool* inMail) {
  if (mailBytes_ == 0) lookForMail();
  size_t n = readyKnown(inMail);
  if (n < bytes && !*inMail) {
    headSeen_ = in_.head.load(std::memory_order_acquire);
    if (mailBytes_ == 0) lookForMail();  // after `head`: a stamp stored before it is seen
    n = readyKnown(inMail);
  }
  return n;
}

size_t ShmTransport::ShmLink::readyKnown(bool* inMail) const {
  *inMail = mailBytes_ > 0 && tail_ >= mailStart_;
  if (*inMail) return static_cast<size_t>(mailStart_ + mailBytes_ - tail_);
  const uint64_t ringEnd = mailBytes_ > 0 ? std::min(headSeen_, mailStart_) : headSeen_;
  return ringEnd > tail_ ? static_cast<size_t>(ringEnd - tail_) : 0;
}

void ShmTransport::ShmLink::lookForMail() {
  const MailSlot& mail = inMail_[mailRead_ % kMailSlots];
  const uint64_t stamp = mail.stamp.load(std::memory_order_acquire);
  if (stamp >> 8 != ((mailRead_ + 1) & (~uint64_t{0} >> 8))) return;  // the slot's earlier message
  mailStart_ = mail.position;
  mailBytes_ = static_cast<size_t>(stamp & 0xff);
}

void ShmTransport::ShmLink::advanceTail(size_t bytes) {
  tail_ += bytes;
  if (mailBytes_ > 0 && tail_ == mailStart_ + mailBytes_) {
    mailBytes_ = 0;
    ++mailRead_;
  }
  in_.tail.store(tail_, std::memory_order_release);
}

// True when the peer posted a send that comes next in the stream.
bool ShmTransport::ShmLink::takePeerSend() {
  uint64_t seq = in_.posted.load(std::memory_order_acquire);
  // A send posted behind FIFO bytes not seen yet waits for them.
  if (seq == handled_ || in_.offset != tail_) return false;
  reading_ = PeerSend{seq, in_.address, static_cast<size_t>(in_.length), 0};
  return true;
}

Status ShmTransport::ShmLink::readPeerSend(void* data, size_t bytes, size_t* done) {
  PeerSend& s = *reading_;
  size_t got = 0;
  // Announced before looking at `closed`; the writer's destructor does the opposite.
  in_.copying.fetch_add(1, std::memory_order_seq_cst);
  if (peerEnd_.closed.load(std::memory_order_seq_cst) != 0) {
    in_.copying.fetch_sub(1, std::memory_order_release);
    return closedError();
  }
  tsanAcquire(reinterpret_cast<const void*>(s.address));
  int err = settings_.failReadsWith != 0
                ? settings_.failReadsWith
                : process_.read(data, s.address + s.read, std::min(bytes, s.length - s.read), &got);
  tsanRelease(reinterpret_cast<const void*>(s.address));
  in_.copying.fetch_sub(1, std::memory_order_release);

  if (err == EPERM || err == EACCES || err == ENOSYS) {
    LOOM_INFO("shm: cannot read rank %d's memory (process_vm_readv: %s); its large sends come "
              "through the FIFO from now on",
              peer_, std::strerror(err));
    readPeerMemory_ = false;
    answerPeerSend(in_.refused);
    return Status::ok();
  }
  if (err == ESRCH) return exitedError();
  if (err == EFAULT) {
    // The range it posted is no longer mapped: it failed (and freed the buffer) or is exiting.
    return error(loomRemoteError, "shm link with rank %d: the buffer it is sending is gone (the rank failed or exited)",
                 peer_);
  }
  if (err != 0) {
    return systemError(format("shm link with rank %d: reading %zu bytes of its memory at 0x%llx",
                              peer_, bytes, static_cast<unsigned long long>(s.address + s.read)).c_str(), err);
  }
  s.read += got;
  directRead_ += got;
  in_.directRead.store(directRead_, std::memory_order_release);
  if (s.read == s.length) {
    handled_ = s.seq;
    reading_.reset();
  }
  *done = got;
  return Status::ok();
}

void ShmTransport::ShmLink::answerPeerSend(Counter& answer) {
  handled_ = reading_->seq;
  answer.store(reading_->seq, std::memory_order_release);
  reading_.reset();
}

// ---- The peer ----

Status ShmTransport::ShmLink::stalled() {
  if (peerEnd_.closed.load(std::memory_order_acquire) != 0) return closedError();
  uint64_t now = nowNs(CLOCK_MONOTONIC_COARSE);
  if (now - lastAliveCheckNs_ < kAliveCheckNs) return Status::ok();
  lastAliveCheckNs_ = now;
  return process_.alive() ? Status::ok() : exitedError();
}

Status ShmTransport::ShmLink::closedError() const {
  // `closed` was seen with acquire, so a cause written before it is visible.
  const int cause = closedBecauseOf();
  if (cause >= 0) {
    return error(loomRemoteError, "shm link with rank %d: the peer closed its end because rank %d failed", peer_,
                 cause);
  }
  return error(loomRemoteError, "shm link with rank %d: the peer closed its end", peer_);
}

Status ShmTransport::ShmLink::exitedError() const {
  // A peer that gave up closed its end (naming why) before it exited.
  if (peerEnd_.closed.load(std::memory_order_acquire) != 0) return closedError();
  return error(loomRemoteError, "shm link with rank %d: its process (pid %d) has exited", peer_, process_.pid());
}

// ---- The transport ----

ShmTransport::ShmTransport(Bootstrap& bootstrap, const std::vector<int>& peers, Settings settings)
    : bootstrap_(bootstrap),
      rank_(bootstrap.rank()),
      served_(static_cast<size_t>(bootstrap.nranks()), false),
      settings_(std::move(settings)),
      links_(static_cast<size_t>(bootstrap.nranks())) {
  for (int peer : peers) {
    if (peer != rank_) served_[static_cast<size_t>(peer)] = true;
  }
}

ShmTransport::~ShmTransport() = default;

void ShmTransport::closeAll(int causeRank) {
  // A higher peer that will ask for this rank's segment would wait for it until its
  // deadline: tell it there will be none (a peer that is gone refuses at once).
  // A higher peer that has the offer but has not mapped the segment yet will find it gone
  // once the link below unlinks it: the same notice, sent before, tells it why.
  SegmentOffer none{};
  none.gaveUpFor = causeRank;
  for (int peer = rank_ + 1; peer < static_cast<int>(links_.size()); ++peer) {
    const auto& link = links_[static_cast<size_t>(peer)];
    if (!served_[static_cast<size_t>(peer)] || (link && link->peerAttached())) continue;
    (void)bootstrap_.send(peer, kSegmentTag, &none, sizeof(none), Deadline::afterMs(kGaveUpNoticeMs));
  }
  for (auto& link : links_) {
    if (link) link->abandon(causeRank);
    link.reset();
  }
}

Status ShmTransport::readSettings(long long fileDirectMinBytes, Settings* out) {
  long long directMinBytes = 0;
  LOOM_TRY(env::getInt("LOOM_SHM_DIRECT_MIN_BYTES", 1, 1LL << 62, &directMinBytes));
  const size_t threshold = static_cast<size_t>(directMinBytes);
  const std::string direct = env::getOrDefault("LOOM_SHM_DIRECT");
  out->directFromFile = !env::get("LOOM_SHM_DIRECT") && fileDirectMinBytes >= 0;
  if (out->directFromFile) {
    out->directThreads = threshold;
    out->directProcesses = static_cast<size_t>(fileDirectMinBytes);
  } else if (direct == "none" || direct == "threads" || direct == "all") {
    out->directThreads = direct == "none" ? 0 : threshold;
    out->directProcesses = direct == "all" ? threshold : 0;
  } else {
    return error(loomInvalidArgument, "LOOM_SHM_DIRECT=%s: expected none, threads or all", direct.c_str());
  }
  LOOM_TRY(readStoresSetting("LOOM_SHM_FIFO_STORES", &out->fifoStores));
  out->dir = env::getOrDefault("LOOM_SHM_DIR");
  // "/loom-" and 32 hex digits follow in a segment's name.
  if (out->dir.size() + 38 > kMaxName) {
    return error(loomInvalidArgument, "LOOM_SHM_DIR=%s is longer than %zu characters",
                 out->dir.c_str(), kMaxName - 38);
  }
  LOOM_TRY(env::getInt("LOOM_TIMEOUT_MS", 1, 1LL << 40, &out->lingerMs));
  return Status::ok();
}

Status ShmTransport::directReadMinBytes(bool threadsOnly, long long fileDirectMinBytes, size_t* out,
                                        bool* fromFile) {
  Settings settings;
  LOOM_TRY(readSettings(fileDirectMinBytes, &settings));
  *out = threadsOnly ? settings.directThreads : settings.directProcesses;
  if (fromFile != nullptr) *fromFile = settings.directFromFile;
  return Status::ok();
}

size_t ShmTransport::directMinBytes(int peer) const {
  const PeerInfo& info = bootstrap_.peers()[static_cast<size_t>(peer)];
  const bool thread = info.pid == ::getpid() && info.pidNamespace == PeerProcess::ownPidNamespace();
  return thread ? settings_.directThreads : settings_.directProcesses;
}

Status ShmTransport::create(Bootstrap& bootstrap, std::vector<int> peers, size_t fifoBytes,
                            long long fileDirectMinBytes, std::unique_ptr<ShmTransport>* out) {
  if (!validFifoBytes(fifoBytes)) {
    return error(loomInternalError, "shm transport: a FIFO of %zu bytes is not a power of two >= 4096", fifoBytes);
  }
  Settings settings;
  LOOM_TRY(readSettings(fileDirectMinBytes, &settings));
  settings.fifoBytes = fifoBytes;
  for (int peer : peers) {
    if (peer < 0 || peer >= bootstrap.nranks()) {
      return error(loomInternalError, "shm transport: peer %d is not a rank of %d", peer, bootstrap.nranks());
    }
  }
  const size_t directProcesses = settings.directProcesses;
  out->reset(new ShmTransport(bootstrap, peers, std::move(settings)));
  (*out)->useDirectReadsFrom(directProcesses);
  return Status::ok();
}

bool ShmTransport::directReadsSet(long long fileDirectMinBytes) {
  return env::get("LOOM_SHM_DIRECT") || fileDirectMinBytes >= 0;
}

void ShmTransport::useDirectReadsFrom(size_t minBytes) {
  settings_.directProcesses = minBytes;
  // Under Yama's ptrace_scope=1 peers (not our ancestors) may read this process's memory
  // only if it says so. Fails harmlessly where Yama is absent.
  if (minBytes > 0) ::prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
}

Status ShmTransport::checkServed(int peer) const {
  if (peer < 0 || peer >= bootstrap_.nranks() || !served_[static_cast<size_t>(peer)]) {
    return error(loomInternalError, "shm transport of rank %d: asked for a link to rank %d, which it does not serve",
                 rank_, peer);
  }
  return Status::ok();
}

Status ShmTransport::connectOut(const std::vector<int>& peers, const Deadline& /*deadline*/) {
  for (int peer : peers) {
    LOOM_TRY(checkServed(peer));
    if (peer > rank_ && !links_[static_cast<size_t>(peer)]) LOOM_TRY(noteGone(peer, offerSegment(peer)));
  }
  return Status::ok();
}

Status ShmTransport::acceptIn(const std::vector<int>& peers, const Deadline& deadline) {
  LOOM_TRY(connectOut(peers, deadline));
  for (int peer : peers) {
    if (peer < rank_ && !links_[static_cast<size_t>(peer)]) LOOM_TRY(noteGone(peer, acceptSegment(peer, deadline)));
  }
  return Status::ok();
}

Status ShmTransport::noteGone(int peer, Status s) {
  if (s.code() == loomRemoteError && connectFailureCause_ < 0) connectFailureCause_ = peer;
  return s;
}

Link* ShmTransport::link(int peer, int /*index*/) {
  if (peer < 0 || peer >= static_cast<int>(links_.size())) return nullptr;
  return links_[static_cast<size_t>(peer)].get();
}

Status ShmTransport::offerSegment(int peer) {
  std::string purpose = format("shm FIFOs of ranks %d and %d", rank_, peer);
  ShmSegment segment;
  LOOM_TRY(ShmSegment::create(settings_.dir, segmentBytes(settings_.fifoBytes), purpose.c_str(), &segment));
  initSegment(segment, settings_.fifoBytes);
  SegmentOffer offer{};
  offer.fifoBytes = settings_.fifoBytes;
  std::strncpy(offer.name, segment.name().c_str(), kMaxName);
  LOOM_TRY(bootstrap_.send(peer, kSegmentTag, &offer, sizeof(offer))
               .withContext(format("shm transport: sending rank %d its segment", peer)));
  links_[static_cast<size_t>(peer)] = std::make_unique<ShmLink>(std::move(segment), 0, peer, bootstrap_.peers()[static_cast<size_t>(peer)],
                                                           directMinBytes(peer), settings_);
  return Status::ok();
}

Status ShmTransport::receiveOffer(int peer, const Deadline& deadline, SegmentOffer* offer) {
  // A peer that died before it offered would otherwise be waited for until the deadline.
  const PeerInfo& info = bootstrap_.peers()[static_cast<size_t>(peer)];
  PeerProcess process;
  process.identify(info.pid, info.pidNamespace);
  for (;;) {
    Status s = bootstrap_.recv(peer, kSegmentTag, offer, sizeof(*offer),
                               deadline.earlier(Deadline::afterMs(kOfferSliceMs)));
    if (s.code() != loomTimeout) return s;
    // The last slice looks too: a caller may wait in calls shorter than a slice.
    if (!process.alive()) {
      return error(loomRemoteError, "rank %d (pid %d) exited before it offered its segment", peer, info.pid);
    }
    if (deadline.expired()) return error(loomTimeout, "rank %d offered no segment before the deadline", peer);
  }
}

Status ShmTransport::acceptSegment(int peer, const Deadline& deadline) {
  SegmentOffer offer;
  LOOM_TRY(receiveOffer(peer, deadline, &offer).withContext(format("shm transport: waiting for rank %d's segment", peer)));
  offer.name[kMaxName] = '\0';
  if (offer.name[0] == '\0') {
    if (offer.gaveUpFor < 0 || offer.gaveUpFor == peer) {
      return error(loomRemoteError, "shm transport: rank %d gave up before it offered its segment", peer);
    }
    connectFailureCause_ = offer.gaveUpFor;
    return error(loomRemoteError, "shm transport: rank %d gave up because rank %d failed, before it offered its segment",
                 peer, offer.gaveUpFor);
  }
  if (!validFifoBytes(offer.fifoBytes)) {
    return error(loomInternalError, "shm transport: rank %d offered FIFOs of %llu bytes", peer,
                 static_cast<unsigned long long>(offer.fifoBytes));
  }
  size_t fifoBytes = static_cast<size_t>(offer.fifoBytes);
  ShmSegment segment;
  Status opened = ShmSegment::open(offer.name, segmentBytes(fifoBytes), &segment);
  if (!opened.isOk() && ::access(offer.name, F_OK) != 0 && errno == ENOENT) {
    // The creator removes its segment when it fails or exits before this rank maps it; one
    // that gave up sent why first.
    SegmentOffer notice{};
    if (bootstrap_.recv(peer, kSegmentTag, &notice, sizeof(notice), Deadline::afterMs(kGoneNoticeWaitMs)).isOk() &&
        notice.name[0] == '\0' && notice.gaveUpFor >= 0 && notice.gaveUpFor != peer) {
      connectFailureCause_ = notice.gaveUpFor;
      return error(loomRemoteError, "shm transport: rank %d gave up because rank %d failed, before this rank mapped its segment",
                   peer, notice.gaveUpFor);
    }
    return error(loomRemoteError, "shm transport: rank %d's segment %s is gone: rank %d failed or exited", peer,
                 offer.name, peer);
  }
  LOOM_TRY(opened.withContext(format("shm transport: mapping rank %d's segment", peer)));
  LOOM_TRY(attachSegment(segment, fifoBytes));
  segment.unlink();  // both ranks have it mapped now
  links_[static_cast<size_t>(peer)] = std::make_unique<ShmLink>(std::move(segment), 1, peer, bootstrap_.peers()[static_cast<size_t>(peer)],
                                                           directMinBytes(peer), settings_);
  return Status::ok();
}

}  // namespace loom::transport
