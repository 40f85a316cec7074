// A communicator's life: init, transports, split, errors, abort and destroy (communicator.h).
#include "core/communicator.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <set>
#include <type_traits>

#include "algorithms/calibration_cache.h"
#include "algorithms/tree.h"
#include "algorithms/tuning_file.h"
#include "base/env.h"
#include "base/host_identity.h"
#include "base/log.h"
#include "core/device_comm.h"
#include "core/registry.h"
#include "core/ring_placement.h"
#include "core/shared_settings.h"
#include "core/tuner_constants.h"
#include "device/runtime.h"
#include "loom_build_config.h"
#include "transport/routed_transport.h"
#include "transport/shm_transport.h"
#include "transport/socket_transport.h"
#if LOOM_HAVE_UCX
#include "transport/ucx_devices.h"
#include "transport/ucx_transport.h"
#endif

namespace loom {

namespace {

// A data-path size: its variable where set, else the tuning file's value (`fromFile`, -1 when
// the file has none), else the variable's default; *source says which, for the INFO line.
Status sizeSetting(const char* variable, long long fromFile, const char* key, const std::string& file, long long min,
                   long long max, env::From from, long long* out, std::string* source) {
  if (env::get(variable, from) || fromFile < 0) {
    *source = env::get(variable, from) ? variable : "built in";
    return env::getInt(variable, min, max, out, from);
  }
  if (fromFile < min || fromFile > max) {
    return error(loomInvalidArgument, "tuning file %s: %s = %lld is out of range [%lld, %lld] (as %s)", file.c_str(),
                 key, fromFile, min, max, variable);
  }
  *source = "LOOM_TUNING_FILE " + file;
  *out = fromFile;
  return Status::ok();
}

// LOOM_CHUNK_SIZE, LOOM_SHM_FIFO_BYTES and LOOM_SOCKET_SNDBUF, or the tuning file's sizes.
Status readDataPathSizes(env::From from, CommConfig* c) {
  DataPathSizes fromFile;
  if (!c->tuningFile.empty()) {
    // The whole file is read (and a bad one refused) here, on every rank; its constants are
    // rank 0's to take later (Communicator::agreeOnProfile).
    CommProfile unused;
    LOOM_TRY(loadTuningFile(c->tuningFile, &unused, nullptr, &fromFile));
  }
  long long slice = 0, fifo = 0, sendBuffer = 0;
  std::string sliceSource, fifoSource, sendBufferSource;
  LOOM_TRY(sizeSetting("LOOM_CHUNK_SIZE", fromFile.chunkBytes, "chunk.bytes", c->tuningFile, 4096, 1LL << 30, from,
                       &slice, &sliceSource));
  LOOM_TRY(sizeSetting("LOOM_SHM_FIFO_BYTES", fromFile.shmFifoBytes, "shm.fifo_bytes", c->tuningFile, 4096,
                       1LL << 30, from, &fifo, &fifoSource));
  if (!transport::ShmTransport::validFifoBytes(static_cast<size_t>(fifo))) {
    const std::string what = env::get("LOOM_SHM_FIFO_BYTES", from) || fromFile.shmFifoBytes < 0
                                 ? format("LOOM_SHM_FIFO_BYTES=%lld", fifo)
                                 : format("tuning file %s: shm.fifo_bytes = %lld", c->tuningFile.c_str(), fifo);
    return error(loomInvalidArgument, "%s is not a power of two", what.c_str());
  }
  LOOM_TRY(sizeSetting("LOOM_SOCKET_SNDBUF", fromFile.socketSendBuffer, "socket.sndbuf", c->tuningFile, 0, 1 << 30,
                       from, &sendBuffer, &sendBufferSource));
  c->sliceBytes = static_cast<size_t>(slice);
  c->shmFifoBytes = static_cast<size_t>(fifo);
  c->socketSendBuffer = static_cast<int>(sendBuffer);
  c->sliceSource = sliceSource;
  // Direct reads between processes: LOOM_SHM_DIRECT decides where it is set, else the file
  // (ShmTransport weighs the two), else rank 0's machine calibration (agreeOnProfile).
  c->shmDirectFromFile = fromFile.shmDirectMinBytes;
  c->linkSizeSources = format("shm FIFO %lld bytes (%s), socket send buffer %lld bytes (%s)", fifo,
                              fifoSource.c_str(), sendBuffer, sendBufferSource.c_str());
  return Status::ok();
}

// LOOM_TRANSPORTS, LOOM_ALGO, LOOM_PROTO, LOOM_TUNING_FILE, LOOM_CHANNELS, LOOM_RING_ORDER, LOOM_CHECK,
// LOOM_STREAMING_MIN_BYTES, LOOM_MAPPED_MIN_BYTES, LOOM_SOCKET_NSOCKS, LOOM_UCX_LINKS, LOOM_DEVICE_EMULATION,
// LOOM_DEVICE_FIFO_BYTES, LOOM_DEVICE_SLICE_BYTES, and the sizes above.
Status readDataPathSettings(env::From from, CommConfig* c) {
  std::string transports = env::getOrDefault("LOOM_TRANSPORTS", from);
  c->shm = c->socket = c->ucx = c->networkAuto = false;
  for (const std::string& name : env::splitList(transports)) {
    if (name == "shm") {
      c->shm = true;
    } else if (name == "socket") {
      c->socket = true;
    } else if (name == "auto") {
      c->networkAuto = true;
    } else if (name == "ucx") {
      c->ucx = true;
    } else {
      return error(loomInvalidArgument, "LOOM_TRANSPORTS=\"%s\": unknown transport \"%s\" (shm, socket, ucx, auto)",
                   transports.c_str(), name.c_str());
    }
  }
  if (!c->shm && !c->socket && !c->ucx && !c->networkAuto) {
    return error(loomInvalidArgument, "LOOM_TRANSPORTS=\"%s\" allows no transport (shm, socket, ucx, auto)",
                 transports.c_str());
  }
  if (int(c->socket) + int(c->ucx) + int(c->networkAuto) > 1) {
    return error(loomInvalidArgument,
                 "LOOM_TRANSPORTS=\"%s\": socket, ucx and auto all choose what serves the peers shared memory "
                 "does not; list one",
                 transports.c_str());
  }
  // Sockets unless the communicator finds RDMA everywhere (Communicator::finishInit).
  if (c->networkAuto) c->socket = true;
#if !LOOM_HAVE_UCX
  if (c->ucx) {
    return error(loomInvalidArgument,
                 "LOOM_TRANSPORTS=\"%s\" asks for ucx, but this Loom was built without UCX (meson feature 'ucx', "
                 "Debian package libucx-dev)",
                 transports.c_str());
  }
#endif
  LOOM_TRY(parseAlgorithmSetting(env::getOrDefault("LOOM_ALGO", from), &c->algorithms));
  LOOM_TRY(parseProtocolSetting(env::getOrDefault("LOOM_PROTO", from), &c->protocols));
  c->tuningFile = env::getOrDefault("LOOM_TUNING_FILE", from);
  long long channels = 0;
  LOOM_TRY(env::getInt("LOOM_CHANNELS", 0, 64, &channels, from));
  c->channels = static_cast<int>(channels);
  std::string ringOrder = env::getOrDefault("LOOM_RING_ORDER", from);
  if (ringOrder != "topology" && ringOrder != "rank") {
    return error(loomInvalidArgument, "LOOM_RING_ORDER=\"%s\": expected topology or rank", ringOrder.c_str());
  }
  c->topologyRing = ringOrder == "topology";
  long long check = 0;
  LOOM_TRY(env::getInt("LOOM_CHECK", 0, 1, &check, from));
  c->check = check != 0;
  LOOM_TRY(readDataPathSizes(from, c));
  c->streamingMinBytes = -1;
  if (env::get("LOOM_STREAMING_MIN_BYTES", from)) {
    LOOM_TRY(env::getInt("LOOM_STREAMING_MIN_BYTES", 0, 1LL << 50, &c->streamingMinBytes, from));
  }
  LOOM_TRY(transport::readStoresSetting("LOOM_REDUCTION_STORES", &c->reductionStores, from));
  c->mappedMinBytes = -1;
  if (env::get("LOOM_MAPPED_MIN_BYTES", from)) {
    LOOM_TRY(env::getInt("LOOM_MAPPED_MIN_BYTES", 0, 1LL << 50, &c->mappedMinBytes, from));
  }
  long long calibration = 0;
  LOOM_TRY(env::getInt("LOOM_MACHINE_CALIBRATION", 0, 1, &calibration, from));
  c->machineCalibration = calibration != 0;
  long long socketLinks = 0;
  LOOM_TRY(env::getInt("LOOM_SOCKET_NSOCKS", 1, 16, &socketLinks, from));
  c->socketLinks = static_cast<int>(socketLinks);
  long long ucxLinks = 0;
  LOOM_TRY(env::getInt("LOOM_UCX_LINKS", 1, 16, &ucxLinks, from));
  c->ucxLinks = static_cast<int>(ucxLinks);
  long long emulation = 0, fifo = 0, deviceSlice = 0;
  LOOM_TRY(env::getInt("LOOM_DEVICE_EMULATION", 0, 1, &emulation, from));
  c->deviceEmulation = emulation != 0;
  LOOM_TRY(env::getInt("LOOM_DEVICE_FIFO_BYTES", 16 << 10, 1LL << 30, &fifo, from));
  c->deviceFifoBytes = static_cast<size_t>(fifo);
  LOOM_TRY(env::getInt("LOOM_DEVICE_SLICE_BYTES", 4096, 1LL << 34, &deviceSlice, from));
  c->deviceSliceBytes = static_cast<size_t>(deviceSlice);
  // Connections are made for every channel a call may use; LOOM_CHANNELS caps them.
  c->deviceChannels = c->channels > 0        ? c->channels
                      : c->deviceEmulation ? kEmulatedDeviceChannels
                                           : kDefaultDeviceChannels;
  return Status::ok();
}

// The timeouts and the data path's settings.
Status readSettings(env::From from, CommConfig* c) {
  LOOM_TRY(env::getInt("LOOM_TIMEOUT_MS", 1, 1LL << 40, &c->timeoutMs, from));
  LOOM_TRY(env::getInt("LOOM_INIT_TIMEOUT_MS", 1, 1LL << 40, &c->initTimeoutMs, from));
  return readDataPathSettings(from, c);
}

// "a = 1\nb = 2\n" as "a = 1, b = 2", for one log line.
std::string oneLine(std::string text) {
  while (!text.empty() && text.back() == '\n') text.pop_back();
  for (size_t at = text.find('\n'); at != std::string::npos; at = text.find('\n', at)) text.replace(at, 1, ", ");
  return text;
}

}  // namespace

Status builtInConfig(CommConfig* out) {
  CommConfig c;
  LOOM_TRY(readSettings(env::From::kDefaults, &c));
  *out = c;
  return Status::ok();
}

void applyDataPath(const CommConfig& config, bool device, int hostLinks, CommProfile* profile) {
  profile->sliceBytes = device ? config.deviceSliceBytes : config.sliceBytes;
  profile->channels = config.channels > 0 ? config.channels : device ? config.deviceChannels : hostLinks;
  profile->channelsFixed = config.channels > 0;
}

Status resolveConfig(const loomConfig_t* user, const CommConfig* inherit, CommConfig* out) {
  CommConfig c;
  if (inherit != nullptr) {
    c = *inherit;
  } else {
    LOOM_TRY(readSettings(env::From::kEnvironment, &c));
  }
  if (user != nullptr) {
    if (user->magic != LOOM_CONFIG_MAGIC || user->size < sizeof(loomConfig_t)) {
      return error(loomInvalidArgument,
                   "config was not initialised with LOOM_CONFIG_INITIALIZER (magic %#x, size %zu)",
                   user->magic, user->size);
    }
    if (user->device < -1) {
      return error(loomInvalidArgument, "config.device=%d: use -1 for host memory or a CUDA device ordinal",
                   user->device);
    }
    c.device = user->device;
    if (user->timeoutMs != LOOM_CONFIG_UNDEF_INT) {
      if (user->timeoutMs <= 0) {
        return error(loomInvalidArgument, "config.timeoutMs=%d must be positive", user->timeoutMs);
      }
      c.timeoutMs = user->timeoutMs;
    }
    if (user->initTimeoutMs != LOOM_CONFIG_UNDEF_INT) {
      if (user->initTimeoutMs <= 0) {
        return error(loomInvalidArgument, "config.initTimeoutMs=%d must be positive", user->initTimeoutMs);
      }
      c.initTimeoutMs = user->initTimeoutMs;
    }
    if (user->commName != nullptr) c.name = user->commName;
  }
  // Refused here, before anything reaches the root, so that the id still forms a communicator.
  if (c.device >= 0 && !c.deviceEmulation) LOOM_TRY(device::checkDeviceExists(c.device));
  *out = c;
  return Status::ok();
}

Communicator::Communicator(std::unique_ptr<Bootstrap> bootstrap, CancelSignal cancel,
                           const CommConfig& config)
    : bootstrap_(std::move(bootstrap)),
      failureNotices_(*bootstrap_),
      remoteAnnouncements_(*bootstrap_),
      cancel_(std::move(cancel)),
      config_(config),
      reductionStores_(transport::StoreChooser::reductionRules(config.reductionStores)),
      mappedPeers_(config.reductionStores),
      rank_(bootstrap_->rank()),
      nranks_(bootstrap_->nranks()) {}

Communicator::~Communicator() = default;

Status Communicator::addRegistration(void* base, size_t bytes, void** handle) {
  LOOM_TRY(usable());
  auto entry = std::make_unique<Registration>(Registration{base, bytes, nullptr});
  std::lock_guard<YieldingLock> lock(execution_);
  LOOM_TRY(transport_->registerMemory(base, bytes, &entry->byTransport).withContext("loomCommRegister"));
  LOOM_INFO("comm %016llx: registered %zu bytes at %p%s", static_cast<unsigned long long>(commId()), bytes, base,
            entry->byTransport ? " with the network transport" : " (its transports need no registration)");
  *handle = entry.get();
  registrations_.emplace(entry.get(), std::move(entry));
  return Status::ok();
}

Status Communicator::removeRegistration(void* handle) {
  std::lock_guard<YieldingLock> lock(execution_);
  auto it = registrations_.find(handle);
  if (it == registrations_.end()) {
    return error(loomInvalidArgument, "handle %p is not a registration of this communicator (already deregistered?)",
                 handle);
  }
  const Registration& r = *it->second;
  LOOM_INFO("comm %016llx: deregistered %zu bytes at %p; %llu messages moved through the registration",
            static_cast<unsigned long long>(commId()), r.bytes, r.base,
            static_cast<unsigned long long>(r.byTransport ? r.byTransport->uses() : 0));
  registrations_.erase(it);
  return Status::ok();
}

uint64_t Communicator::registrationUses(const void* handle) {
  std::lock_guard<YieldingLock> lock(execution_);
  auto it = registrations_.find(handle);
  return it == registrations_.end() || !it->second->byTransport ? 0 : it->second->byTransport->uses();
}

bool Communicator::firstUseOf(CallInfo::Kind kind, Algorithm algorithm) {
  uint64_t bit = uint64_t{1} << ((static_cast<unsigned>(kind) * kNumAlgorithms + static_cast<unsigned>(algorithm)) % 64);
  // Every call asks: a plain load answers the common case without a locked instruction.
  if ((usedChoices_.load(std::memory_order_relaxed) & bit) != 0) return false;
  return (usedChoices_.fetch_or(bit) & bit) == 0;
}

Status Communicator::create(const UniqueId& id, int rank, int nranks, const CommConfig& config,
                            std::unique_ptr<Communicator>* out) {
  Deadline deadline = Deadline::afterMs(config.initTimeoutMs);
  CancelSignal cancel;
  std::unique_ptr<Bootstrap> bootstrap;
  LOOM_TRY(Bootstrap::connect(id, rank, nranks, localHostIdentity(),
                              static_cast<int>(std::min<long long>(config.initTimeoutMs, 1LL << 30)),
                              deadline, cancel.fd(), &bootstrap));
  std::unique_ptr<Communicator> comm(new Communicator(std::move(bootstrap), std::move(cancel), config));
  comm->bootstrap_->setTimeoutMs(std::max(1, deadline.remainingMs()));
  LOOM_TRY(comm->finishInit());
  *out = std::move(comm);
  return Status::ok();
}

Status Communicator::chooseNetwork() {
  config_.socket = true;
  config_.ucx = false;
#if LOOM_HAVE_UCX
  if (hosts_ == 1) return Status::ok();
  const std::vector<std::string> mine = transport::ucxRdmaTransports();
  std::vector<uint8_t> rdma(static_cast<size_t>(nranks_));
  rdma[static_cast<size_t>(rank_)] = mine.empty() ? 0 : 1;
  LOOM_TRY(bootstrap_->allGather(rdma.data(), 1).withContext("which ranks have an RDMA device in UCX"));
  int without = -1;
  for (int r = nranks_ - 1; r >= 0; --r) {
    if (rdma[static_cast<size_t>(r)] == 0) without = r;
  }
  if (without >= 0) {
    LOOM_INFO("comm %016llx: sockets between hosts (LOOM_TRANSPORTS auto): rank %d's UCX reports no RDMA device%s",
              static_cast<unsigned long long>(commId()), without, without == rank_ ? " (this rank)" : "");
    return Status::ok();
  }
  std::string names;
  for (const std::string& n : mine) names += (names.empty() ? "" : ", ") + n;
  LOOM_INFO("comm %016llx: UCX between hosts (LOOM_TRANSPORTS auto): every rank's UCX reports an RDMA device; "
            "this rank's: %s",
            static_cast<unsigned long long>(commId()), names.c_str());
  config_.socket = false;
  config_.ucx = true;
#endif
  return Status::ok();
}

Status Communicator::finishInit() {
  log::RankScope scope(rank_);
  std::string differing;
  LOOM_TRY(adoptRankZeroSettings(*bootstrap_, &config_, &differing));
  if (!differing.empty()) {
    LOOM_WARN("comm %016llx: %s on this rank differ%s from rank 0's; using rank 0's (ranks that differ "
              "would build different plans and links and wait on each other)",
              static_cast<unsigned long long>(commId()), differing.c_str(),
              differing.find(',') == std::string::npos ? "s" : "");
  }
  const std::vector<PeerInfo>& peers = bootstrap_->peers();
  const uint64_t ownHost = peers[static_cast<size_t>(rank_)].hostHash;
  std::set<uint64_t> hostSet;
  localRanks_ = 0;
  std::vector<bool> viaShm(static_cast<size_t>(nranks_), false);
  std::vector<int> shmPeers;
  for (int r = 0; r < nranks_; ++r) {
    const PeerInfo& p = peers[static_cast<size_t>(r)];
    hostSet.insert(p.hostHash);
    if (p.hostHash != ownHost) continue;
    if (r < rank_) ++localRank_;
    ++localRanks_;
    if (r != rank_ && config_.shm) {
      viaShm[static_cast<size_t>(r)] = true;
      shmPeers.push_back(r);
    }
  }
  hosts_ = static_cast<int>(hostSet.size());
  oversubscribed_ = localRanks_ > ::sysconf(_SC_NPROCESSORS_ONLN);

  // Every rank takes the same decisions from the same allgathered table, so the collective
  // steps below (the socket listeners' exchange, the board) run on all ranks or none.
  bool needSocket = hosts_ > 1 || !config_.shm;
  if (config_.networkAuto) LOOM_TRY(chooseNetwork());
  if (needSocket && !config_.socket && !config_.ucx) {
    return error(loomInvalidUsage,
                 "LOOM_TRANSPORTS has neither socket nor ucx, but the ranks are on %d hosts and shared memory joins "
                 "only ranks of one host",
                 hosts_);
  }
  // The peers shared memory does not serve go over sockets, or UCX where LOOM_TRANSPORTS says.
  std::unique_ptr<transport::Transport> network;
  if (needSocket && config_.ucx) {
#if LOOM_HAVE_UCX
    std::unique_ptr<transport::UcxTransport> ucx;
    LOOM_TRY(transport::UcxTransport::create(*bootstrap_, config_.ucxLinks, &ucx));
    network = std::move(ucx);
#endif
  } else if (needSocket) {
    std::unique_ptr<transport::SocketTransport> socket;
    LOOM_TRY(transport::SocketTransport::create(*bootstrap_, cancel_.fd(), config_.socketLinks,
                                                config_.socketSendBuffer, &socket));
    network = std::move(socket);
  }
  std::unique_ptr<transport::ShmTransport> shm;
  if (!shmPeers.empty()) {
    LOOM_TRY(transport::ShmTransport::create(*bootstrap_, shmPeers, config_.shmFifoBytes, config_.shmDirectFromFile,
                                             &shm));
  }
  transport::ShmTransport* shmLinks = shm.get();  // owned by transport_ below; no link made yet
  if (hosts_ == 1 && nranks_ > 1 && config_.shm) {
    LOOM_TRY(transport::ShmBoard::create(*bootstrap_, env::getOrDefault("LOOM_SHM_DIR"), &board_)
                 .withContext("one-shot board"));
  }
  int socketLinks = network ? network->linksPerPeer() : 0;
  transport_ = std::make_unique<transport::RoutedTransport>(std::move(shm), std::move(network), viaShm);
  LOOM_TRY(agreeOnProfile(shmLinks));
  bootstrap_->setTimeoutMs(config_.timeoutMs);

  LOOM_INFO("comm %016llx%s%s: rank %d of %d on host %s (local rank %d of %d, %d host%s), "
            "bootstrap %s, timeout %lld ms",
            static_cast<unsigned long long>(commId()), config_.name.empty() ? "" : " ",
            config_.name.c_str(), rank_, nranks_, peers[static_cast<size_t>(rank_)].hostName.c_str(),
            localRank_, localRanks_, hosts_, hosts_ == 1 ? "" : "s",
            bootstrap_->address().toString().c_str(), config_.timeoutMs);
  std::string shmList, socketList;
  for (int r = 0; r < nranks_; ++r) {
    if (r == rank_) continue;
    std::string& list = viaShm[static_cast<size_t>(r)] ? shmList : socketList;
    list += (list.empty() ? "" : ",") + std::to_string(r);
  }
  const std::string sendBuffer = config_.socketSendBuffer > 0
                                     ? format("send buffer %d bytes", config_.socketSendBuffer)
                                     : std::string("send buffer autotuned");
  LOOM_INFO("comm %016llx: shm to ranks [%s] (same host), %s (%d link(s) each%s%s) to ranks [%s]%s",
            static_cast<unsigned long long>(commId()), shmList.c_str(), config_.ucx ? "ucx" : "socket", socketLinks,
            config_.ucx ? "" : ", ", config_.ucx ? "" : sendBuffer.c_str(), socketList.c_str(),
            board_ ? "; one-shot board for small collectives" : "");
  // The chunk is rank 0's on every rank (plans must match); a FIFO's size is its creator's,
  // a send buffer its sender's.
  LOOM_INFO("comm %016llx: data-path sizes: chunk %zu bytes (%s), %s, %s", static_cast<unsigned long long>(commId()),
            config_.sliceBytes, rank_ == 0 ? config_.sliceSource.c_str() : "rank 0's", config_.linkSizeSources.c_str(),
            directReads_.c_str());
  if (nranks_ > 2 && config_.topologyRing) {
    RingPlacementInput placement{rank_, nranks_, localRank_, localRanks_, config_.device, {}};
    for (const PeerInfo& p : peers) placement.hostOf.push_back(p.hostHash);
    std::vector<int> ring, hostStarts;
    std::string summary;
    LOOM_TRY(placeRing(*bootstrap_, placement, &ring, &hostStarts, &summary));
    LOOM_INFO("comm %016llx: %s", static_cast<unsigned long long>(commId()), summary.c_str());
    ringOrder_ = std::make_unique<RingOrder>(std::move(ring), std::move(hostStarts));
    if (ringOrder_->isIdentity()) ringOrder_.reset();
  }
  if (nranks_ > 1) {
    LOOM_INFO("comm %016llx: allreduce %s", static_cast<unsigned long long>(commId()),
              describeAllReduceTrees(ringOrder_.get(), nranks_).c_str());
  }
  if (config_.device >= 0) {
    findDeviceCpus();
    LOOM_TRY(DeviceComm::create(this, &deviceComm_));
  }
  return Status::ok();
}

Status Communicator::agreeOnProfile(transport::ShmTransport* shm) {
  const bool device = config_.device >= 0;
  CommProfile mine = device ? CommProfile::deviceDefaults(nranks_, hosts_) : CommProfile::defaults(nranks_, hosts_);
  // Whether the ranks of this host are all threads of this process, which LOOM_SHM_DIRECT's
  // default lets read each other's large sends directly.
  const std::vector<PeerInfo>& peers = bootstrap_->peers();
  const PeerInfo& self = peers[static_cast<size_t>(rank_)];
  const bool threadsOnly = std::all_of(peers.begin(), peers.end(), [&](const PeerInfo& p) {
    return p.hostHash != self.hostHash || sameProcess(p, self);
  });
  bool directFromFile = false;
  if (!device) {
    LOOM_TRY(transport::ShmTransport::directReadMinBytes(threadsOnly, config_.shmDirectFromFile, &mine.directMinBytes,
                                                         &directFromFile));
  }
  // Between processes, where neither LOOM_SHM_DIRECT nor a tuning file says, the machine
  // calibration's measurement decides, rank 0's for every rank (below).
  const bool directByCalibration =
      !device && !threadsOnly && !transport::ShmTransport::directReadsSet(config_.shmDirectFromFile);
  const size_t ownDirect = mine.directMinBytes;  // this rank's links' setting, unless the calibration's
  applyDataPath(config_, device, transport_->linksPerPeer(), &mine);
  mine.sharedMemory = board_ != nullptr;
  // Every rank takes rank 0's constants (ranks that chose differently would run different
  // plans and wait on each other forever), so only rank 0 builds them. A device
  // communicator's kernel neither streams nor runs on the host's caches: no calibration.
  std::string sources;
  // Another rank's own tuning file, read before the exchange so that a bad one fails here
  // with its own message (rank 0 may not live to tell).
  CommProfile ownFile = mine;
  std::vector<std::string> ownKeys;
  if (rank_ == 0) {
    TunerLayers layers;
    layers.tuningFile = config_.tuningFile;
    if (!device) {
      layers.streamingMinBytes = config_.streamingMinBytes;
      layers.calibrationThreads = calibrationThreads();
    }
    DataPathSizes calibrated;
    LOOM_TRY(layerTunerConstants(layers, &mine, &sources, &calibrated));
    if (directByCalibration && calibrated.shmDirectMinBytes >= 0) {
      mine.directMinBytes = static_cast<size_t>(calibrated.shmDirectMinBytes);
      mine.directMeasured = true;
    }
  } else if (!config_.tuningFile.empty()) {
    LOOM_TRY(loadTuningFile(config_.tuningFile, &ownFile, &ownKeys));
  }
  static_assert(std::is_trivially_copyable_v<CommProfile>);
  std::vector<CommProfile> all(static_cast<size_t>(nranks_));
  all[static_cast<size_t>(rank_)] = mine;
  LOOM_TRY(bootstrap_->allGather(all.data(), sizeof(CommProfile)).withContext("tuner constants exchange"));
  profile_ = all[0];
  const bool measured = directByCalibration && profile_.directMeasured;
  const std::string directSource = measured ? (rank_ == 0 ? "machine calibration" : "rank 0's machine calibration")
                                   : directFromFile              ? "LOOM_TUNING_FILE " + config_.tuningFile
                                   : env::get("LOOM_SHM_DIRECT") ? std::string("LOOM_SHM_DIRECT")
                                                                 : std::string("built in");
  if (measured && shm != nullptr) shm->useDirectReadsFrom(profile_.directMinBytes);
  const size_t direct = measured ? profile_.directMinBytes : ownDirect;
  const std::string from = direct > 0 ? format("from %zu bytes", direct) : "never";
  directReads_ = format("direct reads between %s %s (%s)", threadsOnly ? "threads" : "processes", from.c_str(),
                        directSource.c_str());
  if (rank_ == 0) {
    LOOM_INFO("comm %016llx: tuner constants: %s", static_cast<unsigned long long>(commId()), sources.c_str());
    return Status::ok();
  }
  std::string differing;
  for (const std::string& key : ownKeys) {
    if (tuningValue(ownFile, key) != tuningValue(profile_, key)) differing += (differing.empty() ? "" : ", ") + key;
  }
  if (!differing.empty()) {
    LOOM_WARN("comm %016llx: this rank's tuning file (LOOM_TUNING_FILE %s) differs from rank 0's constants in %s; "
              "choosing algorithms with rank 0's",
              static_cast<unsigned long long>(commId()), config_.tuningFile.c_str(), differing.c_str());
  }
  LOOM_INFO("comm %016llx: tuner constants (rank 0's): %s", static_cast<unsigned long long>(commId()),
            oneLine(tuningText(profile_)).c_str());
  return Status::ok();
}

int Communicator::calibrationThreads() const {
  if (!config_.machineCalibration) return 0;
  // Called on rank 0: its host's ranks are the ones that copy at once during a collective.
  const int threads = calibrationThreadsFor(localRanks_);
  if (threads == 0) {
    // Its figures would be wrong, and measuring them slow.
    LOOM_INFO("comm %016llx: no machine calibration in a sanitized build: built-in constants",
              static_cast<unsigned long long>(commId()));
  }
  return threads;
}

void Communicator::findDeviceCpus() {
  // A LOOM_TOPO_FILE describes another machine: its CPU numbers mean nothing here.
  if (env::get("LOOM_TOPO_FILE")) return;
  const topo::Graph* graph = nullptr;
  topo::Source source;
  Status status = Registry::instance().hostGraph("", &graph, &source);
  int gpu = status.isOk() ? graph->gpuByOrdinal(config_.device) : -1;
  if (gpu < 0 || graph->node(gpu).cpu < 0) {
    LOOM_INFO("device %d: not in the discovered topology (%s); its threads stay unbound", config_.device,
              status.isOk() ? "no such GPU" : status.message().c_str());
    return;
  }
  deviceCpus_ = graph->node(graph->node(gpu).cpu).cpuList;
}

Status Communicator::split(int color, int key, const CommConfig& config,
                           std::unique_ptr<Communicator>* out) {
  // Every rank publishes (color, key, a fresh listener); members of a color then form a
  // channel among themselves without a root.
  struct Entry {
    int32_t color;
    int32_t key;
    uint8_t address[SocketAddress::kWireBytes];
  };
  Entry mine{};
  mine.color = color;
  mine.key = key;
  Acceptor listener;
  if (color != LOOM_SPLIT_NOCOLOR) {
    LOOM_TRY(Bootstrap::listen(bootstrap_->secret(), bootstrap_->address(), &listener));
    listener.address().toWire(mine.address);
  }
  std::vector<Entry> all(static_cast<size_t>(nranks_));
  all[static_cast<size_t>(rank_)] = mine;
  int splitIndex = splits_++;
  LOOM_TRY(bootstrap_->allGather(all.data(), sizeof(Entry)).withContext("loomCommSplit exchange"));
  if (color == LOOM_SPLIT_NOCOLOR) {
    out->reset();
    return Status::ok();
  }

  std::vector<int> members;
  for (int r = 0; r < nranks_; ++r) {
    if (all[static_cast<size_t>(r)].color == color) members.push_back(r);
  }
  std::stable_sort(members.begin(), members.end(), [&](int a, int b) {
    return all[static_cast<size_t>(a)].key < all[static_cast<size_t>(b)].key;
  });
  std::vector<const uint8_t*> addresses;
  for (int r : members) addresses.push_back(all[static_cast<size_t>(r)].address);
  // Ranks of one color agree on this id without talking; other colors get other ids.
  uint64_t newCommId = commId() ^ (0x9e3779b97f4a7c15ull * static_cast<uint64_t>(splitIndex + 1)) ^
                       (static_cast<uint64_t>(static_cast<uint32_t>(color)) << 32);
  return formChild(members, addresses, std::move(listener), newCommId, config,
                   format("loomCommSplit(color=%d)", color), out);
}

Status Communicator::shrink(const std::vector<int>& excluded, const CommConfig& config,
                            std::unique_ptr<Communicator>* out) {
  std::vector<int> members;
  for (int r = 0; r < nranks_; ++r) {
    if (!std::binary_search(excluded.begin(), excluded.end(), r)) members.push_back(r);
  }
  // Each survivor publishes a fresh listener and what it excludes (a hash of the sorted
  // list), so ranks that disagree on who is gone all fail instead of forming two rings.
  struct Entry {
    uint64_t excludedHash;
    uint8_t address[SocketAddress::kWireBytes];
  };
  Entry mine{};
  mine.excludedHash = 0xcbf29ce484222325ull;  // FNV-1a over the excluded ranks
  for (int r : excluded) mine.excludedHash = (mine.excludedHash ^ static_cast<uint32_t>(r)) * 0x100000001b3ull;
  Acceptor listener;
  LOOM_TRY(Bootstrap::listen(bootstrap_->secret(), bootstrap_->address(), &listener));
  listener.address().toWire(mine.address);
  const size_t me = static_cast<size_t>(std::find(members.begin(), members.end(), rank_) - members.begin());
  std::vector<Entry> all(members.size());
  all[me] = mine;
  int shrinkIndex = splits_++;
  LOOM_TRY(bootstrap_->allGatherAmong(members, all.data(), sizeof(Entry)).withContext("loomCommShrink exchange"));
  std::vector<const uint8_t*> addresses;
  for (size_t i = 0; i < members.size(); ++i) {
    if (all[i].excludedHash != mine.excludedHash) {
      return error(loomInvalidUsage,
                   "loomCommShrink: rank %d excludes other ranks than this rank does (%zu excluded here)",
                   members[i], excluded.size());
    }
    addresses.push_back(all[i].address);
  }
  // Distinct from every split's id (those have a color in the high half; here it is all ones).
  uint64_t newCommId = commId() ^ (0x9e3779b97f4a7c15ull * static_cast<uint64_t>(shrinkIndex + 1)) ^
                       (0xffffffffull << 32) ^ mine.excludedHash;
  return formChild(members, addresses, std::move(listener), newCommId, config,
                   format("loomCommShrink(%zu excluded)", excluded.size()), out);
}

Status Communicator::formChild(const std::vector<int>& members, const std::vector<const uint8_t*>& addresses,
                               Acceptor listener, uint64_t newCommId, const CommConfig& config,
                               const std::string& what, std::unique_ptr<Communicator>* out) {
  std::vector<PeerInfo> peers;
  int newRank = -1;
  for (size_t i = 0; i < members.size(); ++i) {
    if (members[i] == rank_) newRank = static_cast<int>(peers.size());
    PeerInfo p = bootstrap_->peers()[static_cast<size_t>(members[i])];
    LOOM_TRY(SocketAddress::fromWire(addresses[i], &p.bootstrapAddress));
    peers.push_back(p);
  }
  CancelSignal cancel;
  std::unique_ptr<Bootstrap> bootstrap;
  LOOM_TRY(Bootstrap::fromPeers(std::move(listener), bootstrap_->secret(), newCommId, newRank, std::move(peers),
                                cancel.fd(), &bootstrap));
  std::unique_ptr<Communicator> comm(new Communicator(std::move(bootstrap), std::move(cancel), config));
  comm->bootstrap_->setTimeoutMs(config.initTimeoutMs);
  LOOM_TRY(comm->finishInit().withContext(what));
  *out = std::move(comm);
  return Status::ok();
}

bool Communicator::endCallsInProgress(const char* by) {
  const bool first = fail(error(loomInvalidUsage, "the communicator's calls were ended by %s", by));
  cancel_.fire();
  if (deviceComm_ != nullptr) deviceComm_->abort();
  waitUntilUnused();
  // Every wait that could see the signal has ended; the bootstrap needs it clear again.
  cancel_.clear();
  return first;
}

void Communicator::revoke() {
  const bool first = endCallsInProgress("loomCommRevoke");
  std::lock_guard<std::mutex> lock(mutex_);
  if (!revoked_) beforeRevoke_ = first ? Status::ok() : failure_;
  revoked_ = true;
}

bool Communicator::revoked() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return revoked_;
}

