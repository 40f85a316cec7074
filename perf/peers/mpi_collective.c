/* Open MPI's collectives in nccl-tests' loop and table (perf/peers/nccl_table.h), so that
 * perf/compare.sh can put them beside loom-perf's.
 *
 *   mpicc -O2 -Wall -Wextra -o mpi_collective mpi_collective.c -lm
 *   mpirun -n 2 --bind-to core ./mpi_collective COLLECTIVE [-b 8] [-e 128M] [-f 2]
 *          [-n 20] [-w 1] [-c 1] [-a 1] [-r 0] [--min-time S]
 *
 * COLLECTIVE: allreduce, broadcast, reduce, allgather, reducescatter, alltoall, sendrecv (each rank
 * sends to the next and receives from the one before, as loom-perf's). float32, sum;
 * sizes and bus-bandwidth factors as nccl-tests (and loom-perf) count them: the size is the
 * larger buffer's, each rank's share of allgather, reducescatter and alltoall its n-th part
 * rounded down to 16 bytes. Out of place and in place (MPI_IN_PLACE; the reduction's result at
 * the start of the buffer for reducescatter), except broadcast (MPI_Bcast has one buffer) and
 * alltoall and sendrecv (measured out of place only, as loom-perf does): their other fields read `-`. The
 * buffers hold zeros while timed (an in-place sum of zeros stays finite and regular); the check
 * then fills rank r's input with (i + 3r) % 61 in element i, so that every float sum is exact,
 * the output with NaN, and counts the elements of one call that differ from the exact result.
 * Any wrong element: exit status 1.
 */
#include "nccl_table.h"

#include <limits.h>
#include <mpi.h>

typedef enum { kAllReduce, kBroadcast, kReduce, kAllGather, kReduceScatter, kAllToAll, kSendRecv } Kind;
static const char* const kNames[] = {"allreduce", "broadcast", "reduce", "allgather", "reducescatter",
                                     "alltoall", "sendrecv"};

typedef struct {
  Kind kind;
  int inPlace;
  int root;
  int rank, nranks;
  int count;  /* elements of the larger buffer */
  int share;  /* allgather, reducescatter, alltoall: elements per rank */
  float* send;
  float* recv;
} Collective;

