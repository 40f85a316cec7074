/*
 * Loom public C API.
 *
 * Names, argument orders and enum values follow NCCL so that code written for one reads
 * naturally with the other (and an NCCL-ABI shim maps one to one).
 *
 * Threading: every function may be called from any thread. One communicator must not be
 * used by two threads at the same time, except loomCommAbort and loomCommGetAsyncError,
 * which may be called from any thread while another is blocked inside a call.
 *
 * Errors: every function returns a loomResult_t; loomGetLastError(comm) returns a sentence
 * that says what was wrong, with the offending value. Nothing in Loom aborts the process
 * and every wait has a deadline (loomConfig_t.timeoutMs, LOOM_TIMEOUT_MS).
 */
#ifndef LOOM_LOOM_H_
#define LOOM_LOOM_H_

#include <limits.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define LOOM_MAJOR 0
#define LOOM_MINOR 1
#define LOOM_PATCH 0
#define LOOM_VERSION(X, Y, Z) ((X) * 10000 + (Y) * 100 + (Z))
#define LOOM_VERSION_CODE LOOM_VERSION(LOOM_MAJOR, LOOM_MINOR, LOOM_PATCH)

/* Results: NCCL's numbering, then Loom's own. */
typedef enum {
  loomSuccess = 0,
  loomUnhandledCudaError = 1,
  loomSystemError = 2,
  loomInternalError = 3,
  loomInvalidArgument = 4,
  loomInvalidUsage = 5,
  loomRemoteError = 6,
  loomInProgress = 7,
  loomTimeout = 8,
  loomNumResults = 9
} loomResult_t;

/* Element types: NCCL's values. */
typedef enum {
  loomInt8 = 0, loomChar = 0,
  loomUint8 = 1,
  loomInt32 = 2, loomInt = 2,
  loomUint32 = 3,
  loomInt64 = 4,
  loomUint64 = 5,
  loomFloat16 = 6, loomHalf = 6,
  loomFloat32 = 7, loomFloat = 7,
  loomFloat64 = 8, loomDouble = 8,
  loomBfloat16 = 9,
  /* 8-bit floats (OCP FP8): e4m3 has no infinity (max 448), e5m2 has (max finite 57344).
     Reductions compute in float32 and round once to nearest-even, saturating to the largest
     finite value as NCCL does. */
  loomFloat8e4m3 = 10,
  loomFloat8e5m2 = 11,
  loomNumTypes = 12
} loomDataType_t;

/* Reduction operations: NCCL's values. Ops from loomRedOpCreatePreMulSum (below) follow
 * loomNumOps; loomMaxRedOp makes the type wide enough to hold them. */
typedef enum {
  loomSum = 0,
  loomProd = 1,
  loomMax = 2,
  loomMin = 3,
  loomAvg = 4,
  loomNumOps = 5,
  loomMaxRedOp = 0x7fffffff
} loomRedOp_t;

typedef struct loomComm* loomComm_t;

/* A cudaStream_t for a device communicator. For a host communicator, NULL means the call
 * completes before it returns, and a stream from loomStreamCreate is an in-order queue run
 * by a progress thread. */
typedef void* loomStream_t;

/* Opaque: the root's address and a 128-bit secret. Copy it to every rank by any means. */
#define LOOM_UNIQUE_ID_BYTES 128
typedef struct {
  char internal[LOOM_UNIQUE_ID_BYTES];
} loomUniqueId;

/* Fields left at LOOM_CONFIG_UNDEF_INT take their value from the environment (or the
 * built-in default); see docs/ENVIRONMENT.md. */
#define LOOM_CONFIG_UNDEF_INT INT_MIN
typedef struct {
  size_t size;          /* sizeof(loomConfig_t), set by the initializer */
  unsigned int magic;   /* set by the initializer */
  unsigned int version; /* LOOM_VERSION_CODE, set by the initializer */
  int device;           /* -1: host memory; >= 0: CUDA device ordinal */
  int timeoutMs;        /* deadline of every wait after init (LOOM_TIMEOUT_MS) */
  int initTimeoutMs;    /* deadline of communicator creation (LOOM_INIT_TIMEOUT_MS) */
  const char* commName; /* shown in logs; may be NULL */
} loomConfig_t;