Status Communicator::usable() const {
  // Checked on every call: the common answer needs no lock.
  if (!failed_.load(std::memory_order_acquire)) return Status::ok();
  std::lock_guard<std::mutex> lock(mutex_);
  if (revoked_) {
    return error(loomInvalidUsage,
                 "the communicator was revoked (loomCommRevoke): only loomCommSplit, loomCommShrink and "
                 "loomCommDestroy remain%s%s",
                 beforeRevoke_.isOk() ? "" : "; it had failed before: ", beforeRevoke_.message().c_str());
  }
  if (failure_.isOk()) return Status::ok();
  return Status(failure_.code(), "the communicator is in an error state: " + failure_.message());
}

bool Communicator::fail(const Status& status) {
  if (status.isOk()) return false;
  std::lock_guard<std::mutex> lock(mutex_);
  const bool first = failure_.isOk();
  if (first) failure_ = status;
  failed_.store(true, std::memory_order_release);
  return first;
}

loomResult_t Communicator::asyncError() const {
  // A kernel that has ended has its failure in its error record already; the watchdog
  // copies it here only on its next look.
  if (deviceComm_ != nullptr) deviceComm_->collectFailure();
  std::lock_guard<std::mutex> lock(mutex_);
  // Revoking is no failure, nor are the calls it ended.
  return revoked_ ? beforeRevoke_.code() : failure_.code();
}

