/* memcpy between two buffers of each size by T threads at once, in nccl-tests' loop and table
 * (perf/peers/nccl_table.h): the memory system's limit, which perf/compare.sh sets beside
 * every collective's busbw. With -t set to the number of ranks it measures what the ranks'
 * cores can move together, sharing the memory bus as the ranks of a collective do.
 *
 *   mpicc -O2 -Wall -Wextra -pthread -o memcpy_bw memcpy_bw.c -lm
 *   taskset -c 0,1 ./memcpy_bw -t 2 [-b 8] [-e 128M] [-f 2] [-n 20] [-w 1] [-c 1] [--min-time S]
 *
 * Thread i runs on the i-th cpu this process may use (T cpus or more: pinned; fewer: not
 * pinned, said in the header) and copies its own pair of buffers, which it first touched.
 * Each timed call starts the T copies together and ends when the last one is done. The row
 * reads type float, redop none, root -1; algbw = busbw = bytes one thread copied per second
 * while all T copied (the memory traffic of all threads together is 2 T times that: read +
 * write). The copy is measured in the out-of-place columns; in-place (a copy onto itself)
 * reads `-`. -a is accepted and has nothing to combine. The check copies (i % 61) onto NaN in
 * every thread's buffers and counts the elements that differ.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>

#include "nccl_table.h"

enum { kMaxThreads = 256 };

typedef struct {
  float* from;
  float* to;
} Buffers;

/* A barrier that spins (yielding after a while): a futex wake-up takes tens of microseconds on
 * a virtual machine, as long as a 1 MiB copy, and would be measured as copy time. */
typedef struct {
  atomic_int arrived;
  atomic_int generation;
  int count;
} SpinBarrier;

static void spinWait(SpinBarrier* b) {
  const int generation = atomic_load_explicit(&b->generation, memory_order_acquire);
  if (atomic_fetch_add_explicit(&b->arrived, 1, memory_order_acq_rel) == b->count - 1) {
    atomic_store_explicit(&b->arrived, 0, memory_order_relaxed);
    atomic_fetch_add_explicit(&b->generation, 1, memory_order_release);
    return;
  }
  for (long spins = 0; atomic_load_explicit(&b->generation, memory_order_acquire) == generation; ++spins) {
    if (spins > 100000) sched_yield();
  }
}

typedef struct {
  int threads;
  size_t bytes; /* of the current size; set while the workers wait at `start` */
  int stopping;
  SpinBarrier start, done;
  Buffers buffers[kMaxThreads];
  int cpus[kMaxThreads]; /* -1: not pinned */
} Copies;

typedef struct {
  Copies* copies;
  int index;
  size_t maxBytes;
  int failed;
} Worker;

/* Called through a volatile pointer so that the compiler cannot fold the repeated identical
 * copies of the timed loop into one. */
static void* (*volatile copyBytes)(void*, const void*, size_t) = memcpy;

static void pinTo(int cpu) {
  if (cpu < 0) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  sched_setaffinity(0, sizeof set, &set);
}

/* Allocates and touches this thread's buffers where it runs. */
static int allocate(Copies* c, int index, size_t maxBytes) {
  Buffers* b = &c->buffers[index];
  b->from = malloc(maxBytes);
  b->to = malloc(maxBytes);
  if (!b->from || !b->to) return -1;
  memset(b->from, 0, maxBytes);
  memset(b->to, 0, maxBytes);
  return 0;
}

static void copyOwn(Copies* c, int index) {
  copyBytes(c->buffers[index].to, c->buffers[index].from, c->bytes);
}

static void* workerMain(void* arg) {
  Worker* w = arg;
  Copies* c = w->copies;
  pinTo(c->cpus[w->index]);
  w->failed = allocate(c, w->index, w->maxBytes);
  spinWait(&c->done); /* allocated */
  for (;;) {
    spinWait(&c->start);
    if (c->stopping) return NULL;
    copyOwn(c, w->index);
    spinWait(&c->done);
  }
}

static void callCopy(void* state) {
  Copies* c = state;
  spinWait(&c->start);
  copyOwn(c, 0);
  spinWait(&c->done);
}

static void noBarrier(void* state) { (void)state; }

static double oneRank(void* state, double value, RankCombine how) {
  (void)state;
  (void)how;
  return value;
}