static void callCollective(void* state) {
  const Collective* c = state;
  void* const in = c->inPlace ? MPI_IN_PLACE : c->send;
  switch (c->kind) {
    case kAllReduce:
      MPI_Allreduce(in, c->inPlace ? c->send : c->recv, c->count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      break;
    case kBroadcast: MPI_Bcast(c->send, c->count, MPI_FLOAT, c->root, MPI_COMM_WORLD); break;
    case kReduce:
      /* In place, only the root names MPI_IN_PLACE; the others send from their buffer. */
      MPI_Reduce(c->inPlace && c->rank != c->root ? c->send : in, c->inPlace ? c->send : c->recv, c->count,
                 MPI_FLOAT, MPI_SUM, c->root, MPI_COMM_WORLD);
      break;
    case kAllGather:
      /* In place, this rank's share already lies at its place in the receive buffer. */
      MPI_Allgather(in, c->share, MPI_FLOAT, c->recv, c->share, MPI_FLOAT, MPI_COMM_WORLD);
      break;
    case kReduceScatter:
      MPI_Reduce_scatter_block(in, c->inPlace ? c->send : c->recv, c->share, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      break;
    case kAllToAll:
      MPI_Alltoall(c->send, c->share, MPI_FLOAT, c->recv, c->share, MPI_FLOAT, MPI_COMM_WORLD);
      break;
    case kSendRecv: {
      const int next = (c->rank + 1) % c->nranks, prev = (c->rank + c->nranks - 1) % c->nranks;
      MPI_Sendrecv(c->send, c->count, MPI_FLOAT, next, 0, c->recv, c->count, MPI_FLOAT, prev, 0, MPI_COMM_WORLD,
                   MPI_STATUS_IGNORE);
      break;
    }
  }
}

static void barrier(void* state) {
  (void)state;
  MPI_Barrier(MPI_COMM_WORLD);
}

static double combine(void* state, double value, RankCombine how) {
  (void)state;
  double out = value;
  int nranks;
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);
  switch (how) {
    case kRankZero: MPI_Bcast(&out, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD); break;
    case kRankMin: MPI_Allreduce(&value, &out, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD); break;
    case kRankMax: MPI_Allreduce(&value, &out, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD); break;
    case kRankSum:
    case kRankMean:
      MPI_Allreduce(&value, &out, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
      if (how == kRankMean) out /= nranks;
      break;
  }
  return out;
}

static float pattern(size_t i, int rank) { return (float)((i + 3u * (size_t)rank) % 61u); }

static float sumOfRanks(size_t i, int nranks) {
  float want = 0.0f;
  for (int r = 0; r < nranks; ++r) want += pattern(i, r);
  return want;
}

/* Element i of rank `rank`'s input (for allgather: of its share) and of the result it must
 * hold; false where the result is not this rank's to check. */
static int expected(const Collective* c, size_t i, float* want) {
  const size_t share = (size_t)c->share;
  switch (c->kind) {
    case kAllReduce: *want = sumOfRanks(i, c->nranks); return 1;
    case kBroadcast: *want = pattern(i, c->root); return 1;
    case kReduce: *want = sumOfRanks(i, c->nranks); return c->rank == c->root;
    case kAllGather: *want = pattern(i % share, (int)(i / share)); return 1;
    case kReduceScatter: *want = sumOfRanks((size_t)c->rank * share + i, c->nranks); return 1;
    case kAllToAll:
      /* Block j comes from rank j, which sent its block `rank`. */
      *want = pattern((size_t)c->rank * share + i % share, (int)(i / share));
      return 1;
    case kSendRecv: *want = pattern(i, (c->rank + c->nranks - 1) % c->nranks); return 1;
  }
  return 0;
}

/* Wrong elements of one checked call, summed over the ranks. */
static double check(Collective* c) {
  const size_t count = (size_t)c->count, share = (size_t)c->share;
  memset(c->recv, 0xff, count * sizeof(float)); /* NaN: a call that writes nothing cannot pass */
  memset(c->send, 0xff, count * sizeof(float));
  size_t outCount = count;
  float* out = c->inPlace ? c->send : c->recv;
  switch (c->kind) {
    case kBroadcast:
      if (c->rank == c->root)
        for (size_t i = 0; i < count; ++i) c->send[i] = pattern(i, c->rank);
      break;
    case kAllGather:
      if (c->inPlace)
        for (size_t i = 0; i < share; ++i) c->recv[(size_t)c->rank * share + i] = pattern(i, c->rank);
      else
        for (size_t i = 0; i < share; ++i) c->send[i] = pattern(i, c->rank);
      out = c->recv;
      outCount = share * (size_t)c->nranks;
      break;
    case kReduceScatter:
      for (size_t i = 0; i < share * (size_t)c->nranks; ++i) c->send[i] = pattern(i, c->rank);
      outCount = share;
      break;
    case kAllToAll:
      for (size_t i = 0; i < share * (size_t)c->nranks; ++i) c->send[i] = pattern(i, c->rank);
      outCount = share * (size_t)c->nranks;
      break;
    default:
      for (size_t i = 0; i < count; ++i) c->send[i] = pattern(i, c->rank);
      break;
  }
  callCollective(c);
  long wrong = 0;
  for (size_t i = 0; i < outCount; ++i) {
    float want;
    if (expected(c, i, &want)) wrong += out[i] != want;
  }
  return combine(c, (double)wrong, kRankSum);
}

static int kindOf(const char* name) {
  for (int k = 0; k < (int)(sizeof kNames / sizeof kNames[0]); ++k)
    if (strcmp(name, kNames[k]) == 0) return k;
  return -1;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, nranks;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);

  PeerOptions o;
  const int first = peerParseOptions(argc, argv, &o, rank == 0);
  const int kind = first >= 0 && first + 1 == argc ? kindOf(argv[first]) : -1;
  if (kind < 0 || o.root >= nranks || o.maxBytes / sizeof(float) > INT_MAX) {
    if (rank == 0 && first >= 0)
      fprintf(stderr,
              "usage: mpirun -n N %s allreduce|broadcast|reduce|allgather|reducescatter|alltoall|sendrecv [flags] "
              "(-r < N, -e < 8G)\n",
              argv[0]);
    MPI_Finalize();
    return 2;
  }
  const char* name = kNames[kind];

  Collective c = {.kind = (Kind)kind, .root = o.root, .rank = rank, .nranks = nranks};
  c.send = malloc(o.maxBytes);
  c.recv = malloc(o.maxBytes);
  if (!c.send || !c.recv) {
    fprintf(stderr, "mpi_collective: cannot allocate 2 x %zu bytes\n", o.maxBytes);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  const PeerCalls calls = {callCollective, barrier, combine, &c};
  const int reduces = c.kind == kAllReduce || c.kind == kReduce || c.kind == kReduceScatter;
  const int takesRoot = c.kind == kBroadcast || c.kind == kReduce;
  const int shared = c.kind == kAllGather || c.kind == kReduceScatter || c.kind == kAllToAll;
  const double busFactor = c.kind == kAllReduce ? 2.0 * (nranks - 1) / nranks
                           : shared             ? (double)(nranks - 1) / nranks
                                                : 1.0;

  if (rank == 0) {
    char version[MPI_MAX_LIBRARY_VERSION_STRING], cpus[256];
    int len;
    MPI_Get_library_version(version, &len);
    version[strcspn(version, ",\n")] = '\0';
    peerDescribeAffinity(cpus, sizeof cpus);
    printf("# mpi_collective %s: %s, %d ranks, float32%s; rank 0 cpus %s\n", name, version, nranks,
           reduces ? " sum" : "", cpus);
    printf("# -b %zu -e %zu -f %zu -n %ld -w %ld -c %d -a %d --min-time %g\n", o.minBytes,
           o.maxBytes, o.factor, o.iters, o.warmup, o.check, (int)o.average, o.minTime);
    peerPrintHeader();
    fflush(stdout);
  }

  TableTotals totals = {0};
  for (size_t bytes = o.minBytes; bytes; bytes = peerNextSize(&o, bytes)) {
    const size_t elements = bytes / sizeof(float);
    /* nccl-tests keeps each rank's share a multiple of 16 bytes. */
    c.share = shared ? (int)((elements / (size_t)nranks) & ~(size_t)3) : 0;
    c.count = shared ? c.share * nranks : (int)elements;
    const size_t used = (size_t)c.count * sizeof(float);
    if (shared && c.share == 0) continue;
    if (rank == 0) peerPrintRowStart(used, reduces ? "sum" : "none", takesRoot ? o.root : -1);
    for (c.inPlace = 0; c.inPlace <= 1; ++c.inPlace) {
      if ((c.kind == kBroadcast && !c.inPlace) || ((c.kind == kAllToAll || c.kind == kSendRecv) && c.inPlace)) {
        if (rank == 0) peerPrintNoMode();
        continue;
      }
      memset(c.send, 0, used);
      memset(c.recv, 0, used);
      const double seconds = peerTimePerCall(&o, &calls);
      const double wrong = o.check ? check(&c) : -1.0;
      if (rank == 0) peerPrintMode(&totals, used, seconds, busFactor, wrong);
    }
    if (rank == 0) {
      printf("\n");
      fflush(stdout);
    }
  }
  if (rank == 0) peerPrintFooter(&totals);

  double failed = totals.wrong;
  MPI_Bcast(&failed, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  free(c.send);
  free(c.recv);
  MPI_Finalize();
  return failed > 0 ? 1 : 0;
}