void Communicator::abort() {
  fail(error(loomInvalidUsage, "the communicator was aborted (loomCommAbort)"));
  // A peer waiting on the board for this rank's next post hears it now, not at its deadline
  // (an application aborts a communicator that is fine when another of its own failed). Links
  // say so when the communicator goes; the board's flags are atomics, safe from any thread.
  if (board_ != nullptr) board_->markFailed(-1);
  cancel_.fire();
  if (deviceComm_ != nullptr) deviceComm_->abort();
}

Status Communicator::cancelReason() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return failure_.isOk() ? error(loomInvalidUsage, "the communicator was aborted (loomCommAbort)") : failure_;
}

void Communicator::setLastError(const std::string& message) {
  std::lock_guard<std::mutex> lock(mutex_);
  lastError_ = message;
}

const char* Communicator::lastError() {
  std::lock_guard<std::mutex> lock(mutex_);
  lastErrorCopy_ = lastError_;
  return lastErrorCopy_.c_str();
}

void Communicator::acquire() { uses_.fetch_add(1); }

void Communicator::release() {
  // Sequentially consistent with waitUntilUnused: either the waiter sees no uses left, or
  // this sees the waiter and wakes it under the mutex (so not before it sleeps).
  if (uses_.fetch_sub(1) == 1 && waiters_.load() > 0) {
    std::lock_guard<std::mutex> lock(mutex_);
    unused_.notify_all();
  }
}

void Communicator::waitUntilUnused() {
  waiters_.fetch_add(1);
  std::unique_lock<std::mutex> lock(mutex_);
  unused_.wait(lock, [this] { return uses_.load() == 0; });
  waiters_.fetch_sub(1);
}

}  // namespace loom
