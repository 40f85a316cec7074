// libnccl.so.2: every function of CUDA's nccl.h (NCCL 2.28), served by Loom. The header
// itself is included, so the compiler holds each definition to NCCL's declaration.
//
// Buffers follow the communicator: one made where a CUDA device exists is a device
// communicator on the current device (as NCCL's); one made where none exists is a host
// communicator, whose calls take host buffers and a NULL stream and return when done
// (docs/COMPAT_NCCL.md). What Loom cannot serve returns ncclInvalidUsage with a message.
#include <nccl.h>

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "algorithms/plan.h"
#include "base/log.h"
#include "base/status.h"
#include "compat/nccl/cuda_memory.h"
#include "compat/nccl/nccl_environment.h"
#include "compat/nccl/shim_comm.h"
#include "loom/loom.h"

static_assert(sizeof(ncclUniqueId) == sizeof(loomUniqueId), "unique ids travel unchanged");
static_assert(static_cast<int>(ncclNumOps) == static_cast<int>(loomNumOps), "built-in ops are Loom's");
static_assert(static_cast<int>(ncclBfloat16) == static_cast<int>(loomBfloat16) &&
                  static_cast<int>(ncclFloat8e4m3) == static_cast<int>(loomFloat8e4m3) &&
                  static_cast<int>(ncclNumTypes) == static_cast<int>(loomNumTypes),
              "NCCL's types are Loom's");

#define NCCL_API extern "C" __attribute__((visibility("default")))

