// A communicator: one rank's membership in a group of ranks, with the bootstrap channel,
// the transport, and the error state every call checks first.
#pragma once

#include <atomic>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "algorithms/select.h"
#include "base/socket.h"
#include "base/spin_lock.h"
#include "base/status.h"
#include "bootstrap/bootstrap.h"
#include "bootstrap/unique_id.h"
#include "core/call_log.h"
#include "core/failure_notices.h"
#include "core/mapped_allreduce.h"
#include "core/premul_ops.h"
#include "core/remote_announcements.h"
#include "loom/loom.h"
#include "transport/shm_board.h"
#include "transport/store_chooser.h"
#include "transport/transport.h"

namespace loom {

namespace transport {
class ShmTransport;
}

// loomConfig_t after validation, with environment defaults filled in. The data-path
// settings are rank 0's once the communicator exists (core/shared_settings.h).
struct CommConfig {
  int device = -1;
  long long timeoutMs = 0;
  long long initTimeoutMs = 0;
  std::string name;
  bool shm = true;     // LOOM_TRANSPORTS lists shm
  bool socket = true;  // LOOM_TRANSPORTS lists socket
  bool ucx = false;    // LOOM_TRANSPORTS lists ucx (in place of socket)
  // LOOM_TRANSPORTS lists auto (with socket set): between hosts, ucx where every rank's UCX
  // reports an RDMA device, else socket.
  bool networkAuto = false;
  AlgorithmSetting algorithms;  // LOOM_ALGO
  ProtocolSetting protocols;    // LOOM_PROTO
  std::string tuningFile;       // LOOM_TUNING_FILE
  bool machineCalibration = true;  // LOOM_MACHINE_CALIBRATION
  int channels = 0;             // LOOM_CHANNELS (0: by size)
  bool topologyRing = true;     // LOOM_RING_ORDER=topology
  size_t sliceBytes = 0;        // LOOM_CHUNK_SIZE, else LOOM_TUNING_FILE's chunk.bytes
  std::string sliceSource;      // which of those, or "built in" (this rank's, before rank 0's is taken)
  long long streamingMinBytes = -1;  // LOOM_STREAMING_MIN_BYTES (0: never; -1: unset)
  int socketLinks = 0;          // LOOM_SOCKET_NSOCKS
  int ucxLinks = 0;             // LOOM_UCX_LINKS
  int socketSendBuffer = 0;     // LOOM_SOCKET_SNDBUF, else socket.sndbuf (0: the kernel's autotuning)
  size_t shmFifoBytes = 0;      // LOOM_SHM_FIFO_BYTES, else shm.fifo_bytes, of the segments this rank creates
  long long shmDirectFromFile = -1;  // LOOM_TUNING_FILE's shm.direct_min_bytes (-1: none; ShmTransport)
  transport::Stores reductionStores = transport::Stores::kAuto;  // LOOM_REDUCTION_STORES
  long long mappedMinBytes = -1;  // LOOM_MAPPED_MIN_BYTES (0: never; -1: unset, kMappedMinBytes*)
  std::string linkSizeSources;  // the two above and where each came from, for the INFO line
  bool check = false;           // LOOM_CHECK
  bool deviceEmulation = false; // LOOM_DEVICE_EMULATION
  size_t deviceFifoBytes = 0;   // LOOM_DEVICE_FIFO_BYTES
  size_t deviceSliceBytes = 0;  // LOOM_DEVICE_SLICE_BYTES
  int deviceChannels = 0;       // connections per peer of a device communicator (LOOM_CHANNELS)
};

// Channels a device communicator connects per peer unless LOOM_CHANNELS says otherwise (fewer
// where its share of the device's resident blocks holds fewer: device_comm.cc). On an H100, 2
// ranks' allreduce went from 145 to 254 GB/s at 512 MiB between 8 and 32 (docs/RESULTS.md).
// The emulation runs a CPU thread per worker, where more channels only add threads.
constexpr int kDefaultDeviceChannels = 32;
constexpr int kEmulatedDeviceChannels = 8;

// Validates a user config (NULL allowed: all defaults) and fills unset fields from the
// environment; `inherit`, when given, supplies the defaults instead (loomCommSplit).
Status resolveConfig(const loomConfig_t* user, const CommConfig* inherit, CommConfig* out);
// The config of the declared defaults alone, whatever the environment says (so no tuning
// file): a communicator whose measurements are kept for the machine (link_calibration.h).
Status builtInConfig(CommConfig* out);

// The slice and the channels of `config` in the tuner's profile of a communicator (a device
// one where `device`); hostLinks: the host transport's links per peer, the channels a host
// communicator has unless LOOM_CHANNELS fixes them. loom-topo's predictions take the same.
void applyDataPath(const CommConfig& config, bool device, int hostLinks, CommProfile* profile);

class DeviceComm;

class Communicator {
 public:
  // Joins the communicator rooted at id.root as `rank` of `nranks` (collective).
  static Status create(const UniqueId& id, int rank, int nranks, const CommConfig& config,
                       std::unique_ptr<Communicator>* out);
  // Collective over this communicator; *out stays null for LOOM_SPLIT_NOCOLOR.
  Status split(int color, int key, const CommConfig& config, std::unique_ptr<Communicator>* out);
  // Collective over the ranks not in `excluded` (sorted, unique, not this rank), which are
  // never contacted; works in the error state (loomCommShrink).
  Status shrink(const std::vector<int>& excluded, const CommConfig& config, std::unique_ptr<Communicator>* out);
  // LOOM_SHRINK_ABORT (`by` names it): fails the communicator and the calls in progress on it,
  // waits until they have ended, and leaves the bootstrap usable for a shrink. Not from inside
  // a call. Whether its failure was the first.
  bool endCallsInProgress(const char* by);
  // loomCommRevoke: ends the calls in progress as above and leaves the communicator revoked:
  // collectives are refused, split, shrink and destroy remain, and its async error is the
  // failure it had before (loomSuccess if none).
  void revoke();
  bool revoked() const;
  ~Communicator();

