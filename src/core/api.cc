// The C entry points: validate arguments, call into core, turn a Status into a result
// code and a message loomGetLastError can return. Nothing here blocks without a deadline.
#include <algorithm>
#include <cstring>
#include <functional>
#include <thread>
#include <variant>
#include <vector>

#include "algorithms/plan.h"
#include "base/env.h"
#include "base/host_stream.h"
#include "base/log.h"
#include "bootstrap/bootstrap_root.h"
#include "bootstrap/launch_env.h"
#include "bootstrap/unique_id.h"
#include "core/collective.h"
#include "core/communicator.h"
#include "core/device_comm.h"
#include "core/group.h"
#include "core/mapped_allreduce.h"
#include "core/p2p.h"
#include "core/registry.h"
#include "loom/loom.h"
#include "loom_build_config.h"

#define LOOM_API extern "C" __attribute__((visibility("default")))

using loom::Communicator;
using loom::HostStream;
using loom::Registry;
using loom::Status;
using loom::initRank;
using loom::lookupComm;

namespace {

// Hands a communicator out as a handle.
void registerComm(std::unique_ptr<Communicator> comm, loomComm_t* out) {
  Communicator* raw = comm.release();
  Registry::instance().comms().add(raw);
  *out = reinterpret_cast<loomComm_t>(raw);
}

// Takes the handle back and destroys its communicator once no call uses it.
Status destroyComm(Communicator* comm) {
  Registry::instance().comms().remove(comm);
  comm->waitUntilUnused();
  std::unique_ptr<Communicator> owned(comm);  // registerComm released it to the handle
  Registry::instance().reapRoots();
  return Status::ok();
}

// The last error seen by this thread: loomGetLastError(NULL) returns it.
thread_local std::string tLastError;

// At INFO, a failure shows what led to it on the communicator.
void logRecentCalls(Communicator* comm) {
  if (!loom::log::enabled(loom::log::Level::kInfo)) return;
  const std::vector<std::string> calls = comm->callLog().lines();
  LOOM_INFO("the last %zu calls on this communicator, oldest first:", calls.size());
  for (const std::string& line : calls) LOOM_INFO("  %s", line.c_str());
}

loomResult_t reportFailure(const Status& s, Communicator* comm, const char* call) {
  std::string message = call ? std::string(call) + ": " + s.message() : s.message();
  tLastError = message;
  if (comm != nullptr) comm->setLastError(message);
  LOOM_WARN("%s (%s)", message.c_str(), loomGetErrorString(s.code()));
  if (comm != nullptr) logRecentCalls(comm);
  return s.code();
}

// Inline: a small call's success costs no frame of reportFailure's.
inline loomResult_t report(const Status& s, Communicator* comm = nullptr, const char* call = nullptr) {
  return s.isOk() ? loomSuccess : reportFailure(s, comm, call);
}

Status lookupStream(loomStream_t handle, HostStream** out) {
  *out = nullptr;
  if (handle == nullptr) return Status::ok();
  if (!Registry::instance().streams().contains(handle)) {
    return loom::error(loomInvalidUsage,
                       "stream %p is not a live host stream (from loomStreamCreate) and the "
                       "communicator is a host one",
                       handle);
  }
  *out = static_cast<HostStream*>(handle);
  return Status::ok();
}

// A device communicator's stream is the caller's cudaStream_t (NULL too), passed through as
// it is; a host communicator's, or an emulated device one's, must be NULL or a live host stream.
Status resolveStream(Communicator& comm, loomStream_t handle, HostStream** out) {
  *out = nullptr;
  return comm.device() >= 0 && !comm.deviceComm().hostStreams() ? Status::ok() : lookupStream(handle, out);
}

// A C caller may pass any int where an enum is expected, and loading an enum object that
// holds a value outside its enumerators is undefined in C++: read the bits as an int first.
template <typename Enum>
int enumBits(const Enum& value) {
  static_assert(sizeof(Enum) == sizeof(int));
  int bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

Status checkBuffer(const char* what, const void* buffer, size_t count, int type,
                   size_t* bytes) {
  if (type < 0 || type >= loomNumTypes) {
    return loom::error(loomInvalidArgument, "datatype %d is not a loomDataType_t (0..%d)", type,
                       loomNumTypes - 1);
  }
  size_t size = loom::typeSize(static_cast<loomDataType_t>(type));
  // A multiplication that says it overflowed, where a division would cost more than the rest.
  if (__builtin_mul_overflow(count, size, bytes)) {
    return loom::error(loomInvalidArgument, "count %zu of %zu-byte elements overflows size_t", count, size);
  }
  if (buffer == nullptr && count > 0) {
    return loom::error(loomInvalidArgument, "%s is NULL with count %zu", what, count);
  }
  return Status::ok();
}

void logBuildOnce() {
  static std::once_flag once;
  std::call_once(once, [] {
    LOOM_INFO("Loom %s built with cuda=%d hwloc=%d ucx=%d ibverbs=%d", LOOM_VERSION_STRING,
              LOOM_HAVE_CUDA, LOOM_HAVE_HWLOC, LOOM_HAVE_UCX, LOOM_HAVE_IBVERBS);
  });
}

// Runs work now, or queues it on the stream holding the communicator until it has run.
Status enqueueOrRun(Communicator* comm, HostStream* stream, std::function<Status()> work) {
  if (stream == nullptr) return work();
  comm->acquire();
  stream->enqueue([comm, work = std::move(work)] {
    Status s = work();
    comm->release();
    return s;
  });
  return Status::ok();
}

// The frame of every call on a communicator: look the handle up, hold it in use while the
// call runs and its error is recorded, show its rank in logs.
template <typename Body>
loomResult_t withComm(loomComm_t handle, const char* call, Body body) {
  Communicator* comm = nullptr;
  Status found = lookupComm(handle, &comm);
  if (!found.isOk()) return report(found, nullptr, call);
  loom::CommUse use(comm);
  loom::log::RankScope scope(comm->rank());
  return report(body(*comm), comm, call);
}

}  // namespace

LOOM_API const char* loomGetErrorString(loomResult_t result) {
  switch (result) {
    case loomSuccess: return "no error";
    case loomUnhandledCudaError: return "unhandled cuda error";
    case loomSystemError: return "unhandled system error";
    case loomInternalError: return "internal error";
    case loomInvalidArgument: return "invalid argument";
    case loomInvalidUsage: return "invalid usage";
    case loomRemoteError: return "remote process exited or there was a network error";
    case loomInProgress: return "operation in progress";
    case loomTimeout: return "timeout";
    default: return "unknown result code";
  }
}

LOOM_API const char* loomGetLastError(loomComm_t handle) {
  Communicator* comm = nullptr;
  if (handle != nullptr && lookupComm(handle, &comm).isOk()) return comm->lastError();
  return tLastError.c_str();
}

LOOM_API loomResult_t loomGetVersion(int* version) {
  if (version == nullptr) return report(loom::error(loomInvalidArgument, "version is NULL"));
  *version = LOOM_VERSION_CODE;
  return loomSuccess;
}

LOOM_API loomResult_t loomGetUniqueId(loomUniqueId* out) {
  logBuildOnce();
  auto run = [&]() -> Status {
    if (out == nullptr) return loom::error(loomInvalidArgument, "uniqueId is NULL");
    loom::UniqueId id;
    LOOM_TRY(loom::Secret::random(&id.secret));
    loom::SocketAddress address;
    if (std::optional<std::string> host = loom::env::get("LOOM_MASTER_ADDR")) {
      long long port = 0;
      if (loom::env::get("LOOM_MASTER_PORT")) {
        LOOM_TRY(loom::env::getInt("LOOM_MASTER_PORT", 0, 65535, &port));
      }
      LOOM_TRY(loom::SocketAddress::resolve(*host, static_cast<int>(port), &address));
    } else {
      std::string ifname;
      LOOM_TRY(loom::chooseListenAddress(&address, &ifname));
      LOOM_INFO("loomGetUniqueId: root on interface %s", ifname.c_str());
    }
    std::unique_ptr<loom::BootstrapRoot> root;
    LOOM_TRY(loom::BootstrapRoot::start(address, id.secret, &root));
    id.root = root->address();
    Registry::instance().keepRoot(std::move(root));
    id.encode(out);
    return Status::ok();
  };
  return report(run(), nullptr, "loomGetUniqueId");
}

LOOM_API loomResult_t loomCommInitRankConfig(loomComm_t* comm, int nranks, loomUniqueId uniqueId,
                                             int rank, loomConfig_t* config) {
  logBuildOnce();
  auto run = [&]() -> Status {
    loom::UniqueId id;
    LOOM_TRY(loom::UniqueId::decode(uniqueId, &id));
    loom::CommConfig resolved;
    LOOM_TRY(loom::resolveConfig(config, nullptr, &resolved));
    return initRank(comm, nranks, id, rank, resolved);
  };
  return report(run(), nullptr, "loomCommInitRank");
}

LOOM_API loomResult_t loomCommInitRank(loomComm_t* comm, int nranks, loomUniqueId uniqueId, int rank) {
  return loomCommInitRankConfig(comm, nranks, uniqueId, rank, nullptr);
}

LOOM_API loomResult_t loomCommInitFromEnv(loomComm_t* comm, loomConfig_t* config) {
  logBuildOnce();
  auto run = [&]() -> Status {
    loom::LaunchEnv launch;
    LOOM_TRY(loom::readLaunchEnv(&launch));
    loom::log::RankScope scope(launch.rank);
    LOOM_INFO("loomCommInitFromEnv: rank %d of %d from %s, master %s:%d (port: %s), secret %s", launch.rank,
              launch.worldSize, launch.source.c_str(), launch.masterHost.c_str(), launch.masterPort,
              launch.portSource.c_str(),
              launch.secretDerived ? "derived from the master address (authenticates nothing; set LOOM_SECRET)"
                                   : "from LOOM_SECRET");
    loom::CommConfig resolved;
    LOOM_TRY(loom::resolveConfig(config, nullptr, &resolved));
    loom::UniqueId id;
    id.secret = launch.secret;
    LOOM_TRY(loom::SocketAddress::resolve(launch.masterHost, launch.masterPort, &id.root));
    // Rank 0 hosts the root for the length of init: it is the one rank sure to run on
    // the master host.
    std::unique_ptr<loom::BootstrapRoot> root;
    if (launch.rank == 0) {
      LOOM_TRY(loom::BootstrapRoot::start(id.root, id.secret, &root)
                   .withContext("rank 0 must run on the master host"));
    }
    return initRank(comm, launch.worldSize, id, launch.rank, resolved);
  };
  return report(run(), nullptr, "loomCommInitFromEnv");
}

LOOM_API loomResult_t loomCommInitAll(loomComm_t* comms, int ndev, const int* devlist) {
  logBuildOnce();
  auto run = [&]() -> Status {
    if (comms == nullptr) return loom::error(loomInvalidArgument, "comms is NULL");
    if (ndev < 1) return loom::error(loomInvalidArgument, "ndev %d must be at least 1", ndev);
    std::vector<loom::CommConfig> configs(static_cast<size_t>(ndev));
    for (int i = 0; i < ndev; ++i) {
      loomConfig_t c = LOOM_CONFIG_INITIALIZER;
      if (devlist != nullptr) c.device = devlist[i];
      LOOM_TRY(loom::resolveConfig(&c, nullptr, &configs[static_cast<size_t>(i)])
                   .withContext(loom::format("devlist[%d]", i)));
    }
    loomUniqueId raw;
    if (loomGetUniqueId(&raw) != loomSuccess) {
      return loom::error(loomSystemError, "%s", tLastError.c_str());
    }
    loom::UniqueId id;
    LOOM_TRY(loom::UniqueId::decode(raw, &id));
    std::vector<Status> results(static_cast<size_t>(ndev));
    std::vector<std::thread> threads;
    for (int i = 0; i < ndev; ++i) {
      threads.emplace_back([&, i] {
        results[static_cast<size_t>(i)] = initRank(&comms[i], ndev, id, i, configs[static_cast<size_t>(i)]);
      });
    }
    for (std::thread& t : threads) t.join();
    for (int i = 0; i < ndev; ++i) {
      if (!results[static_cast<size_t>(i)].isOk()) {
        for (int j = 0; j < ndev; ++j) {
          if (comms[j] != nullptr) (void)destroyComm(reinterpret_cast<Communicator*>(comms[j]));
          comms[j] = nullptr;
        }
        return results[static_cast<size_t>(i)].withContext(loom::format("rank %d", i));
      }
    }
    return Status::ok();
  };
  return report(run(), nullptr, "loomCommInitAll");
}

LOOM_API loomResult_t loomCommSplit(loomComm_t handle, int color, int key, loomComm_t* newcomm,
                                    loomConfig_t* config) {
  return withComm(handle, "loomCommSplit", [&](Communicator& comm) -> Status {
    if (newcomm == nullptr) return loom::error(loomInvalidArgument, "newcomm is NULL");
    *newcomm = nullptr;
    if (color < 0 && color != LOOM_SPLIT_NOCOLOR) {
      return loom::error(loomInvalidArgument, "color %d must be >= 0 or LOOM_SPLIT_NOCOLOR", color);
    }
    // A revoked communicator splits: that is what revoking it prepares.
    if (!comm.revoked()) LOOM_TRY(comm.usable());
    loom::CommConfig resolved;
    LOOM_TRY(loom::resolveConfig(config, &comm.config(), &resolved));
    std::unique_ptr<Communicator> child;
    Status s = comm.split(color, key, resolved, &child);
    if (!s.isOk()) {
      comm.fail(s);
      return s;
    }
    if (child) registerComm(std::move(child), newcomm);
    return Status::ok();
  });
}

namespace {
// loomCommShrink's arguments; *excluded gets the excluded ranks sorted, each in range, none
// repeated, this rank not among them.
Status checkShrink(const Communicator& comm, const int* excludeRanks, int excludeCount, loomComm_t* newcomm,
                   int flags, std::vector<int>* excluded) {
  if (newcomm == nullptr) return loom::error(loomInvalidArgument, "newcomm is NULL");
  *newcomm = nullptr;
  if (flags != LOOM_SHRINK_DEFAULT && flags != LOOM_SHRINK_ABORT) {
    return loom::error(loomInvalidArgument, "flags %d: LOOM_SHRINK_DEFAULT or LOOM_SHRINK_ABORT", flags);
  }
  if (excludeCount < 0) return loom::error(loomInvalidArgument, "excludeCount %d is negative", excludeCount);
  if (excludeCount > 0 && excludeRanks == nullptr) {
    return loom::error(loomInvalidArgument, "excludeRanks is NULL with excludeCount %d", excludeCount);
  }
  excluded->assign(excludeRanks, excludeRanks + excludeCount);
  std::sort(excluded->begin(), excluded->end());
  for (size_t i = 0; i < excluded->size(); ++i) {
    const int r = (*excluded)[i];
    if (r < 0 || r >= comm.nranks()) {
      return loom::error(loomInvalidArgument, "excluded rank %d is out of range [0, %d)", r, comm.nranks());
    }
    if (i > 0 && (*excluded)[i - 1] == r) return loom::error(loomInvalidArgument, "rank %d is excluded twice", r);
    if (r == comm.rank()) {
      return loom::error(loomInvalidArgument, "rank %d excludes itself (excluded ranks do not call)", r);
    }
  }
  return Status::ok();
}
}  // namespace

LOOM_API loomResult_t loomCommShrink(loomComm_t handle, const int* excludeRanks, int excludeCount,
                                     loomComm_t* newcomm, loomConfig_t* config, int flags) {
  std::vector<int> excluded;
  Communicator* found = nullptr;
  Status s = lookupComm(handle, &found);
  if (!s.isOk()) return report(s, nullptr, "loomCommShrink");
  s = checkShrink(*found, excludeRanks, excludeCount, newcomm, flags, &excluded);
  if (!s.isOk()) return report(s, found, "loomCommShrink");
  // Before the call counts as a use of comm: ending the calls in progress waits for all uses.
  if (flags == LOOM_SHRINK_ABORT) found->endCallsInProgress("loomCommShrink(LOOM_SHRINK_ABORT)");
  return withComm(handle, "loomCommShrink", [&](Communicator& comm) -> Status {
    // No usable() check: shrinking a communicator that lost a rank is what this call is for.
    loom::CommConfig resolved;
    LOOM_TRY(loom::resolveConfig(config, &comm.config(), &resolved));
    std::unique_ptr<Communicator> child;
    LOOM_TRY(comm.shrink(excluded, resolved, &child));
    registerComm(std::move(child), newcomm);
    return Status::ok();
  });
}

LOOM_API loomResult_t loomCommRevoke(loomComm_t handle, int flags) {
  Communicator* comm = nullptr;
  Status s = lookupComm(handle, &comm);
  if (!s.isOk()) return report(s, nullptr, "loomCommRevoke");
  if (flags != LOOM_REVOKE_DEFAULT) {
    return report(loom::error(loomInvalidArgument, "flags %d: LOOM_REVOKE_DEFAULT (0) is the only one", flags), comm,
                  "loomCommRevoke");
  }
  // Not counted as a use of comm: it waits until no call uses it.
  comm->revoke();
  return report(Status::ok(), comm, "loomCommRevoke");
}

LOOM_API loomResult_t loomCommDestroy(loomComm_t handle) {
  Communicator* comm = nullptr;
  Status s = lookupComm(handle, &comm);
  if (!s.isOk()) return report(s, nullptr, "loomCommDestroy");
  return report(destroyComm(comm), nullptr, "loomCommDestroy");
}

LOOM_API loomResult_t loomCommAbort(loomComm_t handle) {
  Communicator* comm = nullptr;
  Status s = lookupComm(handle, &comm);
  if (!s.isOk()) return report(s, nullptr, "loomCommAbort");
  comm->abort();
  return report(destroyComm(comm), nullptr, "loomCommAbort");
}

LOOM_API loomResult_t loomCommGetAsyncError(loomComm_t handle, loomResult_t* asyncError) {
  return withComm(handle, "loomCommGetAsyncError", [&](Communicator& comm) -> Status {
    if (asyncError == nullptr) return loom::error(loomInvalidArgument, "asyncError is NULL");
    *asyncError = comm.asyncError();
    return Status::ok();
  });
}

LOOM_API loomResult_t loomCommRegister(loomComm_t handle, void* buff, size_t size, void** registration) {
  return withComm(handle, "loomCommRegister", [&](Communicator& comm) -> Status {
    if (registration == nullptr) return loom::error(loomInvalidArgument, "handle is NULL");
    if (buff == nullptr || size == 0) {
      return loom::error(loomInvalidArgument, "buff %p, size %zu: nothing to register", buff, size);
    }
    return comm.addRegistration(buff, size, registration);
  });
}

LOOM_API loomResult_t loomCommDeregister(loomComm_t handle, void* registration) {
  return withComm(handle, "loomCommDeregister",
                  [&](Communicator& comm) -> Status { return comm.removeRegistration(registration); });
}

LOOM_API loomResult_t loomRedOpCreatePreMulSum(loomRedOp_t* op, void* scalar, loomDataType_t datatype,
                                               loomScalarResidence_t residence, loomComm_t handle) {
  return withComm(handle, "loomRedOpCreatePreMulSum", [&](Communicator& comm) -> Status {
    if (op == nullptr) return loom::error(loomInvalidArgument, "op is NULL");
    if (scalar == nullptr) return loom::error(loomInvalidArgument, "scalar is NULL");
    const int type = enumBits(datatype), where = enumBits(residence);
    if (type < 0 || type >= loomNumTypes) {
      return loom::error(loomInvalidArgument, "datatype %d is not a loomDataType_t (0..%d)", type, loomNumTypes - 1);
    }
    if (where != loomScalarDevice && where != loomScalarHostImmediate) {
      return loom::error(loomInvalidArgument,
                         "residence %d is neither loomScalarDevice (0) nor loomScalarHostImmediate (1)", where);
    }
    const auto t = static_cast<loomDataType_t>(type);
    if (comm.device() >= 0 && where == loomScalarDevice) {
      LOOM_TRY(comm.deviceComm().checkBuffer("scalar (loomScalarDevice)", scalar, loom::typeSize(t)));
    }
    int made = 0;
    LOOM_TRY(comm.preMulOps().create(t, scalar, where == loomScalarHostImmediate, &made));
    *op = static_cast<loomRedOp_t>(made);
    return Status::ok();
  });
}

LOOM_API loomResult_t loomRedOpDestroy(loomRedOp_t op, loomComm_t handle) {
  return withComm(handle, "loomRedOpDestroy",
                  [&](Communicator& comm) -> Status { return comm.preMulOps().destroy(enumBits(op)); });
}

LOOM_API loomResult_t loomMemAlloc(void** ptr, size_t size) {
  auto run = [&]() -> Status {
    if (ptr == nullptr) return loom::error(loomInvalidArgument, "ptr is NULL");
    *ptr = nullptr;
    if (size == 0) return loom::error(loomInvalidArgument, "size is 0");
    return Registry::instance().mappedAllocations().allocate(size, ptr);
  };
  return report(run(), nullptr, "loomMemAlloc");
}

LOOM_API loomResult_t loomMemFree(void* ptr) {
  if (ptr == nullptr) return loomSuccess;
  return report(Registry::instance().mappedAllocations().release(ptr), nullptr, "loomMemFree");
}

namespace {
template <typename T, typename Getter>
loomResult_t commQuery(loomComm_t handle, T* out, const char* call, Getter get) {
  return withComm(handle, call, [&](Communicator& comm) -> Status {
    if (out == nullptr) return loom::error(loomInvalidArgument, "output pointer is NULL");
    *out = get(comm);
    return Status::ok();
  });
}
}  // namespace

LOOM_API loomResult_t loomCommCount(const loomComm_t comm, int* count) {
  return commQuery(comm, count, "loomCommCount", [](Communicator& c) { return c.nranks(); });
}

LOOM_API loomResult_t loomCommUserRank(const loomComm_t comm, int* rank) {
  return commQuery(comm, rank, "loomCommUserRank", [](Communicator& c) { return c.rank(); });
}

LOOM_API loomResult_t loomCommDevice(const loomComm_t comm, int* device) {
  return commQuery(comm, device, "loomCommDevice", [](Communicator& c) { return c.device(); });
}

LOOM_API loomResult_t loomCommMappedMinBytes(const loomComm_t comm, size_t* bytes) {
  return commQuery(comm, bytes, "loomCommMappedMinBytes", [](Communicator& c) { return loom::mappedMinBytes(c); });
}

LOOM_API loomResult_t loomStreamCreate(loomStream_t* stream) {
  if (stream == nullptr) {
    return report(loom::error(loomInvalidArgument, "stream is NULL"), nullptr, "loomStreamCreate");
  }
  auto created = std::make_unique<HostStream>();
  Registry::instance().streams().add(created.get());
  *stream = created.release();
  return loomSuccess;
}

LOOM_API loomResult_t loomStreamSynchronize(loomStream_t handle) {
  HostStream* stream = nullptr;
  Status s = lookupStream(handle, &stream);
  if (s.isOk() && stream != nullptr) s = stream->synchronize();
  return report(s, nullptr, "loomStreamSynchronize");
}

LOOM_API loomResult_t loomStreamQuery(loomStream_t handle) {
  HostStream* stream = nullptr;
  Status s = lookupStream(handle, &stream);
  if (s.isOk() && stream != nullptr) s = stream->query();
  if (s.code() == loomInProgress) return loomInProgress;
  return report(s, nullptr, "loomStreamQuery");
}

LOOM_API loomResult_t loomStreamDestroy(loomStream_t handle) {
  HostStream* stream = nullptr;
  Status s = lookupStream(handle, &stream);
  if (s.isOk() && stream == nullptr) s = loom::error(loomInvalidArgument, "stream is NULL");
  if (!s.isOk()) return report(s, nullptr, "loomStreamDestroy");
  Registry::instance().streams().remove(stream);
  std::unique_ptr<HostStream> owned(stream);  // joins after running what is queued
  return loomSuccess;
}

LOOM_API loomResult_t loomGroupStart(void) {
  loom::group::start();
  return loomSuccess;
}

LOOM_API loomResult_t loomGroupEnd(void) {
  std::vector<Communicator*> failed;
  loomResult_t result = report(loom::group::end(&failed), nullptr, "loomGroupEnd");
  // loomGetLastError(comm) of every communicator in the group says why, too.
  if (result != loomSuccess) {
    for (Communicator* c : failed) {
      c->setLastError(tLastError);
      logRecentCalls(c);
    }
  }
  return result;
}

LOOM_API loomResult_t loomGroupSimulateEnd(double* estimatedUs) {
  if (estimatedUs == nullptr) {
    return report(loom::error(loomInvalidArgument, "estimatedUs is NULL (the group stays open)"), nullptr,
                  "loomGroupSimulateEnd");
  }
  return report(loom::group::simulateEnd(estimatedUs), nullptr, "loomGroupSimulateEnd");
}

namespace {
loomResult_t pointToPoint(loom::P2POp::Direction direction, void* buffer, size_t count,
                          int type, int peer, loomComm_t handle, loomStream_t streamHandle,
                          const char* call) {
  return withComm(handle, call, [&](Communicator& comm) -> Status {
    size_t bytes = 0;
    bool send = direction == loom::P2POp::Direction::kSend;
    LOOM_TRY(checkBuffer(send ? "sendbuff" : "recvbuff", buffer, count, type, &bytes));
    if (peer < 0 || peer >= comm.nranks()) {
      return loom::error(loomInvalidArgument, "peer %d is out of range [0, %d)", peer, comm.nranks());
    }
    HostStream* stream = nullptr;
    LOOM_TRY(resolveStream(comm, streamHandle, &stream));
    if (comm.device() >= 0) LOOM_TRY(comm.deviceComm().checkBuffer(send ? "sendbuff" : "recvbuff", buffer, bytes));
    LOOM_TRY(comm.usable());
    comm.callLog().recordPointToPoint(call, peer, bytes);
    return loom::group::submit(loom::P2POp{direction, &comm, peer, buffer, bytes}, stream, streamHandle);
  });
}
}  // namespace

LOOM_API loomResult_t loomSend(const void* sendbuff, size_t count, loomDataType_t datatype, int peer,
                               loomComm_t comm, loomStream_t stream) {
  return pointToPoint(loom::P2POp::Direction::kSend, const_cast<void*>(sendbuff), count,
                      enumBits(datatype), peer, comm, stream, "loomSend");
}

LOOM_API loomResult_t loomRecv(void* recvbuff, size_t count, loomDataType_t datatype, int peer,
                               loomComm_t comm, loomStream_t stream) {
  return pointToPoint(loom::P2POp::Direction::kRecv, recvbuff, count, enumBits(datatype), peer, comm,
                      stream, "loomRecv");
}

LOOM_API loomResult_t loomBarrier(loomComm_t handle, loomStream_t streamHandle) {
  return withComm(handle, "loomBarrier", [&](Communicator& comm) -> Status {
    if (loom::group::active()) {
      return loom::error(loomInvalidUsage, "loomBarrier cannot be called inside a loomGroupStart/End group");
    }
    HostStream* stream = nullptr;
    LOOM_TRY(resolveStream(comm, streamHandle, &stream));
    LOOM_TRY(comm.usable());
    comm.callLog().recordBarrier();
    if (comm.device() >= 0) {
      std::vector<loom::DeviceJob> jobs{{&comm, {}, true, stream, stream == nullptr ? streamHandle : nullptr}};
      return loom::launchDeviceJobs(jobs);
    }
    Communicator* c = &comm;
    return enqueueOrRun(c, stream, [c] { return loom::runBarrier(*c); });
  });
}

namespace {

using loom::CallInfo;

// Whether [a, a + aBytes) and [b, b + bBytes) share a byte.
bool overlap(const void* a, size_t aBytes, const void* b, size_t bBytes) {
  auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return aBytes > 0 && bBytes > 0 && x < y + bBytes && y < x + aBytes;
}

// The checks every collective shares, then the call itself: recorded in a group, run now, or
// queued on a host stream. sendElems / recvElems: what each buffer holds on this rank
// (0 where the buffer is not used here); inPlaceSend: where sendbuff must sit inside
// recvbuff for the call to count as in place (nullptr: only send == recv).
loomResult_t collective(CallInfo::Kind kind, const char* call, const void* sendbuff, void* recvbuff,
                        size_t count, int type, int op, int root, loomComm_t handle, loomStream_t streamHandle) {
  return withComm(handle, call, [&](Communicator& comm) -> Status {
    // Made where submit reads it: a whole copy of a struct whose narrow fields were just stored
    // waits for those stores to reach the cache (four such copies were a fifth of the work
    // of a small call on the board).
    loom::group::Call submitted(std::in_place_type<loom::CollectiveCall>);
    auto& made = std::get<loom::CollectiveCall>(submitted);
    CallInfo& info = made.info;
    const int n = comm.nranks(), rank = comm.rank();
    if (type < 0 || type >= loomNumTypes) {
      return loom::error(loomInvalidArgument, "datatype %d is not a loomDataType_t (0..%d)", type, loomNumTypes - 1);
    }
    bool reduces = kind == CallInfo::Kind::kAllReduce || kind == CallInfo::Kind::kReduce ||
                   kind == CallInfo::Kind::kReduceScatter;
    if (reduces && op < 0) {
      return loom::error(loomInvalidArgument, "op %d is not a loomRedOp_t (0..%d)", op, loomNumOps - 1);
    }
    if (reduces && op >= loomNumOps) {
      LOOM_TRY(comm.preMulOps().find(op, static_cast<loomDataType_t>(type), &info.preMul));
    }
    bool rooted = kind == CallInfo::Kind::kBroadcast || kind == CallInfo::Kind::kReduce;
    if (rooted && (root < 0 || root >= n)) {
      return loom::error(loomInvalidArgument, "root %d is out of range [0, %d)", root, n);
    }
    // Elements in each buffer on this rank, and where in place puts sendbuff.
    size_t elem = loom::typeSize(static_cast<loomDataType_t>(type));
    bool wide = kind == CallInfo::Kind::kAllGather || kind == CallInfo::Kind::kReduceScatter ||
                kind == CallInfo::Kind::kAllToAll;
    size_t wideBytes = 0;
    if (wide && (__builtin_mul_overflow(count, elem, &wideBytes) ||
                 __builtin_mul_overflow(wideBytes, static_cast<size_t>(n), &wideBytes))) {
      return loom::error(loomInvalidArgument, "count %zu x %d ranks of %zu-byte elements overflows size_t", count, n,
                         elem);
    }
    size_t sendElems = 0, recvElems = 0;
    loom::bufferElems(kind, count, rank, root, n, &sendElems, &recvElems);
    const char* inPlaceAt = static_cast<const char*>(recvbuff);
    if (kind == CallInfo::Kind::kAllGather && recvbuff != nullptr) {
      inPlaceAt = static_cast<const char*>(recvbuff) + static_cast<size_t>(rank) * count * elem;
    } else if (kind == CallInfo::Kind::kAllToAll) {
      inPlaceAt = nullptr;
    }
    size_t sendBytes = 0, recvBytes = 0;
    LOOM_TRY(checkBuffer("sendbuff", sendbuff, sendElems, type, &sendBytes));
    LOOM_TRY(checkBuffer("recvbuff", recvbuff, recvElems, type, &recvBytes));
    bool inPlace;
    if (kind == CallInfo::Kind::kReduceScatter) {
      inPlace = sendbuff != nullptr &&
                recvbuff == static_cast<const char*>(sendbuff) + static_cast<size_t>(rank) * count * elem;
    } else {
      inPlace = inPlaceAt != nullptr && sendbuff == inPlaceAt;
    }
    if (!inPlace && overlap(sendbuff, sendBytes, recvbuff, recvBytes)) {
      return loom::error(loomInvalidArgument,
                         "sendbuff %p (%zu bytes) and recvbuff %p (%zu bytes) overlap without being in place%s",
                         sendbuff, sendBytes, recvbuff, recvBytes,
                         kind == CallInfo::Kind::kAllToAll ? " (all-to-all has no in-place form)" : "");
    }
    HostStream* stream = nullptr;
    LOOM_TRY(resolveStream(comm, streamHandle, &stream));
    if (comm.device() >= 0) {
      LOOM_TRY(comm.deviceComm().checkBuffer("sendbuff", sendbuff, sendBytes));
      LOOM_TRY(comm.deviceComm().checkBuffer("recvbuff", recvbuff, recvBytes));
      if (reduces) LOOM_TRY(comm.deviceComm().checkReduction(static_cast<loomDataType_t>(type)));
    }
    LOOM_TRY(comm.usable());
    made.comm = &comm;
    made.send = sendbuff;
    made.recv = recvbuff;
    info.kind = kind;
    info.type = static_cast<loomDataType_t>(type);
    info.op = reduces && !info.preMul.on ? static_cast<loomRedOp_t>(op) : loomSum;
    info.root = rooted ? root : -1;
    info.count = count;
    info.inPlace = inPlace;
    info.seq = comm.callLog().recordCollective(info);
    return loom::group::submit(submitted, stream, streamHandle);
  });
}

}  // namespace

LOOM_API loomResult_t loomAllReduce(const void* sendbuff, void* recvbuff, size_t count, loomDataType_t datatype,
                                    loomRedOp_t op, loomComm_t comm, loomStream_t stream) {
  return collective(CallInfo::Kind::kAllReduce, "loomAllReduce", sendbuff, recvbuff, count, enumBits(datatype),
                    enumBits(op), 0, comm, stream);
}

LOOM_API loomResult_t loomBroadcast(const void* sendbuff, void* recvbuff, size_t count, loomDataType_t datatype,
                                    int root, loomComm_t comm, loomStream_t stream) {
  return collective(CallInfo::Kind::kBroadcast, "loomBroadcast", sendbuff, recvbuff, count, enumBits(datatype), 0,
                    root, comm, stream);
}

LOOM_API loomResult_t loomReduce(const void* sendbuff, void* recvbuff, size_t count, loomDataType_t datatype,
                                 loomRedOp_t op, int root, loomComm_t comm, loomStream_t stream) {
  return collective(CallInfo::Kind::kReduce, "loomReduce", sendbuff, recvbuff, count, enumBits(datatype),
                    enumBits(op), root, comm, stream);
}

LOOM_API loomResult_t loomAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, loomDataType_t datatype,
                                    loomComm_t comm, loomStream_t stream) {
  return collective(CallInfo::Kind::kAllGather, "loomAllGather", sendbuff, recvbuff, sendcount, enumBits(datatype),
                    0, 0, comm, stream);
}

