/* What perf/peers/mpi_collective.c and perf/peers/memcpy_bw.c share with loom-perf: nccl-tests'
 * flags, size sweep, timing loop and output table, so that perf/compare_table.py reads every
 * program with one parser. Header-only (static inline): two small programs include it.
 *
 * Flags (nccl-tests' letters and defaults, except the sweep's, plus loom-perf's --min-time):
 *   -b 8  -e 128M  -f 2   sizes in bytes: from -b, times -f while <= -e (K, M, G: powers of 2)
 *   -n 20                 timed calls, at least
 *   -w 1                  warm-up calls per size and mode
 *   -c 1                  check the result of one call per size and mode (0: no check)
 *   -a 1                  how the ranks' times become one: 0 rank 0's, 1 mean, 2 min, 3 max
 *   -r 0                  broadcast's root
 *   --min-time S          lengthen the timed loop until it lasts S seconds on the slowest rank
 *
 * A data row is nccl-tests' 13 fields:
 *   size count type redop root  time algbw busbw #wrong (out-of-place)  the same (in-place)
 * with `-` in the four fields of a mode the program cannot measure. Times in us, GB = 1e9.
 */
#ifndef LOOM_PERF_PEERS_NCCL_TABLE_H
#define LOOM_PERF_PEERS_NCCL_TABLE_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* sched_getaffinity */
#endif
#include <getopt.h>
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* How the ranks agree on one number. The first four are -a's values. */
typedef enum { kRankZero = 0, kRankMean = 1, kRankMin = 2, kRankMax = 3, kRankSum = 4 } RankCombine;

typedef struct {
  size_t minBytes, maxBytes, factor;
  long iters;
  long warmup;
  int check;
  RankCombine average;
  int root;
  double minTime;
} PeerOptions;

/* What the timing loop needs from a program: one call of what it measures, and how its ranks
 * meet and agree (a single process passes a no-op barrier and returns the value itself). */
typedef struct {
  void (*call)(void* state);
  void (*barrier)(void* state);
  double (*combine)(void* state, double value, RankCombine how); /* same result on all ranks */
  void* state;
} PeerCalls;

/* Sums for the two footer lines. */
typedef struct {
  double busbwSum;
  long measured;
  double wrong;
} TableTotals;

/* nccl-tests' timed loops are capped at 2^24 calls too. */
#define PEER_MAX_ITERS (1L << 24)