  int rank() const { return rank_; }
  int nranks() const { return nranks_; }
  int device() const { return config_.device; }
  int localRank() const { return localRank_; }
  int localRanks() const { return localRanks_; }
  int hosts() const { return hosts_; }
  // More ranks on this host than it has cores: waiting loops give up the core sooner.
  bool oversubscribed() const { return oversubscribed_; }
  uint64_t commId() const { return bootstrap_->commId(); }
  const CommConfig& config() const { return config_; }
  Bootstrap& bootstrap() { return *bootstrap_; }
  // Why this rank gave up, told to peers; why they did (executor's failure paths).
  FailureNotices& failureNotices() { return failureNotices_; }
  // Which call this rank waits in, told to peers no board reaches; what they told (executor).
  RemoteAnnouncements& remoteAnnouncements() { return remoteAnnouncements_; }
  transport::Transport& transport() { return *transport_; }
  // The one-shot board when every rank is on this host and shm is allowed; else nullptr.
  transport::ShmBoard* board() { return board_.get(); }
  // What the tuner knows of this communicator; the same on every rank (rank 0's).
  const CommProfile& profile() const { return profile_; }
  ChoiceCache& choices() const { return choices_; }
  // The order of ranks on rings and trees; nullptr when it is rank order.
  const RingOrder* ringOrder() const { return ringOrder_.get(); }
  // The CPUs of the NUMA domain nearest this communicator's GPU (empty: unknown).
  const std::vector<int>& deviceCpus() const { return deviceCpus_; }
  int cancelFd() const { return cancel_.fd(); }

  // OK while usable; otherwise the error that ended it (abort, dead peer, timeout).
  Status usable() const;
  // Puts the communicator in its error state; the first failure sticks. Whether it was first.
  bool fail(const Status& status);
  loomResult_t asyncError() const;
  // Unblocks every wait of this communicator; later calls fail.
  void abort();
  // What a wait that saw cancelFd fire reports: the failure recorded before it fired (an
  // abort, or loomCommShrink ending the calls in progress).
  Status cancelReason() const;
  // Whether the cancel signal has fired (and not been cleared since).
  bool cancelled() const { return cancel_.fired(); }

  // The detailed message loomGetLastError(comm) returns.
  void setLastError(const std::string& message);
  const char* lastError();

  // Calls in progress and stream work that use this communicator (see CommUse);
  // destroy and abort wait until none is left.
  void acquire();
  void release();
  void waitUntilUnused();

  // Held while the executor runs a plan of this communicator: its links carry one plan's
  // bytes at a time.
  YieldingLock& executionLock() { return execution_; }
  // Where received bytes wait to be reduced, per link; kept between calls (under
  // executionLock) so that steady-state calls allocate nothing.
  std::vector<char>& stagingFor(const transport::Link* link) { return staging_[link]; }
  // The last calls made on this communicator, printed at INFO when one fails; it numbers
  // the collectives in call order (the same on every rank): see ShmBoard::announce.
  CallLog& callLog() { return callLog_; }
  // Ops from loomRedOpCreatePreMulSum.
  PreMulOps& preMulOps() { return preMulOps_; }
  // Bytes the executor sent on straight from its cache as it reduced them (executor.cc,
  // Run::forwardPiece), ever; read by tests (under executionLock, or after the calls).
  uint64_t forwardedBytes() const { return forwardedBytes_; }
  void addForwardedBytes(size_t bytes) { forwardedBytes_ += bytes; }
  // How calls on the streaming protocol store what they reduce into the caller's buffer
  // (LOOM_REDUCTION_STORES; under executionLock).
  transport::StoreChooser& reductionStores() { return reductionStores_; }
  // The peers' buffers the mapped allreduce reached, kept between calls (under executionLock).
  MappedPeers& mappedPeers() { return mappedPeers_; }
  // True the first time a call kind runs with an algorithm (its choice is logged at INFO).
  bool firstUseOf(CallInfo::Kind kind, Algorithm algorithm);
  // loomCommRegister / loomCommDeregister: the transport registers the region once where its
  // wire needs that (UCX); *handle names the registration.
  Status addRegistration(void* base, size_t bytes, void** handle);
  Status removeRegistration(void* handle);
  // Messages that moved through a live registration (0 where the transports need none).
  uint64_t registrationUses(const void* handle);
  // Where calls on device buffers go (device() >= 0 only).
  DeviceComm& deviceComm() { return *deviceComm_; }