namespace {

using loom::Status;
using loom::nccl::CommUse;
using loom::nccl::currentDevice;
using loom::nccl::ShimRegistry;

thread_local std::string tLastError;

// Calls between ncclGroupStart and ncclGroupEnd on this thread, and the communicators
// created inside the group (NCCL lets one thread create several ranks that way; each is
// created on its own thread and ncclGroupEnd waits for all).
thread_local int tGroupDepth = 0;
thread_local std::vector<ncclComm*> tGroupInits;

// Loom's results are NCCL's numbers; a deadline that passed is a peer that did not answer.
ncclResult_t toNccl(loomResult_t code) {
  return code == loomTimeout ? ncclRemoteError : static_cast<ncclResult_t>(code);
}

// A C caller may pass any int where an enum is expected; read the bits, not the enum.
template <typename Enum>
int enumBits(const Enum& value) {
  static_assert(sizeof(Enum) == sizeof(int));
  int bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

// The message Loom recorded for the call that just failed on this thread.
Status fromLoom(loomResult_t code) {
  return code == loomSuccess ? Status::ok() : Status(code, loomGetLastError(nullptr));
}

ncclResult_t report(const Status& s, ncclComm* comm, const char* call) {
  if (s.isOk()) return ncclSuccess;
  tLastError = std::string(call) + ": " + s.message();
  if (comm != nullptr) comm->setLastError(tLastError);
  LOOM_WARN("%s (%s)", tLastError.c_str(), loomGetErrorString(s.code()));
  return toNccl(s.code());
}

// The frame of every call on a communicator: the environment translated, the handle
// checked and held while the call runs, the error recorded for ncclGetLastError.
template <typename Body>
ncclResult_t withComm(ncclComm_t comm, const char* call, Body body) {
  loom::nccl::applyNcclEnvironment();
  if (comm == nullptr) return report(loom::error(loomInvalidArgument, "comm is NULL"), nullptr, call);
  if (!ShimRegistry::instance().acquire(comm)) {
    return report(loom::error(loomInvalidUsage, "comm %p is not a live communicator (destroyed, or never created)",
                              static_cast<void*>(comm)),
                  nullptr, call);
  }
  CommUse use(comm);
  return report(body(*comm), comm, call);
}

// Whether the communicator may run calls: created, and (for collectives) not finalized.
Status ready(const ncclComm& comm, bool forCollective = false) {
  const loomResult_t state = comm.initState();
  if (state == loomInProgress) {
    return loom::error(loomInvalidUsage,
                       "the communicator is still being created (non-blocking): poll ncclCommGetAsyncError until "
                       "it returns ncclSuccess");
  }
  if (state != loomSuccess) {
    return loom::error(state, "the creation of this communicator failed: %s",
                       const_cast<ncclComm&>(comm).lastError());
  }
  if (forCollective && comm.finalized()) {
    return loom::error(loomInvalidUsage, "the communicator was finalized (ncclCommFinalize); only Destroy remains");
  }
  return Status::ok();
}

// A host communicator's calls complete before they return; it has no stream to order on.
Status checkStream(const ncclComm& comm, cudaStream_t stream) {
  if (comm.device() < 0 && stream != nullptr) {
    return loom::error(loomInvalidArgument,
                       "stream %p: this communicator has no CUDA device (host buffers), so its calls take a NULL "
                       "stream and complete before they return",
                       static_cast<void*>(stream));
  }
  return Status::ok();
}

Status checkCollective(const ncclComm& comm, cudaStream_t stream) {
  LOOM_TRY(ready(comm, true));
  return checkStream(comm, stream);
}

int countOf(const ncclComm& comm) {
  int n = 0;
  (void)loomCommCount(comm.loom(), &n);
  return n;
}

int rankOf(const ncclComm& comm) {
  int r = 0;
  (void)loomCommUserRank(comm.loom(), &r);
  return r;
}

Status checkRoot(const ncclComm& comm, int root) {
  const int n = countOf(comm);
  if (root < 0 || root >= n) return loom::error(loomInvalidArgument, "root %d is out of range [0, %d)", root, n);
  return Status::ok();
}

// Sends and receives launched together, as Gather and Scatter are made of. Every call is
// made even after one fails, so the group always closes; the first failure is returned.
class P2PGroup {
 public:
  P2PGroup() { first_ = loomGroupStart(); }
  void send(const void* buf, size_t count, const ncclDataType_t& type, int peer, loomComm_t comm, cudaStream_t stream) {
    keep(loomSend(buf, count, static_cast<loomDataType_t>(enumBits(type)), peer, comm, stream));
  }
  void recv(void* buf, size_t count, const ncclDataType_t& type, int peer, loomComm_t comm, cudaStream_t stream) {
    keep(loomRecv(buf, count, static_cast<loomDataType_t>(enumBits(type)), peer, comm, stream));
  }
  Status end() {
    if (first_ != loomSuccess) {
      Status failed = fromLoom(first_);
      (void)loomGroupEnd();
      return failed;
    }
    return fromLoom(loomGroupEnd());
  }

 private:
  void keep(loomResult_t r) {
    if (first_ == loomSuccess) first_ = r;
  }
  loomResult_t first_;
};

// ncclConfig_t as far as its `size` says the caller's version has it: NCCL's rule, so a
// program built against an older nccl.h passes its smaller struct.
struct SharedConfig {
  bool blocking = true;
  std::string commName;
};

#define NCCL_CONFIG_HAS(config, field) \
  ((config)->size >= offsetof(ncclConfig_t, field) + sizeof((config)->field))

Status readConfig(const ncclConfig_t* config, SharedConfig* out) {
  if (config == nullptr) return Status::ok();
  if (config->magic != 0xcafebeef || config->size < offsetof(ncclConfig_t, blocking) + sizeof(int)) {
    return loom::error(loomInvalidArgument,
                       "config was not initialised with NCCL_CONFIG_INITIALIZER (magic %#x, size %zu)",
                       config->magic, config->size);
  }
  if (config->blocking != NCCL_CONFIG_UNDEF_INT) out->blocking = config->blocking != 0;
  if (NCCL_CONFIG_HAS(config, commName) && config->commName != nullptr) out->commName = config->commName;
  return Status::ok();
}

// Creates one rank of a communicator into a new shim communicator. Non-blocking (config's
// blocking = 0, or inside a group) returns loomInProgress with *out set.
Status createRank(ncclComm_t* out, int nranks, const ncclUniqueId& id, int rank, const ncclConfig_t* config) {
  if (out == nullptr) return loom::error(loomInvalidArgument, "comm (the output pointer) is NULL");
  *out = nullptr;
  SharedConfig shared;
  LOOM_TRY(readConfig(config, &shared));
  loomUniqueId loomId;
  std::memcpy(&loomId, &id, sizeof loomId);
  ncclComm* comm = ShimRegistry::instance().create();
  comm->setDevice(currentDevice());
  const bool blocking = shared.blocking && tGroupDepth == 0;
  const int device = comm->device();
  const loomResult_t result =
      comm->init(blocking, [nranks, loomId, rank, device, name = shared.commName](loomComm_t* created) {
        loomConfig_t c = LOOM_CONFIG_INITIALIZER;
        c.device = device;
        c.commName = name.empty() ? nullptr : name.c_str();
        return loomCommInitRankConfig(created, nranks, loomId, rank, &c);
      });
  if (result != loomSuccess && result != loomInProgress) {
    Status failed = fromLoom(result);
    ShimRegistry::instance().remove(comm);
    return failed;
  }
  *out = comm;
  if (result == loomInProgress && tGroupDepth > 0) {
    // As in NCCL, a blocking communicator created inside a group is ready at ncclGroupEnd,
    // which waits for it; this call has succeeded.
    tGroupInits.push_back(comm);
    if (shared.blocking) return Status::ok();
  }
  return Status(result, result == loomInProgress ? "the communicator is being created" : "");
}

ncclResult_t reportCreate(const Status& s, ncclComm_t comm, const char* call) {
  return s.code() == loomInProgress ? ncclInProgress : report(s, comm, call);
}

}  // namespace

// ---- Version, ids, errors ----------------------------------------------------------------

NCCL_API ncclResult_t ncclGetVersion(int* version) {
  loom::nccl::applyNcclEnvironment();
  if (version == nullptr) return report(loom::error(loomInvalidArgument, "version is NULL"), nullptr, "ncclGetVersion");
  *version = NCCL_VERSION_CODE;  // the ABI implemented, not Loom's own version
  return ncclSuccess;
}

NCCL_API ncclResult_t ncclGetUniqueId(ncclUniqueId* uniqueId) {
  loom::nccl::applyNcclEnvironment();
  if (uniqueId == nullptr) {
    return report(loom::error(loomInvalidArgument, "uniqueId is NULL"), nullptr, "ncclGetUniqueId");
  }
  return report(fromLoom(loomGetUniqueId(reinterpret_cast<loomUniqueId*>(uniqueId))), nullptr, "ncclGetUniqueId");
}

NCCL_API const char* ncclGetErrorString(ncclResult_t result) {
  const int bits = enumBits(result);
  return bits >= 0 && bits < ncclNumResults ? loomGetErrorString(static_cast<loomResult_t>(bits))
                                            : "unknown result code";
}

NCCL_API const char* ncclGetLastError(ncclComm_t comm) {
  if (comm != nullptr && ShimRegistry::instance().acquire(comm)) {
    CommUse use(comm);
    return comm->lastError();
  }
  return tLastError.c_str();
}

// Deprecated in NCCL and without meaning here: Loom reads LOOM_DEBUG at its first log line.
NCCL_API void ncclResetDebugInit() {}

// ---- Communicators -----------------------------------------------------------------------

NCCL_API ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank,
                                             ncclConfig_t* config) {
  loom::nccl::applyNcclEnvironment();
  Status s = createRank(comm, nranks, commId, rank, config);
  return reportCreate(s, comm != nullptr ? *comm : nullptr, "ncclCommInitRankConfig");
}