LOOM_API loomResult_t loomReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                        loomDataType_t datatype, loomRedOp_t op, loomComm_t comm,
                                        loomStream_t stream) {
  return collective(CallInfo::Kind::kReduceScatter, "loomReduceScatter", sendbuff, recvbuff, recvcount,
                    enumBits(datatype), enumBits(op), 0, comm, stream);
}

LOOM_API loomResult_t loomAllToAll(const void* sendbuff, void* recvbuff, size_t count, loomDataType_t datatype,
                                   loomComm_t comm, loomStream_t stream) {
  return collective(CallInfo::Kind::kAllToAll, "loomAllToAll", sendbuff, recvbuff, count, enumBits(datatype), 0, 0,
                    comm, stream);
}

namespace loom {

Status initRank(loomComm_t* out, int nranks, const UniqueId& id, int rank,
                const CommConfig& config) {
  if (out == nullptr) return error(loomInvalidArgument, "comm (the output pointer) is NULL");
  *out = nullptr;
  if (nranks < 1) return error(loomInvalidArgument, "nranks %d must be at least 1", nranks);
  if (rank < 0 || rank >= nranks) {
    return error(loomInvalidArgument, "rank %d is out of range [0, %d)", rank, nranks);
  }
  log::RankScope scope(rank);
  std::unique_ptr<Communicator> comm;
  Status s = Communicator::create(id, rank, nranks, config, &comm);
  Registry::instance().reapRoots();
  LOOM_TRY(s);
  registerComm(std::move(comm), out);
  return Status::ok();
}

Status lookupComm(const void* handle, Communicator** out) {
  if (handle == nullptr) return loom::error(loomInvalidArgument, "comm is NULL");
  if (!Registry::instance().comms().contains(handle)) {
    return loom::error(loomInvalidUsage, "comm %p is not a live communicator (destroyed, or never created)",
                       handle);
  }
  *out = static_cast<Communicator*>(const_cast<void*>(handle));
  return Status::ok();
}

}  // namespace loom