#define LOOM_CONFIG_MAGIC 0x4d4f4f4cu /* "LOOM" */
#define LOOM_CONFIG_INITIALIZER                                                   \
  {                                                                               \
    sizeof(loomConfig_t), LOOM_CONFIG_MAGIC, LOOM_VERSION_CODE, -1,               \
        LOOM_CONFIG_UNDEF_INT, LOOM_CONFIG_UNDEF_INT, NULL                        \
  }

/* loomCommSplit: ranks passing this color get no new communicator (*newcomm = NULL). */
#define LOOM_SPLIT_NOCOLOR (-1)

/* loomCommShrink flags (NCCL's values). */
#define LOOM_SHRINK_DEFAULT 0x00
#define LOOM_SHRINK_ABORT 0x01 /* first end the calls in progress on comm (they fail) */
/* loomCommRevoke flags (NCCL's value). */
#define LOOM_REVOKE_DEFAULT 0x00

/* ---- Results and version -------------------------------------------------------------- */

/* A constant string naming the result; never NULL. */
const char* loomGetErrorString(loomResult_t result);

/* The last detailed error message of this communicator; with comm NULL, of the calling
 * thread (the only place an error of a call without a valid communicator can be read).
 * Never NULL; "" when there was none. Valid until the next Loom call on this thread. */
const char* loomGetLastError(loomComm_t comm);

/* LOOM_VERSION_CODE of the library actually loaded. */
loomResult_t loomGetVersion(int* version);

/* ---- Communicators -------------------------------------------------------------------- */

/* Creates a unique id and starts, in this process, the root that ranks will register with.
 * The root listens on LOOM_MASTER_ADDR (port LOOM_MASTER_PORT, else any) when set, else on
 * the interface chosen by LOOM_SOCKET_IFNAME, else on the first non-loopback interface that
 * is up. The secret is fresh from the system's random source. */
loomResult_t loomGetUniqueId(loomUniqueId* uniqueId);

/* Collective over nranks: every rank calls it with the same id and its own rank. Blocks
 * until every rank has arrived or the init deadline passes (loomTimeout, naming the ranks
 * that never arrived). */
loomResult_t loomCommInitRank(loomComm_t* comm, int nranks, loomUniqueId uniqueId, int rank);
loomResult_t loomCommInitRankConfig(loomComm_t* comm, int nranks, loomUniqueId uniqueId,
                                    int rank, loomConfig_t* config);

/* Rank, size and rendezvous from the launcher's environment: LOOM_RANK, LOOM_WORLD_SIZE,
 * LOOM_MASTER_ADDR, LOOM_MASTER_PORT, falling back to torchrun's, Open MPI's and Slurm's
 * variables. Rank 0 hosts the root on the master address. config may be NULL. */
loomResult_t loomCommInitFromEnv(loomComm_t* comm, loomConfig_t* config);

/* ndev ranks in this process, one per entry of comms. devlist NULL makes host
 * communicators; otherwise devlist[i] is the device of rank i (-1 for host memory). */
loomResult_t loomCommInitAll(loomComm_t* comms, int ndev, const int* devlist);

/* Collective over comm: ranks with the same color form a new communicator, ordered by key
 * then by rank in comm. config may be NULL (inherit comm's). */
loomResult_t loomCommSplit(loomComm_t comm, int color, int key, loomComm_t* newcomm,
                           loomConfig_t* config);

/* Collective over the ranks of comm that are not in excludeRanks (the excluded ones do not
 * call: they may be dead): they form a new communicator, numbered in their order in comm.
 * Works on a communicator in its error state, so survivors of a dead peer carry on without
 * it. Every caller passes the same set of ranks (in any order); callers that disagree fail
 * (loomInvalidUsage where a neighbour sees the other list, else loomTimeout at the deadline).
 * flags: LOOM_SHRINK_DEFAULT, or LOOM_SHRINK_ABORT to first end the calls in progress on comm
 * (from other threads or streams: they fail, and comm is left in its error state), for calls
 * still waiting on a rank that died. comm itself is destroyed as usual. config may be NULL
 * (inherit comm's). */
loomResult_t loomCommShrink(loomComm_t comm, const int* excludeRanks, int excludeCount,
                            loomComm_t* newcomm, loomConfig_t* config, int flags);
/* Ends the calls in progress on comm (from other threads or streams: they fail, saying so) and
 * returns once none runs; comm is then revoked: its collectives and point-to-point calls are
 * loomInvalidUsage, loomCommSplit, loomCommShrink and loomCommDestroy remain, and
 * loomCommGetAsyncError gives the failure comm had before (loomSuccess if none): revoking is
 * no failure. Local: ranks revoke on their own (a peer's calls waiting on this rank end at its
 * own revoke or its timeout). flags: LOOM_REVOKE_DEFAULT. */
