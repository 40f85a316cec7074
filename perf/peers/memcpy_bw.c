/* One thread's memcpy between two buffers of each size, in nccl-tests' loop and table
 * (perf/peers/nccl_table.h): the memory system's limit for one core, which perf/compare.sh
 * sets beside every collective's busbw.
 *
 *   mpicc -O2 -Wall -Wextra -o memcpy_bw memcpy_bw.c -lm
 *   taskset -c 0 ./memcpy_bw [-b 8] [-e 128M] [-f 2] [-n 20] [-w 1] [-c 1] [--min-time S]
 *
 * The row reads type float, redop none, root -1; algbw = busbw = bytes copied per second
 * (the memory traffic is twice that: read + write). The copy is measured in the out-of-place
 * columns; in-place (a copy onto itself) reads `-`. -a is accepted and has nothing to combine.
 * The check copies (i % 61) onto NaN and counts the elements that differ.
 */
#include "nccl_table.h"

typedef struct {
  float* from;
  float* to;
  size_t bytes;
} Copy;

/* Called through a volatile pointer so that the compiler cannot fold the repeated identical
 * copies of the timed loop into one. */
static void* (*volatile copyBytes)(void*, const void*, size_t) = memcpy;

static void callCopy(void* state) {
  const Copy* c = state;
  copyBytes(c->to, c->from, c->bytes);
}

static void noBarrier(void* state) { (void)state; }

static double oneRank(void* state, double value, RankCombine how) {
  (void)state;
  (void)how;
  return value;
}

static double check(Copy* c) {
  const size_t n = c->bytes / sizeof(float);
  for (size_t i = 0; i < n; ++i) c->from[i] = (float)(i % 61u);
  memset(c->to, 0xff, c->bytes); /* NaN */
  callCopy(c);
  long wrong = 0;
  for (size_t i = 0; i < n; ++i) wrong += c->to[i] != (float)(i % 61u);
  return (double)wrong;
}

int main(int argc, char** argv) {
  PeerOptions o;
  if (peerParseFlagsOnly(argc, argv, &o) != 0) return 2;
  Copy c = {malloc(o.maxBytes), malloc(o.maxBytes), 0};
  if (!c.from || !c.to) {
    fprintf(stderr, "memcpy_bw: cannot allocate 2 x %zu bytes\n", o.maxBytes);
    return 1;
  }
  const PeerCalls calls = {callCopy, noBarrier, oneRank, &c};

  char cpus[256];
  peerDescribeAffinity(cpus, sizeof cpus);
  printf("# memcpy_bw: one thread, memcpy, out-of-place only; cpus %s\n", cpus);
  printf("# -b %zu -e %zu -f %zu -n %ld -w %ld -c %d --min-time %g\n", o.minBytes, o.maxBytes,
         o.factor, o.iters, o.warmup, o.check, o.minTime);
  peerPrintHeader();
  fflush(stdout);

  TableTotals totals = {0};
  for (size_t bytes = o.minBytes; bytes; bytes = peerNextSize(&o, bytes)) {
    c.bytes = bytes / sizeof(float) * sizeof(float);
    memset(c.from, 0, c.bytes);
    memset(c.to, 0, c.bytes);
    const double seconds = peerTimePerCall(&o, &calls);
    const double wrong = o.check ? check(&c) : -1.0;
    peerPrintPlainRow(&totals, c.bytes, seconds, wrong);
  }
  peerPrintFooter(&totals);
  free(c.from);
  free(c.to);
  return totals.wrong > 0 ? 1 : 0;
}
