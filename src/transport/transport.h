// The interface every transport implements: links that move bytes between this rank and
// a peer without blocking. Algorithms and executors see only this; a transport never
// knows which collective it serves.
#pragma once

#include <poll.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "base/socket.h"
#include "base/status.h"

namespace loom::transport {

// A connected, bidirectional byte stream to one peer, driven without blocking. Bytes
// arrive in the order they were sent.
class Link {
 public:
  virtual ~Link() = default;
  // Moves what it can now; *done gets the byte count (0: try again later). A peer that
  // went away is loomRemoteError.
  virtual Status sendSome(const void* data, size_t bytes, size_t* done) = 0;
  virtual Status recvSome(void* data, size_t bytes, size_t* done) = 0;
  // A step's call header, then the first `bodyBytes` of its payload: one stream. A link
  // that moves both in one go does (a socket: one system call where a small message took
  // two); the others move the header only. *done counts the bytes of both.
  virtual Status sendWithHeader(const void* header, size_t headerBytes, const void* body, size_t bodyBytes,
                                size_t* done) {
    (void)body;
    (void)bodyBytes;
    return sendSome(header, headerBytes, done);
  }
  virtual Status recvWithHeader(void* header, size_t headerBytes, void* body, size_t bodyBytes, size_t* done) {
    (void)body;
    (void)bodyBytes;
    return recvSome(header, headerBytes, done);
  }
  // A small message moved whole or not at all, for callers that take what moves at once and
  // leave the rest to the executor (core/quick_messages.h): up to wholeMessageBytes() bytes,
  // header included (0: the link moves none whole). sendWhole puts header and body into the
  // link now as one message, or nothing (false: no room now, a send in progress, or a link
  // that cannot). receiveWhole takes the next message once it is there whole behind `header`,
  // its body into `body`; kOther: the next message has another header, and it stays in the
  // link. Either end may move a message the other way: what a sendWithHeader sent is received
  // whole, and what sendWhole sent is received by recvSome. Headers of at most
  // kMostWholeHeaderBytes.
  enum class Whole { kMoved, kNotThere, kOther };
  static constexpr size_t kMostWholeHeaderBytes = 64;
  virtual size_t wholeMessageBytes() const { return 0; }
  virtual bool sendWhole(const void* header, size_t headerBytes, const void* body, size_t bodyBytes) {
    (void)header;
    (void)headerBytes;
    (void)body;
    (void)bodyBytes;
    return false;
  }
  virtual Whole receiveWhole(const void* header, size_t headerBytes, void* body, size_t bodyBytes) {
    (void)header;
    (void)headerBytes;
    (void)body;
    (void)bodyBytes;
    return Whole::kNotThere;
  }
  // sendSome for bytes the peer reads out of the link's own buffer whatever it is offered (it
  // reduces them as they arrive, or takes them through the FIFO: Step::viaFifo). A link that
  // could offer a large send for the peer to read straight from this process (shared memory)
  // copies it in at once instead: the offer would wait for the peer to decline it.
  virtual Status sendBuffered(const void* data, size_t bytes, size_t* done) { return sendSome(data, bytes, done); }
  // Copying send, for links whose sendSome copies the bytes at once (shared memory's FIFO):
  // copies up to `bytes` of `data` into the link now, keeping no pointer to it, and returns
  // how many (0: no room now). Lets the executor forward bytes it has just reduced while
  // they are still in its cache; the rest goes later with sendSome, from the step's own
  // range. Only where copiesSends(), and never while a sendSome is in progress (a posted
  // send not yet reported done).
  virtual bool copiesSends() const { return false; }
  virtual size_t sendCopy(const void* data, size_t bytes) {
    (void)data;
    (void)bytes;
    return 0;
  }
  // A descriptor that polls ready (POLLOUT / POLLIN) when the link can move bytes again,
  // or -1 for a link that has none (shared memory): the caller then retries, yielding the
  // CPU between passes.
  //
  // Contract that lets a link move a large buffer without copying it (shared memory reads
  // it straight from this process): after sendSome returns with *done < bytes, the
  // caller's next sendSome on this link passes the same remaining range, and the range
  // stays untouched until the link reports it done.
  virtual int waitFd() const = 0;
  // Right before the caller sleeps in poll on this link: fills *fd with waitFd() and the
  // events that mean the link can move bytes again (for a send or a receive); false when
  // bytes may be ready already, so the caller looks again instead of sleeping. A link whose
  // descriptor must be armed first (UCX's worker) arms it here.
  virtual bool prepareWait(bool send, pollfd* fd) {
    *fd = {waitFd(), static_cast<short>(send ? POLLOUT : POLLIN), 0};
    return true;
  }