NCCL_API ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) {
  loom::nccl::applyNcclEnvironment();
  Status s = createRank(comm, nranks, commId, rank, nullptr);
  return reportCreate(s, comm != nullptr ? *comm : nullptr, "ncclCommInitRank");
}

// Every rank holds all nId ids; the first one's root serves them all (the others' roots,
// if their processes made them, give up at the init deadline unused).
NCCL_API ncclResult_t ncclCommInitRankScalable(ncclComm_t* newcomm, int nranks, int myrank, int nId,
                                               ncclUniqueId* commIds, ncclConfig_t* config) {
  loom::nccl::applyNcclEnvironment();
  if (nId < 1 || commIds == nullptr) {
    return report(loom::error(loomInvalidArgument, "nId %d must be at least 1 and commIds not NULL", nId), nullptr,
                  "ncclCommInitRankScalable");
  }
  Status s = createRank(newcomm, nranks, commIds[0], myrank, config);
  return reportCreate(s, newcomm != nullptr ? *newcomm : nullptr, "ncclCommInitRankScalable");
}

NCCL_API ncclResult_t ncclCommInitAll(ncclComm_t* comms, int ndev, const int* devlist) {
  loom::nccl::applyNcclEnvironment();
  auto run = [&]() -> Status {
    if (comms == nullptr) return loom::error(loomInvalidArgument, "comms is NULL");
    if (ndev < 1) return loom::error(loomInvalidArgument, "ndev %d must be at least 1", ndev);
    // NCCL's NULL devlist means devices 0..ndev-1; with no device, host communicators.
    std::vector<int> devices;
    if (devlist == nullptr && currentDevice() >= 0) {
      for (int i = 0; i < ndev; ++i) devices.push_back(i);
      devlist = devices.data();
    }
    std::vector<loomComm_t> created(static_cast<size_t>(ndev), nullptr);
    LOOM_TRY(fromLoom(loomCommInitAll(created.data(), ndev, devlist)));
    for (int i = 0; i < ndev; ++i) {
      ncclComm* comm = ShimRegistry::instance().create();
      int device = -1;
      (void)loomCommDevice(created[static_cast<size_t>(i)], &device);
      comm->setDevice(device);
      (void)comm->init(true, [handle = created[static_cast<size_t>(i)]](loomComm_t* out) {
        *out = handle;
        return loomSuccess;
      });
      comms[i] = comm;
    }
    return Status::ok();
  };
  return report(run(), nullptr, "ncclCommInitAll");
}