loomResult_t loomCommRevoke(loomComm_t comm, int flags);

/* Local: frees the communicator once its queued work has finished (or failed). */
loomResult_t loomCommDestroy(loomComm_t comm);

/* Local, from any thread: unblocks every wait of comm with an error, then frees it. */
loomResult_t loomCommAbort(loomComm_t comm);

/* loomSuccess, or the error that put comm in its error state (a dead peer, a timeout, an
 * abort). Any thread. */
loomResult_t loomCommGetAsyncError(loomComm_t comm, loomResult_t* asyncError);

/* Local: registers [buff, buff + size) with comm for repeated use as a send or receive
 * buffer. A transport that moves bytes only through registered memory (UCX, for RDMA) then
 * registers it once here instead of on every call; calls whose ranges lie inside it use
 * this registration. Transports that need none (shared memory, sockets) accept it and
 * change nothing. The memory must stay allocated until loomCommDeregister(comm, *handle)
 * or the communicator's destruction, which ends every registration left. */
loomResult_t loomCommRegister(loomComm_t comm, void* buff, size_t size, void** handle);
/* Local: ends a registration; waits for a call of comm that is moving bytes to finish. */
loomResult_t loomCommDeregister(loomComm_t comm, void* handle);

/* Host memory for buffers that the other processes on this host can map: a large allreduce
 * on a communicator whose ranks share this host reads and writes such buffers straight on
 * every rank, without copying through shared memory (docs/ARCHITECTURE.md, "The mapped
 * allreduce"); ranks that are threads of one process get that with any buffer. *ptr is
 * page-aligned and zeroed, `size` rounded up to whole pages. A child forked after the
 * allocation gets it as it would heap memory: what the child writes stays its own (pages it has
 * not written yet may still show what the parent writes later). loomMemFree(NULL) does nothing; any
 * other pointer must come from loomMemAlloc and not be freed twice. Thread-safe. */
loomResult_t loomMemAlloc(void** ptr, size_t size);
loomResult_t loomMemFree(void* ptr);

loomResult_t loomCommCount(const loomComm_t comm, int* count);
loomResult_t loomCommUserRank(const loomComm_t comm, int* rank);
loomResult_t loomCommDevice(const loomComm_t comm, int* device);
/* The smallest host allreduce, in bytes, that comm runs straight between the ranks' buffers
 * (the mapped allreduce) when every rank's buffers came from loomMemAlloc or the ranks are
 * threads of one process; 0 when comm never does: ranks on more than one host or without
 * shared memory, a lone rank, an allreduce algorithm forced by LOOM_ALGO, or
 * LOOM_MAPPED_MIN_BYTES=0. The same on every rank. A framework asks it to decide which of its
 * buffers to place in loomMemAlloc memory. */
loomResult_t loomCommMappedMinBytes(const loomComm_t comm, size_t* bytes);

/* ---- Host streams --------------------------------------------------------------------- */

/* An in-order queue served by its own progress thread. Calls enqueued on it return at once
 * and run in order; an error is kept and returned by the next Synchronize. */
loomResult_t loomStreamCreate(loomStream_t* stream);
/* Waits until everything enqueued so far has run; returns the first error since the last
 * Synchronize. */
loomResult_t loomStreamSynchronize(loomStream_t stream);
/* loomSuccess when everything enqueued has run, loomInProgress otherwise (or an error). */
loomResult_t loomStreamQuery(loomStream_t stream);
/* Waits for queued work, then frees the stream. */
loomResult_t loomStreamDestroy(loomStream_t stream);

/* ---- Group calls ---------------------------------------------------------------------- */

/* Calls between Start and End (per thread, nestable) are only recorded; End launches them
 * together, so a ring of sends and receives, or one thread driving many communicators,
 * cannot deadlock. */
loomResult_t loomGroupStart(void);
loomResult_t loomGroupEnd(void);
/* Closes the group as loomGroupEnd does without making its calls: *estimatedUs gets the time
 * the tuner predicts for them (each collective with the algorithm it would pick, each message
 * at its link's latency and bandwidth), summed, in microseconds (NCCL's ncclGroupSimulateEnd).
 * Local: a rank may simulate a group its peers never make, since the calls are taken back
 * (the next collectives are numbered as if they had not been made). An inner (nested) call
 * only closes its level and gives 0. */