  // Zero-copy receive, for links whose bytes arrive in memory this process maps (shared
  // memory), so a reduction can read them in place: *data points at the next *available
  // received bytes (at most `bytes`; 0 when none are ready this way, and then recvSome, which
  // also reports a dead peer, is the way to wait). They stay valid until consume(n) takes
  // the first n of them.
  virtual void peek(const void** data, size_t bytes, size_t* available) {
    *data = nullptr;
    *available = 0;
    (void)bytes;
  }
  virtual void consume(size_t bytes) { (void)bytes; }
  // The next bytes received will be reduced. A link that would deliver the peer's next large
  // send by copying it straight out of the peer's memory into the recvSome buffer (shared
  // memory's cross-memory attach, one copy for a plain receive) has the peer stream that
  // send where peek shows it instead: a reduction reads it there in place, where a direct
  // copy would need a staging buffer and a second pass.
  virtual void preferMapped() {}
  // Sends offered so far for the peer to read straight from this process (shared memory's
  // cross-memory attach); for tests.
  virtual uint64_t offeredSends() const { return 0; }
  // Once the link reported that the peer closed its end: the rank whose failure made the
  // peer give up, when the peer said (see Transport::closeAll); -1 otherwise.
  virtual int closedBecauseOf() const { return -1; }
};

// A region of memory registered with a transport (Transport::registerMemory); destroying it
// ends the registration.
class MemoryRegistration {
 public:
  virtual ~MemoryRegistration() = default;
  // Messages that moved from or into this region through the registration so far.
  virtual uint64_t uses() const = 0;
};

// Makes links to the other ranks of one communicator, on demand. Connecting is split in
// two phases so that one thread can connect several communicators (loomCommInitAll
// driven from a single thread) without waiting on itself: every caller first runs
// connectOut for all its pairs, then acceptIn.
class Transport {
 public:
  virtual ~Transport() = default;
  virtual const char* name() const = 0;
  // Starts links to `peers` that do not exist yet, without waiting for the peers.
  virtual Status connectOut(const std::vector<int>& peers, const Deadline& deadline) = 0;
  // Completes them; waits for peers that have not connected yet.
  virtual Status acceptIn(const std::vector<int>& peers, const Deadline& deadline) = 0;
  // After connectOut or acceptIn returned loomRemoteError: the rank whose failure it found
  // (the peer that went away, or the rank that peer said it gave up for); -1 if unknown.
  virtual int connectFailureCause() const { return -1; }
  // Independent links per peer (several TCP connections); a plan's channel c uses link
  // c % linksPerPeer(). Bytes on different links are not ordered with each other.
  virtual int linksPerPeer() const { return 1; }
  // Link `index` (< linksPerPeer()) to `peer`, after acceptIn covered it; nullptr before.
  virtual Link* link(int peer, int index) = 0;
  // After a failure: closes every link, so that peers stop (and no longer start) reading
  // this process's buffers, which the caller may free once the failed call returns. Later
  // calls find no links; the communicator is unusable by then anyway. `causeRank`: the rank
  // whose failure made this one give up (-1: none known), told to peers where the transport
  // can (shared memory), so that their errors name the first failure, not this rank.
  virtual void closeAll(int causeRank) { (void)causeRank; }
  // Some transports hold bytes after their link reported them sent (UCX's TCP keeps what a
  // full socket did not take until a later progress call), and a peer waits for them even
  // when this rank no longer drives that link. The executor calls this in passes that moved
  // nothing and once at the end of a run: it moves such bytes on without waiting and says
  // whether none are left. A failure is not reported here: the link's next call reports it.
  virtual bool flushSome() { return true; }
  // The executor drives the links from beginRun to endRun (a device communicator's proxy for
  // as long as it lives; runs may overlap, each counts). Outside a run a transport whose
  // peers need it to make progress (UCX: bytes it still holds, and the protocol messages
  // that complete a peer's sends and flushes) makes it on its own, so that no peer waits for
  // this rank's next call on this communicator, which may itself wait for that peer.
  virtual void beginRun() {}
  virtual void endRun() {}
  // Memory the caller will pass to links again and again (loomCommRegister): a transport
  // whose wire needs memory registered (UCX: RDMA adapters read and write only registered
  // pages) registers it once here and lets its links use that for any range inside it.
  // *out stays null where there is nothing to register. The caller destroys *out before the
  // transport, and never while a link is moving bytes (the executor's lock).
  virtual Status registerMemory(void* base, size_t bytes, std::unique_ptr<MemoryRegistration>* out) {
    (void)base;
    (void)bytes;
    out->reset();
    return Status::ok();
  }
};

}  // namespace loom::transport