// Runs to completion even on a non-blocking communicator (NCCL allows ncclSuccess there).
// Split and shrink: make(parent, config, &child) makes the Loom child with the parent's device
// and the name in NCCL's config; the child is wrapped as an NCCL communicator (none for
// NCCL_SPLIT_NOCOLOR).
template <class Make>
ncclResult_t makeChild(ncclComm_t comm, const char* call, ncclComm_t* newcomm, ncclConfig_t* config, Make make) {
  return withComm(comm, call, [&](ncclComm& parent) -> Status {
    LOOM_TRY(ready(parent, true));
    if (newcomm == nullptr) return loom::error(loomInvalidArgument, "newcomm is NULL");
    *newcomm = nullptr;
    SharedConfig shared;
    LOOM_TRY(readConfig(config, &shared));
    loomConfig_t c = LOOM_CONFIG_INITIALIZER;
    c.device = parent.device();
    c.commName = shared.commName.empty() ? nullptr : shared.commName.c_str();
    loomComm_t child = nullptr;
    LOOM_TRY(fromLoom(make(parent.loom(), &c, &child)));
    if (child == nullptr) return Status::ok();
    ncclComm* wrapped = ShimRegistry::instance().create();
    wrapped->setDevice(parent.device());
    (void)wrapped->init(true, [child](loomComm_t* out) {
      *out = child;
      return loomSuccess;
    });
    *newcomm = wrapped;
    return Status::ok();
  });
}

NCCL_API ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                                    ncclConfig_t* config) {
  return makeChild(comm, "ncclCommSplit", newcomm, config, [&](loomComm_t parent, loomConfig_t* c, loomComm_t* child) {
    return loomCommSplit(parent, color, key, child, c);
  });
}

// NCCL_SHRINK_ABORT is LOOM_SHRINK_ABORT: the calls in progress on comm end first.
NCCL_API ncclResult_t ncclCommShrink(ncclComm_t comm, int* excludeRanksList, int excludeRanksCount,
                                     ncclComm_t* newcomm, ncclConfig_t* config, int shrinkFlags) {
  static_assert(NCCL_SHRINK_DEFAULT == LOOM_SHRINK_DEFAULT && NCCL_SHRINK_ABORT == LOOM_SHRINK_ABORT);
  return makeChild(comm, "ncclCommShrink", newcomm, config, [&](loomComm_t parent, loomConfig_t* c, loomComm_t* child) {
    return loomCommShrink(parent, excludeRanksList, excludeRanksCount, child, c, shrinkFlags);
  });
}

static_assert(NCCL_REVOKE_DEFAULT == LOOM_REVOKE_DEFAULT, "revoke flags are Loom's");

NCCL_API ncclResult_t ncclCommRevoke(ncclComm_t comm, int revokeFlags) {
  return withComm(comm, "ncclCommRevoke", [&](ncclComm& c) -> Status {
    LOOM_TRY(ready(c));
    LOOM_TRY(fromLoom(loomCommRevoke(c.loom(), revokeFlags)));
    c.revoke();
    return Status::ok();
  });
}

// Host calls have completed when they return and device calls are ordered on the caller's
// streams, so nothing is left to flush: later collectives are refused.
NCCL_API ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  return withComm(comm, "ncclCommFinalize", [&](ncclComm& c) -> Status {
    LOOM_TRY(ready(c));
    if (c.revoked()) {
      return loom::error(loomInvalidUsage, "the communicator was revoked (ncclCommRevoke): finalizing it is invalid");
    }
    c.finalize();
    return Status::ok();
  });
}

