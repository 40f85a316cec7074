/* The TCP loopback link's limit for a collective between two processes on this host: two
 * processes, pinned to cpus 0 and 1, each send a buffer of each size to the other over one
 * TCP connection on 127.0.0.1 while receiving the other's (TCP_NODELAY, non-blocking calls
 * in a spinning loop, 1 MiB per send/recv, send buffer as Loom's), in nccl-tests' loop and table
 * (perf/peers/nccl_table.h).
 * perf/compare.sh sets it beside every collective's busbw over TCP: a 2-rank allreduce sends
 * and receives its whole buffer on each rank, which is what one exchange here moves.
 *
 *   cc -O2 -Wall -Wextra -o tcp_loopback_bw tcp_loopback_bw.c -lm
 *   ./tcp_loopback_bw [-b 8] [-e 128M] [-f 2] [-n 20] [-w 1] [-c 1] [--min-time S]
 *
 * The row reads type float, redop none, root -1; algbw = busbw = bytes each way per second
 * (the first process's time per exchange). Out-of-place columns only; -a has nothing to
 * combine (one process times). The check: the second process sends (i % 61) + 1, and the
 * first counts the received elements that differ.
 */
#include "nccl_table.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

enum { kPiece = 1 << 20 };
enum { kLoomSendBuffer = 262144 }; /* LOOM_SOCKET_SNDBUF's default (src/base/env.cc) */

typedef struct {
  int fd;
  int leader; /* the process that times and tells the other the size of each exchange */
  float* out;
  float* in;
  size_t bytes;
} Exchange;

static void die(const char* what) {
  perror(what);
  exit(1);
}

/* Sends and receives `bytes` at once: neither side may wait for its send to finish before
 * reading, or both would stall once the socket buffers are full. Both processes spin on
 * non-blocking calls rather than sleep in poll, as a collective's progress loop does while
 * it expects data: a wakeup costs tens of microseconds on a virtual machine. */