loomResult_t loomGroupSimulateEnd(double* estimatedUs);

/* ---- Collectives ---------------------------------------------------------------------- */

/* NCCL's argument order and semantics. Every rank of comm makes the same calls in the same
 * order with the same count, datatype, op and root; a mismatch that Loom sees (different
 * call, count, type, op or root on a peer) is loomInvalidUsage on the ranks that see it, and
 * the communicator is then unusable. count 0 is valid and moves nothing. Buffers are host
 * memory. Out-of-place buffers must not overlap; in-place is sendbuff == recvbuff, or for
 * AllGather / ReduceScatter NCCL's offsets (the rank's own block inside the big buffer).
 *
 * Determinism: an AllReduce result is bitwise identical on every rank, and the same inputs,
 * rank count and algorithm give the same bits from run to run. Different algorithms may round
 * floating-point sums differently (they add in different orders). loomAvg sums, then divides
 * once; integer averages truncate toward zero. */

/* recvbuff = op over ranks of sendbuff (count elements). */
loomResult_t loomAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                           loomDataType_t datatype, loomRedOp_t op, loomComm_t comm,
                           loomStream_t stream);
/* Every rank's recvbuff = root's sendbuff (sendbuff is read only on root). */
loomResult_t loomBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                           loomDataType_t datatype, int root, loomComm_t comm,
                           loomStream_t stream);
/* root's recvbuff = op over ranks of sendbuff (recvbuff is written only on root). */
loomResult_t loomReduce(const void* sendbuff, void* recvbuff, size_t count,
                        loomDataType_t datatype, loomRedOp_t op, int root, loomComm_t comm,
                        loomStream_t stream);
/* recvbuff (nranks * sendcount elements) = every rank's sendbuff, in rank order. In place
 * when sendbuff == recvbuff + rank * sendcount elements. */
loomResult_t loomAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                           loomDataType_t datatype, loomComm_t comm, loomStream_t stream);
/* recvbuff = block `rank` (recvcount elements) of op over ranks of sendbuff (nranks *
 * recvcount elements). In place when recvbuff == sendbuff + rank * recvcount elements. */
loomResult_t loomReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                               loomDataType_t datatype, loomRedOp_t op, loomComm_t comm,
                               loomStream_t stream);
/* Block j (count elements) of sendbuff goes to rank j, which stores it as block `rank` of its
 * recvbuff; both buffers hold nranks * count elements and must not overlap. */
loomResult_t loomAllToAll(const void* sendbuff, void* recvbuff, size_t count,
                          loomDataType_t datatype, loomComm_t comm, loomStream_t stream);

/* ---- Premultiplied sums ---------------------------------------------------------------- */

/* Where a premultiplied sum's scalar lives (NCCL's values). */
typedef enum {
  /* Read through the pointer by every call that uses the op, when its data moves: host
   * memory on a host communicator, device memory on a device one. */
  loomScalarDevice = 0,
  /* Copied when the op is made. */
  loomScalarHostImmediate = 1
} loomScalarResidence_t;

/* A reduction op for comm: the sum over ranks of scalar * sendbuff (ncclRedOpCreatePreMulSum).
 * Each rank multiplies its own input once before it is summed, widened and rounded once as
 * loomProd does, so ranks may pass different scalars. *op is numbered from loomNumOps and is
 * valid on comm only, for calls of `datatype`; loomRedOpDestroy frees the number, which may be
 * destroyed as soon as the last call that uses it has returned. */
loomResult_t loomRedOpCreatePreMulSum(loomRedOp_t* op, void* scalar, loomDataType_t datatype,
                                      loomScalarResidence_t residence, loomComm_t comm);
loomResult_t loomRedOpDestroy(loomRedOp_t op, loomComm_t comm);

/* ---- Point-to-point and barrier ------------------------------------------------------- */

/* Messages between a pair of ranks are matched in the order they were issued; sender and
 * receiver must agree on count and type. */
loomResult_t loomSend(const void* sendbuff, size_t count, loomDataType_t datatype, int peer,
                      loomComm_t comm, loomStream_t stream);
loomResult_t loomRecv(void* recvbuff, size_t count, loomDataType_t datatype, int peer,
                      loomComm_t comm, loomStream_t stream);

/* Returns (or, on a stream, completes) once every rank has entered the barrier. */
loomResult_t loomBarrier(loomComm_t comm, loomStream_t stream);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* LOOM_LOOM_H_ */