namespace {

ncclResult_t endComm(ncclComm_t comm, bool abort, const char* call) {
  loom::nccl::applyNcclEnvironment();
  if (comm == nullptr) return ncclSuccess;  // as NCCL
  if (!ShimRegistry::instance().acquire(comm)) {
    return report(loom::error(loomInvalidUsage, "comm %p is not a live communicator (destroyed, or never created)",
                              static_cast<void*>(comm)),
                  nullptr, call);
  }
  Status s;
  {
    CommUse use(comm);
    s = fromLoom(comm->destroy(abort));
  }
  ShimRegistry::instance().remove(comm);
  return report(s, nullptr, call);
}

}  // namespace

NCCL_API ncclResult_t ncclCommDestroy(ncclComm_t comm) { return endComm(comm, false, "ncclCommDestroy"); }

NCCL_API ncclResult_t ncclCommAbort(ncclComm_t comm) { return endComm(comm, true, "ncclCommAbort"); }

NCCL_API ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) {
  return withComm(comm, "ncclCommGetAsyncError", [&](ncclComm& c) -> Status {
    if (asyncError == nullptr) return loom::error(loomInvalidArgument, "asyncError is NULL");
    const loomResult_t state = c.initState();
    if (state != loomSuccess) {
      *asyncError = toNccl(state);  // ncclInProgress while a non-blocking creation runs
      return Status::ok();
    }
    loomResult_t loomError = loomSuccess;
    LOOM_TRY(fromLoom(loomCommGetAsyncError(c.loom(), &loomError)));
    *asyncError = toNccl(loomError);
    return Status::ok();
  });
}

NCCL_API ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  return withComm(comm, "ncclCommCount", [&](ncclComm& c) -> Status {
    LOOM_TRY(ready(c));
    return fromLoom(loomCommCount(c.loom(), count));
  });
}

// -1 for a host communicator (made where CUDA found no device).
NCCL_API ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device) {
  return withComm(comm, "ncclCommCuDevice", [&](ncclComm& c) -> Status {
    LOOM_TRY(ready(c));
    return fromLoom(loomCommDevice(c.loom(), device));
  });
}

NCCL_API ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  return withComm(comm, "ncclCommUserRank", [&](ncclComm& c) -> Status {
    LOOM_TRY(ready(c));
    return fromLoom(loomCommUserRank(c.loom(), rank));
  });
}

// ---- Memory and registration -------------------------------------------------------------

// Device memory where CUDA has a device; page-aligned host memory where it has none (the
// memory a host communicator works on).
NCCL_API ncclResult_t ncclMemAlloc(void** ptr, size_t size) {
  loom::nccl::applyNcclEnvironment();
  auto run = [&]() -> Status {
    if (ptr == nullptr) return loom::error(loomInvalidArgument, "ptr is NULL");
    *ptr = nullptr;
    if (size == 0) return loom::error(loomInvalidArgument, "size is 0");
    return loom::nccl::allocate(ptr, size);
  };
  return report(run(), nullptr, "ncclMemAlloc");
}

NCCL_API ncclResult_t ncclMemFree(void* ptr) {
  loom::nccl::applyNcclEnvironment();
  if (ptr == nullptr) return ncclSuccess;
  return report(loom::nccl::release(ptr), nullptr, "ncclMemFree");
}

// Loom's registrations: the network transport registers the buffer once where its wire needs
// it (UCX), and calls inside it use that.
NCCL_API ncclResult_t ncclCommRegister(const ncclComm_t comm, void* buff, size_t size, void** handle) {
  return withComm(comm, "ncclCommRegister", [&](ncclComm& c) -> Status {
    LOOM_TRY(ready(c));
    return fromLoom(loomCommRegister(c.loom(), buff, size, handle));
  });
}

NCCL_API ncclResult_t ncclCommDeregister(const ncclComm_t comm, void* handle) {
  return withComm(comm, "ncclCommDeregister", [&](ncclComm& c) -> Status {
    LOOM_TRY(ready(c));
    return fromLoom(loomCommDeregister(c.loom(), handle));
  });
}