static inline double peerNow(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* "8", "64K", "1M", "2G" -> bytes; 0 for text that is not a size. */
static inline size_t peerParseBytes(const char* text) {
  char* end = NULL;
  double value = strtod(text, &end);
  if (end == text || value < 0) return 0;
  switch (*end) {
    case 'k': case 'K': value *= 1024.0; ++end; break;
    case 'm': case 'M': value *= 1024.0 * 1024.0; ++end; break;
    case 'g': case 'G': value *= 1024.0 * 1024.0 * 1024.0; ++end; break;
    default: break;
  }
  return *end ? 0 : (size_t)value;
}

/* Fills *o from the flags. Returns optind (where the non-flag arguments start), or -1 after
 * printing what was wrong to stderr when `report` is set (only one rank needs to say it). */
static inline int peerParseOptions(int argc, char** argv, PeerOptions* o, int report) {
  static const struct option longOptions[] = {{"min-time", required_argument, NULL, 'M'},
                                              {"help", no_argument, NULL, 'h'},
                                              {NULL, 0, NULL, 0}};
  *o = (PeerOptions){.minBytes = 8, .maxBytes = 128u << 20, .factor = 2, .iters = 20,
                     .warmup = 1, .check = 1, .average = kRankMean, .root = 0, .minTime = 0};
  const char* problem = NULL;
  int opt, average = 1;
  opterr = report;
  while (!problem &&
         (opt = getopt_long(argc, argv, "b:e:f:n:w:c:a:r:h", longOptions, NULL)) != -1) {
    switch (opt) {
      case 'b': o->minBytes = peerParseBytes(optarg); break;
      case 'e': o->maxBytes = peerParseBytes(optarg); break;
      case 'f': o->factor = (size_t)atol(optarg); break;
      case 'n': o->iters = atol(optarg); break;
      case 'w': o->warmup = atol(optarg); break;
      case 'c': o->check = atoi(optarg); break;
      case 'a': average = atoi(optarg); break;
      case 'r': o->root = atoi(optarg); break;
      case 'M': o->minTime = atof(optarg); break;
      case 'h': problem = "usage"; break;
      default: problem = "unknown flag"; break;
    }
  }
  o->average = (RankCombine)average;
  if (!problem && (o->minBytes < 4 || o->maxBytes < o->minBytes)) problem = "need 4 <= -b <= -e";
  if (!problem && o->factor < 2) problem = "need an integer -f >= 2";
  if (!problem && (o->iters < 1 || o->warmup < 0)) problem = "need -n >= 1 and -w >= 0";
  if (!problem && (average < 0 || average > 3)) problem = "need -a 0, 1, 2 or 3";
  if (!problem && (o->check < 0 || o->root < 0)) problem = "need -c >= 0 and -r >= 0";
  if (problem) {
    if (report)
      fprintf(stderr,
              "%s: %s\nflags: [-b 8] [-e 128M] [-f 2] [-n 20] [-w 1] [-c 1] [-a 1] [-r 0] "
              "[--min-time S]\n",
              argv[0], problem);
    return -1;
  }
  return optind;
}

/* peerParseOptions for a program that takes flags only: 0, or 2 after saying what was wrong. */
static inline int peerParseFlagsOnly(int argc, char** argv, PeerOptions* o) {
  const int first = peerParseOptions(argc, argv, o, 1);
  if (first < 0) return 2;
  if (first != argc) {
    fprintf(stderr, "%s: unexpected argument '%s'\n", argv[0], argv[first]);
    return 2;
  }
  return 0;
}

/* The size after `bytes`, or 0 past the end (nccl-tests: times -f while <= -e). */
static inline size_t peerNextSize(const PeerOptions* o, size_t bytes) {
  return bytes * o->factor <= o->maxBytes ? bytes * o->factor : 0;
}

/* Seconds per call: -w warm-up calls, then -n timed calls, more while the slowest rank's loop
 * is shorter than --min-time; the ranks' times combined as -a says. */
static inline double peerTimePerCall(const PeerOptions* o, const PeerCalls* p) {
  for (long i = 0; i < o->warmup; ++i) p->call(p->state);
  long iters = o->iters;
  double elapsed;
  for (;;) {
    p->barrier(p->state);
    const double t0 = peerNow();
    for (long i = 0; i < iters; ++i) p->call(p->state);
    elapsed = peerNow() - t0;
    const double slowest = p->combine(p->state, elapsed, kRankMax);
    if (o->minTime <= 0 || slowest >= o->minTime || iters >= PEER_MAX_ITERS) break;
    const double grown = ceil((double)iters * 1.2 * o->minTime / fmax(slowest, 1e-9));
    iters = grown > (double)PEER_MAX_ITERS ? PEER_MAX_ITERS : (long)grown;
  }
  return p->combine(p->state, elapsed / (double)iters, o->average);
}

/* The cpus this process may run on, "0,1" (shown in the header, to see what pinning did). */
static inline void peerDescribeAffinity(char* out, size_t len) {
  cpu_set_t set;
  size_t used = 0;
  out[0] = '\0';
  if (sched_getaffinity(0, sizeof set, &set) != 0) return;
  for (int c = 0; c < CPU_SETSIZE && used + 8 < len; ++c)
    if (CPU_ISSET(c, &set))
      used += (size_t)snprintf(out + used, len - used, used ? ",%d" : "%d", c);
}

/* `value` in `width` characters with the most decimals that fit, as nccl-tests does. */
static inline void peerFit(char* out, size_t len, int width, double value) {
  static const char* const formats[] = {"%*.2f", "%*.1f", "%*.0f"};
  for (int i = 0; i < 3; ++i)
    if (snprintf(out, len, formats[i], width, value) <= width) return;
  snprintf(out, len, "%*.1e", width, value);
}

/* nccl-tests' column headers, character for character. */
static inline void peerPrintHeader(void) {
  printf("#\n"
         "#                                                              out-of-place"
         "                       in-place\n"
         "#       size         count      type   redop    root"
         "     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n"
         "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)"
         "            (us)  (GB/s)  (GB/s)\n");
}

/* The five fields that open a row. */
static inline void peerPrintRowStart(size_t bytes, const char* redop, int root) {
  printf("%12li  %12li  %8s  %6s  %6i", (long)bytes, (long)(bytes / sizeof(float)), "float", redop,
         root);
}

/* One mode's four fields. busFactor turns algbw into busbw (nccl-tests' per collective);
 * wrong < 0: not checked. */
static inline void peerPrintMode(TableTotals* totals, size_t bytes, double seconds,
                                 double busFactor, double wrong) {
  char time[32], algbw[32], busbw[32];
  const double alg = (double)bytes / seconds / 1e9;
  peerFit(time, sizeof time, 7, seconds * 1e6);
  peerFit(algbw, sizeof algbw, 6, alg);
  peerFit(busbw, sizeof busbw, 6, alg * busFactor);
  if (wrong >= 0)
    printf("  %7s  %6s  %6s  %6g", time, algbw, busbw, wrong);
  else
    printf("  %7s  %6s  %6s  %6s", time, algbw, busbw, "N/A");
  totals->busbwSum += alg * busFactor;
  totals->measured += 1;
  if (wrong > 0) totals->wrong += wrong;
}

/* A mode the program cannot measure. */
static inline void peerPrintNoMode(void) { printf("  %7s  %6s  %6s  %6s", "-", "-", "-", "-"); }

/* A whole row of a program that measures one thing per size, shown as out of place (a copy,
 * an exchange): float elements, no redop, busbw = algbw. */
static inline void peerPrintPlainRow(TableTotals* totals, size_t bytes, double seconds, double wrong) {
  peerPrintRowStart(bytes, "none", -1);
  peerPrintMode(totals, bytes, seconds, 1.0, wrong);
  peerPrintNoMode();
  printf("\n");
  fflush(stdout);
}

static inline void peerPrintFooter(const TableTotals* totals) {
  printf("# Out of bounds values : %.0f %s\n", totals->wrong, totals->wrong > 0 ? "FAILED" : "OK");
  printf("# Avg bus bandwidth    : %g\n",
         totals->measured ? totals->busbwSum / (double)totals->measured : 0.0);
  printf("#\n");
}

#endif /* LOOM_PERF_PEERS_NCCL_TABLE_H */
