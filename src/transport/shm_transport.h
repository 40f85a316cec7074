// Shared-memory links between ranks of one host. For each pair (a < b) rank a creates one
// segment holding a FIFO each way and tells b its name over the bootstrap; b maps it and
// unlinks it at once, so a crash leaves nothing in LOOM_SHM_DIR.
//
// Messages are copied through the FIFO (a lock-free single-producer single-consumer ring).
// Where LOOM_SHM_DIRECT allows it for the pair (by default: threads of one process), a send
// of LOOM_SHM_DIRECT_MIN_BYTES or more is not copied there: the sender posts {address,
// length} and the receiver copies straight out of the sender's buffer (memcpy between
// threads of one process, process_vm_readv between processes), one copy instead of two.
// Where the kernel refuses that (containers, seccomp, direct reads off on the receiver) the
// receiver asks for the bytes through the FIFO instead, and the link keeps doing so from
// then on.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "bootstrap/bootstrap.h"
#include "transport/store_chooser.h"
#include "transport/transport.h"

namespace loom::transport {

class ShmTransport : public Transport {
 public:
  // The bootstrap tag of the messages this transport sends (a segment's name, from the
  // lower rank to the higher). No other user of the bootstrap may use it.
  static constexpr uint32_t kSegmentTag = 0x53484d01;  // "SHM" 1

  // Reads the other LOOM_SHM_* settings (a bad one is loomInvalidArgument) and makes no link
  // yet. `peers`: the ranks this transport serves, on this host (the caller decides; this
  // rank itself is ignored). `fifoBytes`: each FIFO of the segments this rank creates
  // (LOOM_SHM_FIFO_BYTES, as the communicator resolves it; validFifoBytes).
  // `fileDirectMinBytes`: a tuning file's shm.direct_min_bytes, -1 where there is none (see
  // directReadMinBytes). `bootstrap` must outlive the transport.
  static Status create(Bootstrap& bootstrap, std::vector<int> peers, size_t fifoBytes, long long fileDirectMinBytes,
                       std::unique_ptr<ShmTransport>* out);
  // A power of two, 4096 or more.
  static bool validFifoBytes(size_t bytes) { return bytes >= 4096 && (bytes & (bytes - 1)) == 0; }
  ~ShmTransport() override;
  // The size from which a receive reads the sender's buffer directly (0: never), between
  // ranks that are all threads of this process (`threadsOnly`) or not: as LOOM_SHM_DIRECT and
  // LOOM_SHM_DIRECT_MIN_BYTES set it, or where LOOM_SHM_DIRECT is unset and
  // `fileDirectMinBytes` >= 0, between processes from that size (0: never) and between
  // threads from LOOM_SHM_DIRECT_MIN_BYTES. For the tuner's cost model and the INFO line;
  // *fromFile (when not null): whether the file's value decided.
  static Status directReadMinBytes(bool threadsOnly, long long fileDirectMinBytes, size_t* out,
                                   bool* fromFile = nullptr);
  // Whether LOOM_SHM_DIRECT or a tuning file (`fileDirectMinBytes` >= 0) decides direct reads
  // between processes; where neither does, the machine calibration may (useDirectReadsFrom).
  static bool directReadsSet(long long fileDirectMinBytes);
  // Direct reads between processes from `minBytes` (0: never), in the links made from now on:
  // what rank 0's machine calibration measured, where directReadsSet is false.
  void useDirectReadsFrom(size_t minBytes);

  const char* name() const override { return "shm"; }
  // Creates the segments of pairs where this rank is the lower one and sends their names;
  // never waits for a peer. Peers that already have a link are skipped.
  Status connectOut(const std::vector<int>& peers, const Deadline& deadline) override;
  // Maps the segments of the lower peers (waiting for their names on the bootstrap, which
  // ends at the bootstrap's timeout or cancel), after doing connectOut's part if needed.
  Status acceptIn(const std::vector<int>& peers, const Deadline& deadline) override;
  // One link per peer; `index` is ignored. Links never block, have no waitFd (-1) and are
  // driven by one thread at a time.
  int connectFailureCause() const override { return connectFailureCause_; }
  Link* link(int peer, int index) override;
  // Destroys the links: each records the cause, marks its end closed and waits out a copy
  // from this process.
  void closeAll(int causeRank) override;

  // Tests only: from now on every read of a peer's memory by this transport's links fails
  // with `err` (0: back to normal), as process_vm_readv does in a locked-down container.
  void failCrossMemoryReadsForTesting(int err) { settings_.failReadsWith = err; }

 private:
  class ShmLink;
  struct SegmentOffer;  // what the lower rank of a pair sends the higher one
  // LOOM_SHM_* as read at create; links keep a reference.
  struct Settings {
    std::string dir;        // LOOM_SHM_DIR
    size_t fifoBytes = 0;   // of the segments this rank creates (create's)
    // From which size a peer's sends are read straight from its memory (0: never), where
    // it is a thread of this process and where it is not (directReadMinBytes).
    size_t directThreads = 0;
    size_t directProcesses = 0;
    bool directFromFile = false;  // a tuning file's shm.direct_min_bytes set them
    Stores fifoStores;  // LOOM_SHM_FIFO_STORES
    int failReadsWith = 0;  // failCrossMemoryReadsForTesting
    long long lingerMs;     // LOOM_TIMEOUT_MS: how long a closing creator waits for its peer
  };

  ShmTransport(Bootstrap& bootstrap, const std::vector<int>& peers, Settings settings);
  static Status readSettings(long long fileDirectMinBytes, Settings* out);
  Status checkServed(int peer) const;
  // From which size this rank and `peer` read each other's sends directly (0: never).
  size_t directMinBytes(int peer) const;
  // The lower rank's half of a pair: segment, name to the peer, link.
  Status offerSegment(int peer);
  // The higher rank's half: the name from the peer, mapping, unlink, link.
  Status acceptSegment(int peer, const Deadline& deadline);
  // The peer's offer, waited for in slices between which its process is checked.
  Status receiveOffer(int peer, const Deadline& deadline, SegmentOffer* offer);
  // s, after recording `peer` as connectFailureCause() when s says the peer is gone and no
  // failure was recorded before (the first one found is the one to name).
  Status noteGone(int peer, Status s);

  Bootstrap& bootstrap_;
  int rank_;
  std::vector<bool> served_;
  Settings settings_;
  std::vector<std::unique_ptr<ShmLink>> links_;
  int connectFailureCause_ = -1;  // the first failure an offer or accept found: the peer gone, or
                                  // the rank it gave up for
};

}  // namespace loom::transport