// A window is a registration: Loom has no symmetric kernels for NCCL_WIN_COLL_SYMMETRIC to
// select, and collectives on the window's memory run as on any other (NCCL itself registers
// nothing, and returns a NULL window, on a communicator without symmetric support).
NCCL_API ncclResult_t ncclCommWindowRegister(ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win,
                                             int winFlags) {
  if (win != nullptr) *win = nullptr;
  return withComm(comm, "ncclCommWindowRegister", [&](ncclComm& c) -> Status {
    LOOM_TRY(ready(c));
    if (win == nullptr) return loom::error(loomInvalidArgument, "win is NULL");
    if ((winFlags & ~NCCL_WIN_COLL_SYMMETRIC) != 0) {
      return loom::error(loomInvalidArgument, "winFlags %#x: NCCL_WIN_DEFAULT or NCCL_WIN_COLL_SYMMETRIC", winFlags);
    }
    void* handle = nullptr;
    LOOM_TRY(fromLoom(loomCommRegister(c.loom(), buff, size, &handle)));
    *win = static_cast<ncclWindow_t>(handle);
    return Status::ok();
  });
}

NCCL_API ncclResult_t ncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win) {
  return withComm(comm, "ncclCommWindowDeregister", [&](ncclComm& c) -> Status {
    LOOM_TRY(ready(c));
    if (win == nullptr) return Status::ok();  // as NCCL: the window a comm without symmetric support gives
    return fromLoom(loomCommDeregister(c.loom(), win));
  });
}

// ---- Reduction operations ----------------------------------------------------------------

// Loom numbers its premultiplied-sum ops as NCCL does (from ncclNumOps, per communicator), so
// they pass through the collectives unchanged.
static_assert(static_cast<int>(ncclScalarDevice) == static_cast<int>(loomScalarDevice) &&
                  static_cast<int>(ncclScalarHostImmediate) == static_cast<int>(loomScalarHostImmediate),
              "scalar residences are Loom's");

NCCL_API ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar, ncclDataType_t datatype,
                                               ncclScalarResidence_t residence, ncclComm_t comm) {
  return withComm(comm, "ncclRedOpCreatePreMulSum", [&](ncclComm& c) -> Status {
    LOOM_TRY(ready(c));
    if (op == nullptr) return loom::error(loomInvalidArgument, "op is NULL");
    loomRedOp_t created = loomSum;
    LOOM_TRY(fromLoom(loomRedOpCreatePreMulSum(&created, scalar, static_cast<loomDataType_t>(enumBits(datatype)),
                                               static_cast<loomScalarResidence_t>(enumBits(residence)), c.loom())));
    const ncclRedOp_t value = static_cast<ncclRedOp_t>(enumBits(created));
    std::memcpy(op, &value, sizeof value);
    return Status::ok();
  });
}

NCCL_API ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm) {
  return withComm(comm, "ncclRedOpDestroy", [&](ncclComm& c) -> Status {
    const int bits = enumBits(op);
    if (bits >= 0 && bits < ncclNumOps) {
      return loom::error(loomInvalidArgument, "op %d is a built-in ncclRedOp_t, not a created one", bits);
    }
    return fromLoom(loomRedOpDestroy(static_cast<loomRedOp_t>(bits), c.loom()));
  });
}

// ---- Collectives -------------------------------------------------------------------------

namespace {

// Enum parameters travel by reference and are read as bits: a C caller may pass any int, and
// loading an enum object that holds a value outside its enumerators is undefined.
loomDataType_t loomType(const ncclDataType_t& type) { return static_cast<loomDataType_t>(enumBits(type)); }
loomRedOp_t loomOp(const ncclRedOp_t& op) { return static_cast<loomRedOp_t>(enumBits(op)); }

}  // namespace

NCCL_API ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                    ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  return withComm(comm, "ncclAllReduce", [&](ncclComm& c) -> Status {
    LOOM_TRY(checkCollective(c, stream));
    return fromLoom(loomAllReduce(sendbuff, recvbuff, count, loomType(datatype), loomOp(op), c.loom(), stream));
  });
}

NCCL_API ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                 ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream) {
  return withComm(comm, "ncclReduce", [&](ncclComm& c) -> Status {
    LOOM_TRY(checkCollective(c, stream));
    return fromLoom(loomReduce(sendbuff, recvbuff, count, loomType(datatype), loomOp(op), root, c.loom(), stream));
  });
}

NCCL_API ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                        ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                        cudaStream_t stream) {
  return withComm(comm, "ncclReduceScatter", [&](ncclComm& c) -> Status {
    LOOM_TRY(checkCollective(c, stream));
    return fromLoom(
        loomReduceScatter(sendbuff, recvbuff, recvcount, loomType(datatype), loomOp(op), c.loom(), stream));
  });
}

