/* Open MPI's allreduce and broadcast in nccl-tests' loop and table (perf/peers/nccl_table.h),
 * so that perf/compare.sh can put them beside loom-perf's.
 *
 *   mpicc -O2 -Wall -Wextra -o mpi_collective mpi_collective.c -lm
 *   mpirun -n 2 --bind-to core ./mpi_collective allreduce|broadcast [-b 8] [-e 128M] [-f 2]
 *          [-n 20] [-w 1] [-c 1] [-a 1] [-r 0] [--min-time S]
 *
 * float32. allreduce: sum, out-of-place and in-place (MPI_IN_PLACE). broadcast: in-place only,
 * since MPI_Bcast has one buffer; its out-of-place fields read `-`. The buffers hold zeros
 * while timed (an in-place sum of zeros stays finite and regular); the check then fills rank
 * r's input with (i + 3r) % 61 in element i, so that every float sum is exact, the output
 * with NaN, and counts the elements of one call that differ from the exact result. Any wrong
 * element: exit status 1.
 */
#include "nccl_table.h"

#include <limits.h>
#include <mpi.h>

typedef struct {
  int allreduce; /* else broadcast */
  int inPlace;
  int root;
  int count;
  float* send;
  float* recv;
} Collective;

static void callCollective(void* state) {
  const Collective* c = state;
  if (!c->allreduce)
    MPI_Bcast(c->send, c->count, MPI_FLOAT, c->root, MPI_COMM_WORLD);
  else if (c->inPlace)
    MPI_Allreduce(MPI_IN_PLACE, c->send, c->count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  else
    MPI_Allreduce(c->send, c->recv, c->count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
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

/* Wrong elements of one checked call, summed over the ranks. */
static double check(Collective* c, int rank, int nranks) {
  const size_t n = (size_t)c->count;
  float* out = c->inPlace ? c->send : c->recv;
  memset(c->recv, 0xff, n * sizeof(float)); /* NaN: a call that writes nothing cannot pass */
  memset(c->send, 0xff, n * sizeof(float));
  if (c->allreduce || rank == c->root)
    for (size_t i = 0; i < n; ++i) c->send[i] = pattern(i, rank);
  callCollective(c);
  long wrong = 0;
  for (size_t i = 0; i < n; ++i) {
    float want = 0.0f;
    if (c->allreduce)
      for (int r = 0; r < nranks; ++r) want += pattern(i, r);
    else
      want = pattern(i, c->root);
    wrong += out[i] != want;
  }
  return combine(c, (double)wrong, kRankSum);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, nranks;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);

  PeerOptions o;
  const int first = peerParseOptions(argc, argv, &o, rank == 0);
  const char* name = first >= 0 && first + 1 == argc ? argv[first] : "";
  const int allreduce = strcmp(name, "allreduce") == 0;
  if (first < 0 || (!allreduce && strcmp(name, "broadcast") != 0) || o.root >= nranks ||
      o.maxBytes / sizeof(float) > INT_MAX) {
    if (rank == 0 && first >= 0)
      fprintf(stderr, "usage: mpirun -n N %s allreduce|broadcast [flags] (-r < N, -e < 8G)\n",
              argv[0]);
    MPI_Finalize();
    return 2;
  }

  Collective c = {.allreduce = allreduce, .root = o.root};
  c.send = malloc(o.maxBytes);
  c.recv = malloc(o.maxBytes);
  if (!c.send || !c.recv) {
    fprintf(stderr, "mpi_collective: cannot allocate 2 x %zu bytes\n", o.maxBytes);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  const PeerCalls calls = {callCollective, barrier, combine, &c};
  const double busFactor = allreduce ? 2.0 * (nranks - 1) / nranks : 1.0;

  if (rank == 0) {
    char version[MPI_MAX_LIBRARY_VERSION_STRING], cpus[256];
    int len;
    MPI_Get_library_version(version, &len);
    version[strcspn(version, ",\n")] = '\0';
    peerDescribeAffinity(cpus, sizeof cpus);
    printf("# mpi_collective %s: %s, %d ranks, float32%s; rank 0 cpus %s\n", name, version,
           nranks, allreduce ? " sum" : ", in-place only (MPI_Bcast has one buffer)", cpus);
    printf("# -b %zu -e %zu -f %zu -n %ld -w %ld -c %d -a %d --min-time %g\n", o.minBytes,
           o.maxBytes, o.factor, o.iters, o.warmup, o.check, (int)o.average, o.minTime);
    peerPrintHeader();
    fflush(stdout);
  }

  TableTotals totals = {0};
  for (size_t bytes = o.minBytes; bytes; bytes = peerNextSize(&o, bytes)) {
    c.count = (int)(bytes / sizeof(float));
    const size_t used = (size_t)c.count * sizeof(float);
    if (rank == 0) peerPrintRowStart(used, allreduce ? "sum" : "none", allreduce ? -1 : o.root);
    for (c.inPlace = 0; c.inPlace <= 1; ++c.inPlace) {
      if (!allreduce && !c.inPlace) {
        if (rank == 0) peerPrintNoMode();
        continue;
      }
      memset(c.send, 0, used);
      memset(c.recv, 0, used);
      const double seconds = peerTimePerCall(&o, &calls);
      const double wrong = o.check ? check(&c, rank, nranks) : -1.0;
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