static void swapBytes(Exchange* x, size_t bytes) {
  size_t sent = 0, got = 0;
  const char* out = (const char*)x->out;
  char* in = (char*)x->in;
  while (sent < bytes || got < bytes) {
    if (sent < bytes) {
      size_t n = bytes - sent < kPiece ? bytes - sent : kPiece;
      ssize_t k = send(x->fd, out + sent, n, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (k > 0) sent += (size_t)k;
      else if (k < 0 && errno != EAGAIN && errno != EINTR) die("send");
    }
    if (got < bytes) {
      size_t n = bytes - got < kPiece ? bytes - got : kPiece;
      ssize_t k = recv(x->fd, in + got, n, MSG_DONTWAIT);
      if (k > 0) got += (size_t)k;
      else if (k == 0) {
        fprintf(stderr, "tcp_loopback_bw: the other process closed the connection\n");
        exit(1);
      } else if (errno != EAGAIN && errno != EINTR) die("recv");
    }
  }
}

/* The leader's call: the size (8 bytes, 0: stop), then the exchange. The follower answers
 * every size with the same exchange until told to stop. */
static void callExchange(void* state) {
  Exchange* x = state;
  uint64_t size = x->bytes;
  while (send(x->fd, &size, sizeof size, MSG_DONTWAIT | MSG_NOSIGNAL) != (ssize_t)sizeof size) {
    if (errno != EAGAIN && errno != EINTR) die("send");
  }
  swapBytes(x, x->bytes);
}

static void follow(Exchange* x) {
  for (;;) {
    uint64_t size = 0;
    size_t have = 0;
    while (have < sizeof size) {
      ssize_t k = recv(x->fd, (char*)&size + have, sizeof size - have, MSG_DONTWAIT);
      if (k == 0) return;
      if (k > 0) have += (size_t)k;
      else if (errno != EAGAIN && errno != EINTR) die("recv");
    }
    if (size == 0) return;
    swapBytes(x, size);
  }
}

static void noBarrier(void* state) { (void)state; }

static double leaderOnly(void* state, double value, RankCombine how) {
  (void)state;
  (void)how;
  return value;
}

static void fill(float* data, size_t n, int cpu) {
  for (size_t i = 0; i < n; ++i) data[i] = (float)(i % 61u + (unsigned)cpu);
}

/* Both send their pattern once; the leader counts what differs from the follower's. */
static double check(Exchange* x) {
  const size_t n = x->bytes / sizeof(float);
  memset(x->in, 0xff, x->bytes); /* NaN */
  callExchange(x);
  long wrong = 0;
  for (size_t i = 0; i < n; ++i) wrong += x->in[i] != (float)(i % 61u + 1u);
  return (double)wrong;
}

static void pinTo(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (sched_setaffinity(0, sizeof set, &set) != 0) perror("sched_setaffinity (running unpinned)");
}

/* LOOM_SOCKET_SNDBUF, as Loom reads it (its default when unset; 0: the kernel's autotuning). */
static int loomSendBuffer(void) {
  const char* env = getenv("LOOM_SOCKET_SNDBUF");
  return env != NULL && *env != '\0' ? atoi(env) : kLoomSendBuffer;
}

/* The connection is set up as Loom's socket links are: TCP_NODELAY, and the send buffer
 * capped at `sendBuffer`, which carries more each way than autotuning here
 * (docs/RESULTS.md, "TCP loopback"). */
static int setUpLikeLoom(int fd, int sendBuffer) {
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (sendBuffer > 0) setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sendBuffer, sizeof sendBuffer);
  return fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

int main(int argc, char** argv) {
  PeerOptions o;
  if (peerParseFlagsOnly(argc, argv, &o) != 0) return 2;
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in addr = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK), .sin_port = 0};
  socklen_t len = sizeof addr;
  if (listener < 0 || bind(listener, (struct sockaddr*)&addr, sizeof addr) != 0 ||
      getsockname(listener, (struct sockaddr*)&addr, &len) != 0 || listen(listener, 1) != 0) {
    die("listening on 127.0.0.1");
  }
  const int sendBuffer = loomSendBuffer();
  Exchange x = {-1, 1, malloc(o.maxBytes), malloc(o.maxBytes), 0};
  if (!x.out || !x.in) {
    fprintf(stderr, "tcp_loopback_bw: cannot allocate 2 x %zu bytes\n", o.maxBytes);
    return 1;
  }
  const pid_t child = fork();
  if (child < 0) die("fork");
  if (child == 0) {
    close(listener);
    pinTo(1);
    x.leader = 0;
    x.fd = socket(AF_INET, SOCK_STREAM, 0);
    if (x.fd < 0 || connect(x.fd, (struct sockaddr*)&addr, sizeof addr) != 0) die("connect");
    setUpLikeLoom(x.fd, sendBuffer);
    fill(x.out, o.maxBytes / sizeof(float), 1);
    memset(x.in, 0, o.maxBytes);
    follow(&x);
    return 0;
  }
  pinTo(0);
  x.fd = accept(listener, NULL, NULL);
  if (x.fd < 0) die("accept");
  close(listener);
  setUpLikeLoom(x.fd, sendBuffer);
  fill(x.out, o.maxBytes / sizeof(float), 0);
  memset(x.in, 0, o.maxBytes);

  char cpus[256];
  peerDescribeAffinity(cpus, sizeof cpus);
  printf("# tcp_loopback_bw: 2 processes (cpus 0 and 1), one TCP connection on 127.0.0.1 (SO_SNDBUF %d, 0: "
         "autotuned), each sends and receives every size at once; leader cpus %s\n",
         sendBuffer, cpus);
  printf("# -b %zu -e %zu -f %zu -n %ld -w %ld -c %d --min-time %g\n", o.minBytes, o.maxBytes, o.factor, o.iters,
         o.warmup, o.check, o.minTime);
  peerPrintHeader();
  fflush(stdout);

  const PeerCalls calls = {callExchange, noBarrier, leaderOnly, &x};
  TableTotals totals = {0};
  for (size_t bytes = o.minBytes; bytes; bytes = peerNextSize(&o, bytes)) {
    x.bytes = bytes / sizeof(float) * sizeof(float);
    if (x.bytes == 0) continue; /* a size of 0 tells the other process to stop */
    const double seconds = peerTimePerCall(&o, &calls);
    const double wrong = o.check ? check(&x) : -1.0;
    peerPrintPlainRow(&totals, x.bytes, seconds, wrong);
  }
  peerPrintFooter(&totals);
  x.bytes = 0;
  uint64_t stop = 0;
  if (send(x.fd, &stop, sizeof stop, MSG_NOSIGNAL) != (ssize_t)sizeof stop) perror("send (stop)");
  int status = 0;
  waitpid(child, &status, 0);
  free(x.out);
  free(x.in);
  return totals.wrong > 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0 ? 1 : 0;
}