NCCL_API ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                    int root, ncclComm_t comm, cudaStream_t stream) {
  return withComm(comm, "ncclBroadcast", [&](ncclComm& c) -> Status {
    LOOM_TRY(checkCollective(c, stream));
    return fromLoom(loomBroadcast(sendbuff, recvbuff, count, loomType(datatype), root, c.loom(), stream));
  });
}

NCCL_API ncclResult_t ncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                                cudaStream_t stream) {
  return withComm(comm, "ncclBcast", [&](ncclComm& c) -> Status {
    LOOM_TRY(checkCollective(c, stream));
    return fromLoom(loomBroadcast(buff, buff, count, loomType(datatype), root, c.loom(), stream));
  });
}

NCCL_API ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                                    ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  return withComm(comm, "ncclAllGather", [&](ncclComm& c) -> Status {
    LOOM_TRY(checkCollective(c, stream));
    return fromLoom(loomAllGather(sendbuff, recvbuff, sendcount, loomType(datatype), c.loom(), stream));
  });
}

NCCL_API ncclResult_t ncclAlltoAll(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                   ncclComm_t comm, cudaStream_t stream) {
  return withComm(comm, "ncclAlltoAll", [&](ncclComm& c) -> Status {
    LOOM_TRY(checkCollective(c, stream));
    return fromLoom(loomAllToAll(sendbuff, recvbuff, count, loomType(datatype), c.loom(), stream));
  });
}

namespace {

// Gather and Scatter, one the mirror of the other: the root exchanges block r (count
// elements) of `blocks` with rank r, and every rank its own `mine` with the root; a gather
// receives at the root and sends from every rank, a scatter the other way round. In place (the
// root's `mine` is its own block, as NCCL defines it) the root's block stays where it is.
Status rootedBlocks(ncclComm& c, bool gather, void* blocks, void* mine, size_t count, const ncclDataType_t& type,
                    int root, cudaStream_t stream) {
  LOOM_TRY(checkCollective(c, stream));
  LOOM_TRY(checkRoot(c, root));
  const size_t block = count * loom::typeSize(loomType(type));
  const int me = rankOf(c);
  char* base = static_cast<char*>(blocks);
  const bool inPlace = me == root && blocks != nullptr && mine == base + me * block;
  P2PGroup group;
  auto move = [&](void* buf, int peer, bool receive) {
    receive ? group.recv(buf, count, type, peer, c.loom(), stream) : group.send(buf, count, type, peer, c.loom(), stream);
  };
  if (me == root) {
    for (int r = 0; r < countOf(c); ++r) {
      if (r != me || !inPlace) move(base == nullptr ? nullptr : base + r * block, r, gather);
    }
  }
  if (!inPlace) move(mine, root, !gather);
  return group.end();
}

}  // namespace

NCCL_API ncclResult_t ncclGather(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                 int root, ncclComm_t comm, cudaStream_t stream) {
  return withComm(comm, "ncclGather", [&](ncclComm& c) {
    return rootedBlocks(c, true, recvbuff, const_cast<void*>(sendbuff), count, datatype, root, stream);
  });
}

NCCL_API ncclResult_t ncclScatter(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                  int root, ncclComm_t comm, cudaStream_t stream) {
  return withComm(comm, "ncclScatter", [&](ncclComm& c) {
    return rootedBlocks(c, false, const_cast<void*>(sendbuff), recvbuff, count, datatype, root, stream);
  });
}

NCCL_API ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer,
                               ncclComm_t comm, cudaStream_t stream) {
  return withComm(comm, "ncclSend", [&](ncclComm& c) -> Status {
    LOOM_TRY(checkCollective(c, stream));
    return fromLoom(loomSend(sendbuff, count, loomType(datatype), peer, c.loom(), stream));
  });
}

NCCL_API ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                               cudaStream_t stream) {
  return withComm(comm, "ncclRecv", [&](ncclComm& c) -> Status {
    LOOM_TRY(checkCollective(c, stream));
    return fromLoom(loomRecv(recvbuff, count, loomType(datatype), peer, c.loom(), stream));
  });
}

// ---- Groups ------------------------------------------------------------------------------

NCCL_API ncclResult_t ncclGroupStart() {
  loom::nccl::applyNcclEnvironment();
  ++tGroupDepth;
  return report(fromLoom(loomGroupStart()), nullptr, "ncclGroupStart");
}

