/* Open MPI's MPI_Allreduce under the same loop and output as loom-host-allreduce, so that
 * perf/compare_host.sh can put the two side by side.
 *
 *   mpicc -O2 -o mpi_allreduce mpi_allreduce.c
 *   mpirun -n 2 --bind-to core ./mpi_allreduce -b 8 -e 128M -f 2
 *
 * float32 sum, out-of-place (no MPI_IN_PLACE). For each size: a calibration that doubles
 * the number of calls until a batch lasts 20 ms (it is also the warm-up), then 5 timed
 * batches of the same number of calls, about -T seconds in all (0.2 by default, at least one
 * call each). A batch's time is its mean per call on the slowest rank; time_us is the median
 * batch, fastest_us and slowest_us the extremes. busbw = algbw * 2(n-1)/n (nccl-tests'
 * allreduce factor); GB = 1e9.
 * Rank r holds (i + 3r) % 61 in element i, so every float sum is exact and the result is
 * compared bit for bit; a wrong element is reported and the exit status is 1.
 */
#define _GNU_SOURCE
#include <math.h>
#include <mpi.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* "8", "64K", "1M", "2G" -> bytes (nccl-tests' suffixes, powers of two). */
static size_t parseBytes(const char* s) {
  char* end = NULL;
  double v = strtod(s, &end);
  switch (*end) {
    case 'k':
    case 'K':
      v *= 1024.0;
      break;
    case 'm':
    case 'M':
      v *= 1024.0 * 1024.0;
      break;
    case 'g':
    case 'G':
      v *= 1024.0 * 1024.0 * 1024.0;
      break;
    default:
      break;
  }
  return (size_t)v;
}

static float pattern(size_t i, int rank) { return (float)((i + 3u * (size_t)rank) % 61u); }

/* Index of the first wrong element, or -1. */
static long firstWrong(const float* recv, size_t count, int nranks) {
  for (size_t i = 0; i < count; ++i) {
    float want = 0.0f;
    for (int r = 0; r < nranks; ++r) want += pattern(i, r);
    if (recv[i] != want) return (long)i;
  }
  return -1;
}

#define BATCHES 5

static int compareDoubles(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

static double maxOverRanks(double v) {
  double out;
  MPI_Allreduce(&v, &out, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return out;
}

static void describeAffinity(char* out, size_t len) {
  cpu_set_t set;
  out[0] = '\0';
  if (sched_getaffinity(0, sizeof set, &set) != 0) return;
  size_t used = 0;
  for (int c = 0; c < CPU_SETSIZE && used + 8 < len; ++c)
    if (CPU_ISSET(c, &set))
      used += (size_t)snprintf(out + used, len - used, used ? ",%d" : "%d", c);
}

int main(int argc, char** argv) {
  size_t minBytes = 8, maxBytes = 128u << 20;
  double factor = 2.0, targetSeconds = 0.2;
  int opt;
  while ((opt = getopt(argc, argv, "b:e:f:T:h")) != -1) {
    switch (opt) {
      case 'b':
        minBytes = parseBytes(optarg);
        break;
      case 'e':
        maxBytes = parseBytes(optarg);
        break;
      case 'f':
        factor = atof(optarg);
        break;
      case 'T':
        targetSeconds = atof(optarg);
        break;
      default:
        fprintf(stderr, "usage: %s [-b minbytes] [-e maxbytes] [-f factor] [-T seconds]\n",
                argv[0]);
        return 2;
    }
  }
  if (factor <= 1.0 || minBytes < 4 || maxBytes < minBytes) {
    fprintf(stderr, "mpi_allreduce: need -f > 1 and 4 <= -b <= -e\n");
    return 2;
  }

  MPI_Init(&argc, &argv);
  int rank, nranks;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);

  const size_t maxCount = maxBytes / sizeof(float);
  float* send = malloc(maxCount * sizeof(float));
  float* recv = malloc(maxCount * sizeof(float));
  if (!send || !recv) {
    fprintf(stderr, "mpi_allreduce: cannot allocate 2 x %zu bytes\n", maxBytes);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  for (size_t i = 0; i < maxCount; ++i) send[i] = pattern(i, rank);

  char cpus[256];
  describeAffinity(cpus, sizeof cpus);
  if (rank == 0) {
    int len;
    char version[MPI_MAX_LIBRARY_VERSION_STRING];
    MPI_Get_library_version(version, &len);
    version[strcspn(version, ",\n")] = '\0';
    printf("# mpi_allreduce: %s, %d ranks, float32 sum, out-of-place; rank 0 cpus %s\n", version,
           nranks, cpus);
    printf(
        "# time = median of 5 batches of the mean per call on the slowest rank; busbw = algbw * "
        "2(n-1)/n; GB = 1e9\n");
    printf("#%14s %12s %9s %12s %9s %9s %12s %12s\n", "bytes", "count", "iters", "time_us", "algbw",
           "busbw", "fastest_us", "slowest_us");
    fflush(stdout);
  }

  int failed = 0;
  size_t bytes = minBytes;
  for (;;) {
    const size_t count = bytes / sizeof(float);
    const size_t used = count * sizeof(float);
    memset(recv, 0xff, used); /* NaN: a call that writes nothing cannot pass */

    /* Calibration, also the warm-up: double the calls until a batch lasts 20 ms on the
     * slowest rank. Ranks agree on every decision through maxOverRanks. */
    long calls = 1;
    double batch;
    for (;;) {
      MPI_Barrier(MPI_COMM_WORLD);
      const double t0 = now();
      for (long k = 0; k < calls; ++k)
        MPI_Allreduce(send, recv, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      batch = maxOverRanks(now() - t0);
      if (batch >= 0.02 || calls >= (1L << 24)) break;
      calls *= 2;
    }
    long perBatch = (long)ceil(targetSeconds / BATCHES * (double)calls / batch);
    if (perBatch < 1) perBatch = 1;
    long wrong = firstWrong(recv, count, nranks);

    double perCall[BATCHES];
    for (int b = 0; b < BATCHES; ++b) {
      MPI_Barrier(MPI_COMM_WORLD);
      const double t0 = now();
      for (long k = 0; k < perBatch; ++k)
        MPI_Allreduce(send, recv, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      perCall[b] = maxOverRanks((now() - t0) / (double)perBatch);
    }
    qsort(perCall, BATCHES, sizeof perCall[0], compareDoubles);
    const double seconds = perCall[BATCHES / 2];
    if (wrong < 0) wrong = firstWrong(recv, count, nranks);

    if (wrong >= 0) {
      fprintf(stderr, "mpi_allreduce: rank %d, %zu bytes: element %ld is %g\n", rank, used, wrong,
              (double)recv[wrong]);
      failed = 1;
    }
    const double algbw = (double)used / seconds / 1e9;
    const double busbw = algbw * 2.0 * (nranks - 1) / nranks;
    if (rank == 0) {
      printf("%15zu %12zu %9ld %12.2f %9.3f %9.3f %12.2f %12.2f\n", used, count, perBatch * BATCHES,
             seconds * 1e6, algbw, busbw, perCall[0] * 1e6, perCall[BATCHES - 1] * 1e6);
      fflush(stdout);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (bytes >= maxBytes) break;
    size_t next = (size_t)((double)bytes * factor);
    if (next <= bytes) next = bytes + 1;
    bytes = next > maxBytes ? maxBytes : next;
  }

  int anyFailed = 0;
  MPI_Allreduce(&failed, &anyFailed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  free(send);
  free(recv);
  MPI_Finalize();
  return anyFailed ? 1 : 0;
}