static double check(Copies* c) {
  const size_t n = c->bytes / sizeof(float);
  for (int t = 0; t < c->threads; ++t) {
    for (size_t i = 0; i < n; ++i) c->buffers[t].from[i] = (float)(i % 61u);
    memset(c->buffers[t].to, 0xff, c->bytes); /* NaN */
  }
  callCopy(c);
  long wrong = 0;
  for (int t = 0; t < c->threads; ++t) {
    for (size_t i = 0; i < n; ++i) wrong += c->buffers[t].to[i] != (float)(i % 61u);
  }
  return (double)wrong;
}

/* Takes -t N / --threads N out of argv (nccl_table.h's parser knows only the shared flags). */
static int takeThreads(int* argc, char** argv, int* threads) {
  int kept = 1;
  for (int i = 1; i < *argc; ++i) {
    if (strcmp(argv[i], "-t") == 0 || strcmp(argv[i], "--threads") == 0) {
      char* end = NULL;
      const long t = i + 1 < *argc ? strtol(argv[i + 1], &end, 10) : 0;
      if (end == NULL || *end != '\0' || t < 1 || t > kMaxThreads) {
        fprintf(stderr, "memcpy_bw: %s takes a thread count from 1 to %d\n", argv[i], kMaxThreads);
        return -1;
      }
      *threads = (int)t;
      ++i;
    } else {
      argv[kept++] = argv[i];
    }
  }
  *argc = kept;
  return 0;
}

/* Thread i's cpu: the i-th one this process may use, when there are enough for every thread. */
static int chooseCpus(Copies* c) {
  cpu_set_t set;
  int allowed[kMaxThreads], count = 0;
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    for (int cpu = 0; cpu < CPU_SETSIZE && count < kMaxThreads; ++cpu) {
      if (CPU_ISSET(cpu, &set)) allowed[count++] = cpu;
    }
  }
  const int pinned = count >= c->threads;
  for (int t = 0; t < c->threads; ++t) c->cpus[t] = pinned ? allowed[t] : -1;
  return pinned;
}

int main(int argc, char** argv) {
  static Copies c;
  c.threads = 1;
  if (takeThreads(&argc, argv, &c.threads) != 0) return 2;
  PeerOptions o;
  if (peerParseFlagsOnly(argc, argv, &o) != 0) return 2;
  char cpus[256];
  peerDescribeAffinity(cpus, sizeof cpus);
  const int pinned = chooseCpus(&c);

  c.start.count = c.done.count = c.threads;
  static Worker workers[kMaxThreads];
  pthread_t ids[kMaxThreads];
  for (int t = 1; t < c.threads; ++t) {
    workers[t] = (Worker){&c, t, o.maxBytes, 0};
    if (pthread_create(&ids[t], NULL, workerMain, &workers[t]) != 0) {
      fprintf(stderr, "memcpy_bw: cannot start thread %d\n", t);
      return 1;
    }
  }
  pinTo(c.cpus[0]);
  int failed = allocate(&c, 0, o.maxBytes);
  spinWait(&c.done); /* every thread allocated */
  for (int t = 1; t < c.threads; ++t) failed |= workers[t].failed;
  if (failed) {
    fprintf(stderr, "memcpy_bw: cannot allocate 2 x %zu bytes per thread\n", o.maxBytes);
    return 1;
  }
  const PeerCalls calls = {callCopy, noBarrier, oneRank, &c};

  printf("# memcpy_bw: %d thread%s copying at once (busbw: one thread's bytes copied per second), "
         "memcpy, out-of-place only; cpus %s%s\n",
         c.threads, c.threads > 1 ? "s" : "", cpus, pinned ? ", thread i on the i-th" : " (not pinned: fewer cpus than threads)");
  printf("# -t %d -b %zu -e %zu -f %zu -n %ld -w %ld -c %d --min-time %g\n", c.threads, o.minBytes,
         o.maxBytes, o.factor, o.iters, o.warmup, o.check, o.minTime);
  peerPrintHeader();
  fflush(stdout);

  TableTotals totals = {0};
  for (size_t bytes = o.minBytes; bytes; bytes = peerNextSize(&o, bytes)) {
    c.bytes = bytes / sizeof(float) * sizeof(float);
    const double seconds = peerTimePerCall(&o, &calls);
    const double wrong = o.check ? check(&c) : -1.0;
    peerPrintPlainRow(&totals, c.bytes, seconds, wrong);
  }
  peerPrintFooter(&totals);

  c.stopping = 1;
  spinWait(&c.start);
  for (int t = 1; t < c.threads; ++t) pthread_join(ids[t], NULL);
  for (int t = 0; t < c.threads; ++t) {
    free(c.buffers[t].from);
    free(c.buffers[t].to);
  }
  return totals.wrong > 0 ? 1 : 0;
}
