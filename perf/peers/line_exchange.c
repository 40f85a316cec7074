/* The floor of a small allreduce over shared memory on this host: two processes, pinned to
 * cpus 0 and 1, each write a flag and 8 bytes into a cache line of a shared mapping and wait
 * for the other's, round after round (double-buffered lines, as Loom's one-shot board and
 * Open MPI's fast boxes are). Nothing else happens between rounds, so the time per round is
 * what moving one cache line each way between the two cores costs: any shared-memory
 * allreduce of a few bytes takes at least this long. docs/RESULTS.md ("Small allreduces")
 * sets it beside Loom's and Open MPI's 8 B allreduce.
 *
 *   cc -O2 -Wall -Wextra -o line_exchange line_exchange.c
 *   ./line_exchange [ROUNDS]          (default 2000000; prints us per round)
 */
#define _GNU_SOURCE
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct {
  _Alignas(64) _Atomic uint64_t round;
  char data[8];
} Line;

typedef struct {
  Line lines[2]; /* round % 2 */
} Area;

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (sched_setaffinity(0, sizeof set, &set) != 0) perror("sched_setaffinity");
}

int main(int argc, char** argv) {
  const long rounds = argc > 1 ? atol(argv[1]) : 2000000;
  const long warmup = 1000;
  if (rounds <= warmup) {
    fprintf(stderr, "line_exchange: ROUNDS must be over %ld\n", warmup);
    return 2;
  }
  Area* areas = mmap(NULL, 2 * sizeof(Area), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (areas == MAP_FAILED) {
    perror("mmap");
    return 1;
  }
  const pid_t child = fork();
  if (child < 0) {
    perror("fork");
    return 1;
  }
  const int me = child == 0;
  pin(me);
  float mine = (float)(me + 1), sum = 0;
  double start = 0;
  for (long k = 1; k <= rounds; ++k) {
    if (k == warmup) start = now();
    Line* own = &areas[me].lines[k & 1];
    memcpy(own->data, &mine, sizeof mine);
    atomic_store_explicit(&own->round, (uint64_t)k, memory_order_release);
    Line* peer = &areas[!me].lines[k & 1];
    while (atomic_load_explicit(&peer->round, memory_order_acquire) != (uint64_t)k) {
    }
    float theirs;
    memcpy(&theirs, peer->data, sizeof theirs);
    sum = mine + theirs;
  }
  const double seconds = now() - start;
  if (me) return sum == 3.0f ? 0 : 1;
  int status = 0;
  waitpid(child, &status, 0);
  printf("line_exchange: %.3f us per round (%ld rounds)\n", seconds / (double)(rounds - warmup) * 1e6, rounds - warmup);
  return sum == 3.0f && WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}
