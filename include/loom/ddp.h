/* Loom DDP: gradient bucketing for data-parallel training loops that own their gradient
 * buffers (no LibTorch needed). What torch's DistributedDataParallel reducer does:
 *
 *   create   once, over the list of gradient buffers (collective: checks that every rank
 *            registered the same shapes);
 *   markReady(i) as backward produces gradient i; a bucket whose gradients are all ready is
 *            launched (averaged across ranks) on the reducer's stream while backward goes on;
 *   finish   waits for every bucket: each gradient buffer then holds the average over ranks,
 *            bitwise identical on every rank.
 *
 * Buckets hold gradients of one type, in reverse registration order (backward produces the
 * last layers first), at most bucketCapBytes each, the first one at most firstBucketCapBytes.
 * After the first synchronised iteration they are rebuilt once, in the order gradients
 * actually became ready on rank 0, and every rank uses rank 0's assignment. Buckets are
 * launched in order (bucket k after bucket k-1), so every rank issues the same collectives.
 *
 * A bucket whose gradients lie back to back in memory in registration order (as views into
 * one flat buffer, like torch's gradient_as_bucket_view) is reduced where it lies; other
 * buckets are copied into the reducer's storage and back.
 *
 * Every function returns loomSuccess or an error; loomDdpGetLastError says what and where.
 * Nothing hangs: an error on a peer or a dead peer ends in an error here within the
 * communicator's deadline. A reducer is used from one thread at a time, except that
 * loomDdpMarkReady may be called from several threads at once. */
#ifndef LOOM_DDP_H_
#define LOOM_DDP_H_

#include <stddef.h>

#include "loom/loom.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct loomDdpReducer* loomDdpReducer_t;

/* One gradient (or parameter) buffer: count elements of type, in the memory of the
 * communicator's kind (host memory for a host communicator). */
typedef struct {
  void* data;
  size_t count;
  loomDataType_t type; /* loomFloat16, loomBfloat16, loomFloat32 or loomFloat64 */
  const char* name;    /* shown in errors and logs; may be NULL ("gradient <index>") */
} loomDdpTensor_t;

/* What finish does with a gradient that was never marked ready in the iteration. Either way
 * its buffer is zeroed and reduced with the others (so peers, which cannot know, are never
 * left waiting): Zero is torch's find_unused_parameters; Error also makes finish return
 * loomInvalidUsage naming the missing gradients. */
typedef enum { loomDdpUnusedZero = 0, loomDdpUnusedError = 1 } loomDdpUnused_t;

/* Built-in communication hooks (torch's default, FP16_COMPRESS and BF16_COMPRESS): the
 * compressed ones send float32 buckets as float16 / bfloat16, halving the bytes moved, and
 * widen the sum back into the bucket. */
typedef enum {
  loomDdpAllReduce = 0,
  loomDdpFp16Compress = 1,
  loomDdpBf16Compress = 2
} loomDdpCompression_t;

/* How the average is formed: torch's way, dividing each rank's gradients by the world size
 * before summing (no float16 overflow in the sum), or summing then dividing once with
 * loomAvg (one rounding fewer). */
typedef enum { loomDdpPreDivide = 0, loomDdpAvgOp = 1 } loomDdpAveraging_t;

/* A bucket as a communication hook sees it: data holds this rank's gradients (divided by
 * worldSize under loomDdpPreDivide); the hook must leave the reduction over ranks by `op`
 * (loomSum, or loomAvg under loomDdpAvgOp) in data. */
typedef struct {
  void* data;
  size_t count;
  loomDataType_t type;
  loomRedOp_t op;
  int index;           /* bucket index, in launch order */
  int worldSize;
  loomComm_t comm;
  loomStream_t stream; /* the reducer's stream: enqueue Loom collectives on it */
} loomDdpBucket_t;

/* A user hook replaces the built-in one. It runs on the thread that completed the bucket,
 * and must enqueue its work on bucket->stream (or finish it before returning). Every rank
 * must issue the same collectives. A non-success result fails the iteration. */
typedef loomResult_t (*loomDdpCommHook_t)(void* state, const loomDdpBucket_t* bucket);

typedef struct {
  size_t bucketCapBytes;      /* 25 MiB (torch's bucket_cap_mb) */
  size_t firstBucketCapBytes; /* 1 MiB */
  int rebuildBuckets;         /* 1: rebuild once from the observed order; 0: keep the first */
  int unused;                 /* loomDdpUnused_t */
  int averaging;              /* loomDdpAveraging_t */
  int compression;            /* loomDdpCompression_t, for float32 buckets */
  loomDdpCommHook_t commHook; /* NULL: the built-in hook chosen by compression */
  void* commHookState;
  /* Where buckets are reduced: a host stream (loomStreamCreate) for a host communicator,
   * a cudaStream_t for a device one. NULL on a host communicator: the reducer makes its own
   * host stream. */
  loomStream_t stream;
} loomDdpOptions_t;

#define LOOM_DDP_OPTIONS_INITIALIZER \
  {                                                                                        \
    (size_t)25 << 20, (size_t)1 << 20, 1, loomDdpUnusedZero, loomDdpPreDivide, loomDdpAllReduce, \
        NULL, NULL, NULL                                                                   \
  }

/* Collective over comm. The reducer keeps pointers to the tensors' buffers (not to the
 * array) and does not own them. options may be NULL (the initializer's values). Differing
 * tensor counts, counts or types across ranks are loomInvalidUsage naming the first
 * difference and the ranks. */
loomResult_t loomDdpReducerCreate(loomDdpReducer_t* reducer, loomComm_t comm,
                                  const loomDdpTensor_t* gradients, int ngradients,
                                  const loomDdpOptions_t* options);

/* Waits for launched buckets, then frees the reducer (never the communicator). */
loomResult_t loomDdpReducerDestroy(loomDdpReducer_t reducer);

/* Local: gradient `index` (registration order) holds this iteration's value and will not be
 * written again until finish returns. Marking one twice in an iteration is loomInvalidUsage
 * and changes nothing. */
loomResult_t loomDdpMarkReady(loomDdpReducer_t reducer, int index);

/* Collective: ends the iteration. After it returns every gradient holds the average over
 * ranks (on a device communicator: once the reducer's stream reaches this point). */
loomResult_t loomDdpFinish(loomDdpReducer_t reducer);

/* sync 0 is torch's no_sync(): iterations only record readiness and finish moves nothing,
 * so the loop can accumulate gradients over micro-batches; the next iteration with sync 1
 * averages the accumulated sums. Takes effect at the next iteration (not in the middle of
 * one). */
loomResult_t loomDdpSetSync(loomDdpReducer_t reducer, int sync);

/* Collective: every rank's tensors = root's, after the same shape check as create (torch's
 * initial broadcast of parameters and buffers). The tensors may have any loomDataType_t. */
loomResult_t loomDdpBroadcastTensors(loomComm_t comm, const loomDdpTensor_t* tensors,
                                     int ntensors, int root);

/* The current bucket assignment: bucketOf[i] is the bucket of gradient i (ngradients
 * entries; may be NULL), *nbuckets the bucket count and *rebuilds how many times the buckets
 * were rebuilt (0 or 1). Any of the outputs may be NULL. */
loomResult_t loomDdpGetBuckets(loomDdpReducer_t reducer, int* bucketOf, int* nbuckets,
                               int* rebuilds);

/* The last error of this reducer; with NULL, of the calling thread's last loomDdp call.
 * Never NULL; "" when there was none. */
const char* loomDdpGetLastError(loomDdpReducer_t reducer);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* LOOM_DDP_H_ */