 private:
  Communicator(std::unique_ptr<Bootstrap> bootstrap, CancelSignal cancel, const CommConfig& config);
  // The common end of create and split: transport, host grouping, logs.
  Status finishInit();
  // The common end of split and shrink: a communicator of `members` (ranks of this one, in
  // their new order) whose listeners are at addresses[i] (wire form), this rank's `listener`.
  Status formChild(const std::vector<int>& members, const std::vector<const uint8_t*>& addresses,
                   Acceptor listener, uint64_t newCommId, const CommConfig& config, const std::string& what,
                   std::unique_ptr<Communicator>* out);
  // LOOM_TRANSPORTS's auto (collective across hosts): UCX between hosts where every rank's
  // UCX reports an RDMA device, else sockets.
  Status chooseNetwork();
  void findDeviceCpus();
  // Builds the tuner's profile (tuner_constants.h on rank 0, data-path settings) and makes
  // every rank use rank 0's (collective).
  // `shm`: the shared-memory links (null where no peer is on this host), told where the machine
  // calibration decides direct reads.
  Status agreeOnProfile(transport::ShmTransport* shm);
  // Threads the machine calibration copies with: the ranks on rank 0's host, at most its
  // CPUs; 0 where there is to be none (LOOM_MACHINE_CALIBRATION=0, a sanitized build).
  int calibrationThreads() const;

  std::unique_ptr<Bootstrap> bootstrap_;
  FailureNotices failureNotices_;
  RemoteAnnouncements remoteAnnouncements_;
  std::unique_ptr<transport::Transport> transport_;
  std::unique_ptr<transport::ShmBoard> board_;
  std::unique_ptr<RingOrder> ringOrder_;
  CommProfile profile_;
  std::string directReads_;  // how shared-memory receives read large sends, for the INFO line
  mutable ChoiceCache choices_;
  std::vector<int> deviceCpus_;
  CancelSignal cancel_;
  CallLog callLog_;
  PreMulOps preMulOps_;
  uint64_t forwardedBytes_ = 0;
  CommConfig config_;
  transport::StoreChooser reductionStores_;
  MappedPeers mappedPeers_;
  int rank_;
  int nranks_;
  int localRank_ = 0;
  int localRanks_ = 1;
  bool oversubscribed_ = false;
  int hosts_ = 1;
  int splits_ = 0;

  mutable std::mutex mutex_;
  Status failure_;
  std::atomic<bool> failed_{false};  // failure_ is set, or revoked_
  bool revoked_ = false;
  Status beforeRevoke_;  // what failure_ was when revoke() came
  std::string lastError_;
  std::string lastErrorCopy_;  // what lastError() handed out, stable until the next call
  // Calls in progress, counted without the mutex (every call counts); a destroy waiting
  // for them to end says so in waiters_, and only then does the last one take the mutex.
  std::atomic<int> uses_{0};
  std::atomic<int> waiters_{0};
  std::condition_variable unused_;

  YieldingLock execution_;
  std::map<const transport::Link*, std::vector<char>> staging_;
  std::atomic<uint64_t> usedChoices_{0};
  // loomCommRegister's regions by handle; changed under execution_, so never while a plan
  // moves bytes through one. Before transport_ in destruction (declared after it).
  struct Registration {
    void* base;
    size_t bytes;
    std::unique_ptr<transport::MemoryRegistration> byTransport;  // null: nothing to register
  };
  std::map<const void*, std::unique_ptr<Registration>> registrations_;
  // Last: its threads (watchdog, proxy) use everything above, so it stops first.
  std::unique_ptr<DeviceComm> deviceComm_;
};

// Communicators as the API's handles (api.cc). initRank is the API's own way in, for the
// machine calibration's thread ranks too (core/link_calibration.h), which take a config of
// their own where loomCommInitRankConfig would resolve the caller's.
// Joins the communicator of `id` as `rank` of `nranks` (collective) and hands it out.
Status initRank(loomComm_t* out, int nranks, const UniqueId& id, int rank, const CommConfig& config);
// The communicator behind a handle: loomInvalidArgument for NULL, loomInvalidUsage for one
// that is not live.
Status lookupComm(const void* handle, Communicator** out);

// Holds a communicator in use for its lifetime, so that loomCommAbort from another thread
// unblocks the call and then waits for it to leave before freeing anything.
class CommUse {
 public:
  explicit CommUse(Communicator* comm) : comm_(comm) { comm_->acquire(); }
  ~CommUse() { comm_->release(); }
  CommUse(const CommUse&) = delete;
  CommUse& operator=(const CommUse&) = delete;

 private:
  Communicator* comm_;
};

}  // namespace loom