namespace {

// Ends a group level with Loom's `end` (loomGroupEnd, or loomGroupSimulateEnd); the outermost
// also waits for the communicators created inside the group.
template <typename End>
ncclResult_t endGroup(const char* call, End end) {
  if (tGroupDepth == 0) {
    return report(loom::error(loomInvalidUsage, "%s without ncclGroupStart", call), nullptr, call);
  }
  Status s = fromLoom(end());
  if (--tGroupDepth > 0) return report(s, nullptr, call);
  std::vector<ncclComm*> created;
  created.swap(tGroupInits);
  for (ncclComm* comm : created) {
    const loomResult_t result = comm->waitInit();
    if (result != loomSuccess && s.isOk()) s = Status(result, comm->lastError());
  }
  return report(s, nullptr, call);
}

// NCCL_SIM_INFO_INITIALIZER's magic: a simInfo not set from it is an error, as in NCCL.
constexpr unsigned kSimInfoMagic = 0x74685283;

}  // namespace

NCCL_API ncclResult_t ncclGroupEnd() {
  loom::nccl::applyNcclEnvironment();
  return endGroup("ncclGroupEnd", [] { return loomGroupEnd(); });
}

// The group's calls are not made: simInfo's estimatedTime gets the time Loom's tuner predicts
// for them (µs).
NCCL_API ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t* simInfo) {
  loom::nccl::applyNcclEnvironment();
  if (simInfo == nullptr || simInfo->magic != kSimInfoMagic || simInfo->size < sizeof(ncclSimInfo_t)) {
    return report(loom::error(loomInvalidArgument,
                              "simInfo %p was not set from NCCL_SIM_INFO_INITIALIZER (the group stays open)",
                              static_cast<void*>(simInfo)),
                  nullptr, "ncclGroupSimulateEnd");
  }
  double us = 0;
  const ncclResult_t r = endGroup("ncclGroupSimulateEnd", [&] { return loomGroupSimulateEnd(&us); });
  if (r == ncclSuccess) simInfo->estimatedTime = static_cast<float>(us);
  return r;
}

// ---- Profiling names ---------------------------------------------------------------------
// NCCL exports every function a second time as pnccl*, for profilers that interpose on the
// nccl* names; here both names are the same code.

#define LOOM_PNCCL(name) NCCL_API decltype(name) p##name __attribute__((alias(#name)));
LOOM_PNCCL(ncclGetVersion)
LOOM_PNCCL(ncclGetUniqueId)
LOOM_PNCCL(ncclGetErrorString)
LOOM_PNCCL(ncclGetLastError)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
LOOM_PNCCL(ncclResetDebugInit)
#pragma GCC diagnostic pop
LOOM_PNCCL(ncclCommInitRankConfig)
LOOM_PNCCL(ncclCommInitRank)
LOOM_PNCCL(ncclCommInitRankScalable)
LOOM_PNCCL(ncclCommInitAll)
LOOM_PNCCL(ncclCommSplit)
LOOM_PNCCL(ncclCommShrink)
LOOM_PNCCL(ncclCommRevoke)
LOOM_PNCCL(ncclCommFinalize)
LOOM_PNCCL(ncclCommDestroy)
LOOM_PNCCL(ncclCommAbort)
LOOM_PNCCL(ncclCommGetAsyncError)
LOOM_PNCCL(ncclCommCount)
LOOM_PNCCL(ncclCommCuDevice)
LOOM_PNCCL(ncclCommUserRank)
LOOM_PNCCL(ncclMemAlloc)
LOOM_PNCCL(ncclMemFree)
LOOM_PNCCL(ncclCommRegister)
LOOM_PNCCL(ncclCommDeregister)
LOOM_PNCCL(ncclCommWindowRegister)
LOOM_PNCCL(ncclCommWindowDeregister)
LOOM_PNCCL(ncclRedOpCreatePreMulSum)
LOOM_PNCCL(ncclRedOpDestroy)
LOOM_PNCCL(ncclAllReduce)
LOOM_PNCCL(ncclReduce)
LOOM_PNCCL(ncclReduceScatter)
LOOM_PNCCL(ncclBroadcast)
LOOM_PNCCL(ncclBcast)
LOOM_PNCCL(ncclAllGather)
LOOM_PNCCL(ncclAlltoAll)
LOOM_PNCCL(ncclGather)
LOOM_PNCCL(ncclScatter)
LOOM_PNCCL(ncclSend)
LOOM_PNCCL(ncclRecv)
LOOM_PNCCL(ncclGroupStart)
LOOM_PNCCL(ncclGroupEnd)
LOOM_PNCCL(ncclGroupSimulateEnd)
