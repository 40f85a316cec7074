/* A program written against NCCL: compiled with the CUDA install's nccl.h, linked with
 * -lnccl, which must resolve to Loom's libnccl.so.2 (checked through the loader below).
 * It runs one section per invocation, as each of 1-4 processes under loomrun (rank and
 * size from LOOM_RANK / LOOM_WORLD_SIZE; the unique id goes from rank 0 to the others
 * through a file, as an MPI program would broadcast it), on host buffers with NULL streams:
 * the shim's host communicators (docs/COMPAT_NCCL.md).
 *
 *   nccl_abi_test SECTION      sections: abi environment collectives p2p errors premulsum
 *                              lifecycle split mismatch deadpeer initall
 *
 * Each rank prints its failed checks and "rank R: SECTION: N checks, N failed"; the exit
 * status is 1 when a check failed. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <limits.h>
#include <math.h>
#include <nccl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int rank = 0, nranks = 1;
static int checks = 0, failures = 0;

#define CHECK(cond, ...)                                                            \
  do {                                                                              \
    ++checks;                                                                       \
    if (!(cond)) {                                                                  \
      ++failures;                                                                   \
      fprintf(stderr, "rank %d: %s:%d: CHECK(%s) failed: ", rank, __FILE__, __LINE__, \
              #cond);                                                               \
      fprintf(stderr, __VA_ARGS__);                                                 \
      fputc('\n', stderr);                                                          \
    }                                                                               \
  } while (0)

/* A call that must succeed; the last error is printed when it does not. */
#define OK(call)                                                                      \
  do {                                                                                \
    ncclResult_t ok_result_ = (call);                                                 \
    CHECK(ok_result_ == ncclSuccess, "%s -> %s: %s", #call,                           \
          ncclGetErrorString(ok_result_), ncclGetLastError(NULL));                    \
  } while (0)

/* A call that must fail with `code` and leave a message. */
#define FAILS(code, call)                                                             \
  do {                                                                                \
    ncclResult_t fails_result_ = (call);                                              \
    CHECK(fails_result_ == (code), "%s -> %s, expected %s", #call,                    \
          ncclGetErrorString(fails_result_), ncclGetErrorString(code));               \
    CHECK(strlen(ncclGetLastError(NULL)) > 0, "%s left no message", #call);           \
  } while (0)

/* ---- the unique id, from rank 0 to the others ------------------------------------------ */

static char idPath[PATH_MAX];

static void sleepMs(int ms) {
  struct timespec t = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&t, NULL);
}

/* Rank 0 makes the id and publishes it (written, then renamed: readers see all or
 * nothing); the others wait up to 60 s for it. `tag` tells several ids of one run apart. */
static int shareId(ncclUniqueId* id, const char* tag) {
  char path[PATH_MAX + 32];
  snprintf(path, sizeof path, "%s.%s", idPath, tag);
  if (rank == 0) {
    if (ncclGetUniqueId(id) != ncclSuccess) {
      fprintf(stderr, "rank 0: ncclGetUniqueId: %s\n", ncclGetLastError(NULL));
      return 0;
    }
    char tmp[PATH_MAX + 40];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE* f = fopen(tmp, "wb");
    if (f == NULL || fwrite(id, sizeof *id, 1, f) != 1 || fclose(f) != 0 || rename(tmp, path) != 0) {
      perror("rank 0: writing the unique id");
      return 0;
    }
    return 1;
  }
  for (int waited = 0; waited < 60000; waited += 10) {
    FILE* f = fopen(path, "rb");
    if (f != NULL) {
      size_t n = fread(id, sizeof *id, 1, f);
      fclose(f);
      if (n == 1) return 1;
    }
    sleepMs(10);
  }
  fprintf(stderr, "rank %d: no unique id at %s after 60 s\n", rank, path);
  return 0;
}

static ncclComm_t initComm(const char* tag) {
  ncclUniqueId id;
  if (!shareId(&id, tag)) return NULL;
  ncclComm_t comm = NULL;
  OK(ncclCommInitRank(&comm, nranks, id, rank));
  return comm;
}

/* ---- elements of every type, as doubles ------------------------------------------------ */

static size_t typeSize(ncclDataType_t t) {
  static const size_t sizes[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
  return sizes[t];
}

static double halfToDouble(uint16_t h) {
  int e = (h >> 10) & 0x1f, m = h & 0x3ff;
  double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(m + 1024, e - 25);
  return (h & 0x8000) ? -v : v;
}

/* Exact for the small integers the tests use. */
static uint16_t smallIntToHalf(int v) {
  if (v == 0) return 0;
  uint16_t sign = v < 0 ? 0x8000 : 0;
  int a = v < 0 ? -v : v, e = 0;
  while ((a >> e) > 1) ++e;
  return (uint16_t)(sign | ((e + 15) << 10) | ((a << (10 - e)) & 0x3ff));
}

/* e4m3 (exponent bits 4, bias 7, NaN S.1111.111) and e5m2 (5, bias 15, IEEE-like). */
static double float8ToDouble(uint8_t b, int exponentBits) {
  int mantissaBits = 7 - exponentBits, bias = (1 << (exponentBits - 1)) - 1;
  int e = (b >> mantissaBits) & ((1 << exponentBits) - 1), m = b & ((1 << mantissaBits) - 1);
  double v;
  if (exponentBits == 4 && (b & 0x7f) == 0x7f) {
    v = NAN;
  } else if (exponentBits == 5 && e == 31) {
    v = m ? NAN : INFINITY;
  } else {
    v = e == 0 ? ldexp(m, 1 - bias - mantissaBits) : ldexp(m + (1 << mantissaBits), e - bias - mantissaBits);
  }
  return (b & 0x80) ? -v : v;
}

/* Exact for the small integers the tests use that the format holds (up to 16 in e4m3, 8 in
 * e5m2); others truncate, which the tolerance of near() covers. */
static uint8_t smallIntToFloat8(int v, int exponentBits) {
  if (v == 0) return 0;
  int mantissaBits = 7 - exponentBits, bias = (1 << (exponentBits - 1)) - 1;
  uint8_t sign = v < 0 ? 0x80 : 0;
  int a = v < 0 ? -v : v, e = 0;
  while ((a >> e) > 1) ++e;
  int mantissa = e >= mantissaBits ? (a >> (e - mantissaBits)) : (a << (mantissaBits - e));
  return (uint8_t)(sign | ((e + bias) << mantissaBits) | (mantissa & ((1 << mantissaBits) - 1)));
}

static double bf16ToDouble(uint16_t b) {
  uint32_t bits = (uint32_t)b << 16;
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

static uint16_t floatToBf16Truncated(float f) {
  uint32_t bits;
  memcpy(&bits, &f, sizeof bits);
  return (uint16_t)(bits >> 16);
}

static double get(const void* buf, ncclDataType_t t, size_t i) {
  const char* p = (const char*)buf + i * typeSize(t);
  switch (t) {
    case ncclInt8: return *(const int8_t*)p;
    case ncclUint8: return *(const uint8_t*)p;
    case ncclInt32: return *(const int32_t*)p;
    case ncclUint32: return *(const uint32_t*)p;
    case ncclInt64: return (double)*(const int64_t*)p;
    case ncclUint64: return (double)*(const uint64_t*)p;
    case ncclFloat16: return halfToDouble(*(const uint16_t*)p);
    case ncclFloat32: return *(const float*)p;
    case ncclFloat64: return *(const double*)p;
    case ncclBfloat16: return bf16ToDouble(*(const uint16_t*)p);
    case ncclFloat8e4m3: return float8ToDouble(*(const uint8_t*)p, 4);
    case ncclFloat8e5m2: return float8ToDouble(*(const uint8_t*)p, 5);
    default: return NAN;
  }
}

static void put(void* buf, ncclDataType_t t, size_t i, int v) {
  char* p = (char*)buf + i * typeSize(t);
  switch (t) {
    case ncclInt8: *(int8_t*)p = (int8_t)v; break;
    case ncclUint8: *(uint8_t*)p = (uint8_t)v; break;
    case ncclInt32: *(int32_t*)p = v; break;
    case ncclUint32: *(uint32_t*)p = (uint32_t)v; break;
    case ncclInt64: *(int64_t*)p = v; break;
    case ncclUint64: *(uint64_t*)p = (uint64_t)v; break;
    case ncclFloat16: *(uint16_t*)p = smallIntToHalf(v); break;
    case ncclFloat32: *(float*)p = (float)v; break;
    case ncclFloat64: *(double*)p = v; break;
    case ncclBfloat16: *(uint16_t*)p = floatToBf16Truncated((float)v); break;
    case ncclFloat8e4m3: *(uint8_t*)p = smallIntToFloat8(v, 4); break;
    case ncclFloat8e5m2: *(uint8_t*)p = smallIntToFloat8(v, 5); break;
    default: break;
  }
}

static int isFloat(ncclDataType_t t) {
  return t == ncclFloat16 || t == ncclFloat32 || t == ncclFloat64 || t == ncclBfloat16 || t == ncclFloat8e4m3 ||
         t == ncclFloat8e5m2;
}

/* Input element i of rank r: small integers, so every sum, product, min and max is exact in
 * every type but float8 (products of up to 4 ranks stay at most 16; float8 sums of 3-4 ranks
 * round, within near()'s tolerance). */
static int input(int r, size_t i, ncclRedOp_t op) {
  return op == ncclProd ? 1 + (int)((r + i) % 2) : 1 + (int)((3 * r + i) % 5);
}

static double reduced(size_t i, ncclRedOp_t op, ncclDataType_t t) {
  double acc = input(0, i, op);
  for (int r = 1; r < nranks; ++r) {
    double v = input(r, i, op);
    acc = op == ncclProd ? acc * v : op == ncclMax ? fmax(acc, v) : op == ncclMin ? fmin(acc, v) : acc + v;
  }
  if (op == ncclAvg) acc = isFloat(t) ? acc / nranks : trunc(acc / nranks);
  return acc;
}

static int near(double got, double want, ncclDataType_t t) {
  double tol = t == ncclFloat8e4m3 || t == ncclFloat8e5m2 ? 0.25
               : t == ncclFloat16 || t == ncclBfloat16  ? 1e-2
               : t == ncclFloat32                       ? 1e-6
                                                        : 0;
  return fabs(got - want) <= tol * fmax(1.0, fabs(want));
}

static const char* typeNames[] = {"int8",    "uint8",   "int32",    "uint32",     "int64",     "uint64",
                                  "float16", "float32", "float64", "bfloat16", "float8e4m3", "float8e5m2"};
static const char* opNames[] = {"sum", "prod", "max", "min", "avg"};

/* ---- sections ---------------------------------------------------------------------------- */

/* The loader resolved NCCL's names to Loom's library, whose version is the ABI it serves. */
static void abiSection(void) {
  Dl_info info;
  CHECK(dladdr((void*)&ncclAllReduce, &info) != 0, "dladdr(ncclAllReduce) failed");
  const char* shimDir = getenv("SHIM_DIR");
  char want[PATH_MAX], got[PATH_MAX];
  CHECK(shimDir != NULL && realpath(shimDir, want) != NULL, "SHIM_DIR is not set to a directory");
  CHECK(realpath(info.dli_fname, got) != NULL, "realpath(%s)", info.dli_fname);
  CHECK(strncmp(got, want, strlen(want)) == 0 && strstr(got, "/libnccl.so.2") != NULL,
        "ncclAllReduce comes from %s, not from Loom's library in %s", got, want);
  printf("rank %d: ncclAllReduce resolved to %s\n", rank, got);
  CHECK(dlsym(RTLD_DEFAULT, "loomAllReduce") == NULL, "Loom's own names are exported by libnccl.so.2");
  CHECK(dlsym(RTLD_DEFAULT, "pncclAllReduce") != NULL, "pncclAllReduce is not exported");

  int version = 0;
  OK(ncclGetVersion(&version));
  CHECK(version == NCCL_VERSION_CODE, "ncclGetVersion gave %d, the header says %d", version, NCCL_VERSION_CODE);
  OK(pncclGetVersion(&version));
  FAILS(ncclInvalidArgument, ncclGetVersion(NULL));
  for (int r = 0; r < ncclNumResults; ++r) {
    const char* s = ncclGetErrorString((ncclResult_t)r);
    CHECK(s != NULL && strlen(s) > 0, "ncclGetErrorString(%d) is empty", r);
    for (int q = 0; q < r; ++q) CHECK(strcmp(s, ncclGetErrorString((ncclResult_t)q)) != 0, "%d and %d read alike", r, q);
  }
  CHECK(strstr(ncclGetErrorString((ncclResult_t)99), "unknown") != NULL, "code 99 is not unknown");
}

/* NCCL's variables become Loom's at the first call: taken, left to a LOOM_* value the user
 * set, or named as ignored, each in an INFO line (to the file NCCL_DEBUG_FILE names). */
static void environmentSection(void) {
  char logPath[PATH_MAX + 32];
  snprintf(logPath, sizeof logPath, "%s.log", idPath);
  unlink(logPath);
  setenv("NCCL_DEBUG", "INFO", 1);
  setenv("NCCL_DEBUG_FILE", logPath, 1);
  setenv("NCCL_ALGO", "Ring,Tree", 1);
  setenv("NCCL_PROTO", "LL128", 1);
  setenv("LOOM_PROTO", "simple", 1);
  setenv("NCCL_SHM_DISABLE", "1", 1);
  setenv("NCCL_IB_HCA", "mlx5_0", 1);
  unsetenv("LOOM_DEBUG");
  unsetenv("LOOM_ALGO");
  unsetenv("LOOM_TRANSPORTS");
  int version = 0;
  OK(ncclGetVersion(&version)); /* the first call translates */
  CHECK(getenv("LOOM_ALGO") && strcmp(getenv("LOOM_ALGO"), "ring,tree") == 0, "LOOM_ALGO=%s",
        getenv("LOOM_ALGO") ? getenv("LOOM_ALGO") : "(unset)");
  CHECK(strcmp(getenv("LOOM_PROTO"), "simple") == 0, "a LOOM_* value set by the user was overwritten");
  CHECK(getenv("LOOM_TRANSPORTS") && strcmp(getenv("LOOM_TRANSPORTS"), "socket") == 0, "LOOM_TRANSPORTS=%s",
        getenv("LOOM_TRANSPORTS") ? getenv("LOOM_TRANSPORTS") : "(unset)");
  /* A communicator of one rank runs under the translated settings. */
  ncclUniqueId id;
  ncclComm_t comm = NULL;
  OK(ncclGetUniqueId(&id));
  OK(ncclCommInitRank(&comm, 1, id, 0));
  OK(ncclCommDestroy(comm));
  FILE* f = fopen(logPath, "r");
  CHECK(f != NULL, "NCCL_DEBUG_FILE=%s was not written", logPath);
  if (f == NULL) return;
  char line[1024];
  int debug = 0, algo = 0, proto = 0, ignored = 0;
  while (fgets(line, sizeof line, f)) {
    debug |= strstr(line, "NCCL_DEBUG=INFO taken as LOOM_DEBUG=INFO") != NULL;
    algo |= strstr(line, "NCCL_ALGO=Ring,Tree taken as LOOM_ALGO=ring,tree") != NULL;
    proto |= strstr(line, "NCCL_PROTO=LL128 ignored: LOOM_PROTO=simple is set") != NULL;
    ignored |= strstr(line, "ignored (no Loom equivalent): ") != NULL && strstr(line, "NCCL_IB_HCA") != NULL;
  }
  fclose(f);
  CHECK(debug && algo && proto && ignored, "log %s lacks a line: debug %d algo %d proto %d ignored %d", logPath,
        debug, algo, proto, ignored);
  unlink(logPath);
}

typedef enum { kAllReduce, kReduce, kBroadcast, kBcast, kAllGather, kReduceScatter, kAlltoAll, kGather,
               kScatter, kNumCollectives } Collective;
static const char* collectiveNames[] = {"allreduce", "reduce", "broadcast", "bcast", "allgather",
                                        "reducescatter", "alltoall", "gather", "scatter"};

static int reduces(Collective c) { return c == kAllReduce || c == kReduce || c == kReduceScatter; }

/* One call of collective c (count: elements per rank block), in place or not, checked
 * element by element against values computed here. */
static void runCollective(ncclComm_t comm, Collective c, ncclDataType_t t, ncclRedOp_t op, size_t count,
                          int inPlace, int root) {
  const size_t es = typeSize(t), n = (size_t)nranks;
  /* Both buffers are big enough for the largest layout (nranks blocks). */
  char* send = calloc(n * count + 1, es);
  char* recv = calloc(n * count + 1, es);
  /* Inputs: rank r's block b (or whole buffer) holds input(r, b * count + i). */
  for (size_t i = 0; i < n * count; ++i) put(send, t, i, input(rank, i, op));
  for (size_t i = 0; i < n * count; ++i) put(recv, t, i, -1);
  const char* s = send;
  char* d = recv;
  ncclResult_t result = ncclSuccess;
  switch (c) {
    case kAllReduce:
      if (inPlace) d = send;
      result = ncclAllReduce(s, d, count, t, op, comm, NULL);
      break;
    case kReduce:
      if (inPlace) d = send;
      result = ncclReduce(s, d, count, t, op, root, comm, NULL);
      break;
    case kBroadcast:
      if (inPlace) d = send;
      result = ncclBroadcast(s, d, count, t, root, comm, NULL);
      break;
    case kBcast:
      d = send;
      result = ncclBcast(send, count, t, root, comm, NULL);
      break;
    case kAllGather:
      if (inPlace) {
        memcpy(recv + (size_t)rank * count * es, send, count * es);
        s = recv + (size_t)rank * count * es;
      }
      result = ncclAllGather(s, d, count, t, comm, NULL);
      break;
    case kReduceScatter:
      if (inPlace) d = send + (size_t)rank * count * es;
      result = ncclReduceScatter(s, d, count, t, op, comm, NULL);
      break;
    case kAlltoAll:
      result = ncclAlltoAll(s, d, count, t, comm, NULL);
      break;
    case kGather:
      if (inPlace && rank == root) {
        memcpy(recv + (size_t)rank * count * es, send, count * es);
        s = recv + (size_t)rank * count * es;
      }
      result = ncclGather(s, d, count, t, root, comm, NULL);
      break;
    case kScatter:
      if (inPlace && rank == root) d = send + (size_t)rank * count * es;
      result = ncclScatter(s, d, count, t, root, comm, NULL);
      break;
    default: break;
  }
  CHECK(result == ncclSuccess, "%s %s %s count %zu %s root %d: %s: %s", collectiveNames[c], typeNames[t],
        opNames[op], count, inPlace ? "in place" : "out of place", root, ncclGetErrorString(result),
        ncclGetLastError(comm));
  int wrong = 0;
  size_t firstWrong = 0;
  double firstGot = 0, firstWant = 0;
#define EXPECT(index, value)                                                 \
  do {                                                                       \
    double got_ = get(d, t, (index)), want_ = (value);                       \
    if (!near(got_, want_, t) && wrong++ == 0) {                            \
      firstWrong = (index);                                                  \
      firstGot = got_;                                                       \
      firstWant = want_;                                                     \
    }                                                                        \
  } while (0)
  if (result == ncclSuccess) {
    for (size_t i = 0; i < count; ++i) {
      switch (c) {
        case kAllReduce: EXPECT(i, reduced(i, op, t)); break;
        case kReduce: if (rank == root) EXPECT(i, reduced(i, op, t)); break;
        case kBroadcast:
        case kBcast: EXPECT(i, input(root, i, op)); break;
        case kReduceScatter: EXPECT(i, reduced((size_t)rank * count + i, op, t)); break;
        case kScatter: EXPECT(i, input(root, (size_t)rank * count + i, op)); break;
        default:
          for (int r = 0; r < nranks; ++r) {
            if (c == kAllGather || (c == kGather && rank == root)) EXPECT((size_t)r * count + i, input(r, i, op));
            if (c == kAlltoAll) EXPECT((size_t)r * count + i, input(r, (size_t)rank * count + i, op));
          }
      }
    }
  }
#undef EXPECT
  CHECK(wrong == 0, "%s %s %s count %zu %s root %d: %d wrong, first [%zu] = %g, expected %g", collectiveNames[c],
        typeNames[t], opNames[op], count, inPlace ? "in place" : "out of place", root, wrong, firstWrong, firstGot,
        firstWant);
  free(send);
  free(recv);
}

static void collectivesSection(ncclComm_t comm) {
  const size_t counts[] = {0, 1, 1237};
  for (int c = 0; c < kNumCollectives; ++c) {
    for (int t = 0; t < ncclNumTypes; ++t) {
      for (int op = 0; op < (reduces((Collective)c) ? ncclNumOps : 1); ++op) {
        for (int k = 0; k < 3; ++k) {
          for (int inPlace = 0; inPlace < 2; ++inPlace) {
            runCollective(comm, (Collective)c, (ncclDataType_t)t, (ncclRedOp_t)op, counts[k], inPlace,
                          (int)((c + t + k) % nranks));
          }
        }
      }
    }
  }
}

/* Sends and receives: a ring in one group (every rank sends and receives at once), to self,
 * and several calls fused in one group. */
static void p2pSection(ncclComm_t comm) {
  const size_t count = 100003;
  int* out = malloc(count * sizeof(int));
  int* in = malloc(count * sizeof(int));
  for (size_t i = 0; i < count; ++i) out[i] = rank * 1000003 + (int)i;
  const int next = (rank + 1) % nranks, prev = (rank + nranks - 1) % nranks;
  OK(ncclGroupStart());
  OK(ncclSend(out, count, ncclInt32, next, comm, NULL));
  OK(ncclRecv(in, count, ncclInt32, prev, comm, NULL));
  OK(ncclGroupEnd());
  int wrong = 0;
  for (size_t i = 0; i < count; ++i) wrong += in[i] != prev * 1000003 + (int)i;
  CHECK(wrong == 0, "ring: %d of %zu elements wrong", wrong, count);

  memset(in, 0, count * sizeof(int));
  OK(ncclGroupStart());
  OK(ncclSend(out, count, ncclInt32, rank, comm, NULL));
  OK(ncclRecv(in, count, ncclInt32, rank, comm, NULL));
  OK(ncclGroupEnd());
  CHECK(memcmp(in, out, count * sizeof(int)) == 0, "send to self changed the data");

  /* Three allreduces and a broadcast launched together. */
  float a[3][64];
  for (int k = 0; k < 3; ++k) {
    for (int i = 0; i < 64; ++i) a[k][i] = (float)(rank + k + i);
  }
  OK(ncclGroupStart());
  OK(ncclGroupStart()); /* nested */
  for (int k = 0; k < 3; ++k) OK(ncclAllReduce(a[k], a[k], 64, ncclFloat32, ncclSum, comm, NULL));
  OK(ncclGroupEnd());
  OK(ncclGroupEnd());
  wrong = 0;
  for (int k = 0; k < 3; ++k) {
    for (int i = 0; i < 64; ++i) {
      float want = 0;
      for (int r = 0; r < nranks; ++r) want += (float)(r + k + i);
      wrong += a[k][i] != want;
    }
  }
  CHECK(wrong == 0, "grouped allreduces: %d wrong", wrong);
  free(out);
  free(in);
}

/* Wrong arguments give NCCL's codes and a message, and the communicator keeps working. */
static void errorsSection(ncclComm_t comm) {
  float buf[16] = {0};
  FAILS(ncclInvalidArgument, ncclAllReduce(buf, buf, 16, ncclFloat32, ncclSum, NULL, NULL));
  char garbage[256] = {0};
  FAILS(ncclInvalidUsage, ncclAllReduce(buf, buf, 16, ncclFloat32, ncclSum, (ncclComm_t)garbage, NULL));
  FAILS(ncclInvalidArgument, ncclAllReduce(NULL, buf, 16, ncclFloat32, ncclSum, comm, NULL));
  FAILS(ncclInvalidArgument, ncclAllReduce(buf, NULL, 16, ncclFloat32, ncclSum, comm, NULL));
  FAILS(ncclInvalidArgument, ncclAllReduce(buf, buf, 16, (ncclDataType_t)42, ncclSum, comm, NULL));
  FAILS(ncclInvalidArgument, ncclAllReduce(buf, buf, 16, ncclNumTypes, ncclSum, comm, NULL));
  FAILS(ncclInvalidArgument, ncclAllReduce(buf, buf, 16, ncclFloat32, (ncclRedOp_t)99, comm, NULL));
  FAILS(ncclInvalidArgument, ncclAllReduce(buf, buf, 16, ncclFloat32, ncclSum, comm, (cudaStream_t)buf));
  FAILS(ncclInvalidArgument, ncclAllReduce(buf, buf, SIZE_MAX / 2, ncclFloat32, ncclSum, comm, NULL));
  FAILS(ncclInvalidArgument, ncclBroadcast(buf, buf, 16, ncclFloat32, nranks, comm, NULL));
  FAILS(ncclInvalidArgument, ncclReduce(buf, buf, 16, ncclFloat32, ncclSum, -1, comm, NULL));
  FAILS(ncclInvalidArgument, ncclGather(buf, buf, 1, ncclFloat32, nranks + 3, comm, NULL));
  FAILS(ncclInvalidArgument, ncclScatter(buf, buf, 1, ncclFloat32, -2, comm, NULL));
  FAILS(ncclInvalidArgument, ncclSend(buf, 16, ncclFloat32, nranks, comm, NULL));
  FAILS(ncclInvalidArgument, ncclRedOpDestroy(ncclSum, comm));
  FAILS(ncclInvalidArgument, ncclRedOpDestroy((ncclRedOp_t)77, comm));
  FAILS(ncclInvalidArgument, ncclCommDeregister(comm, buf));
  FAILS(ncclInvalidArgument, ncclCommCount(comm, NULL));
  FAILS(ncclInvalidArgument, ncclCommGetAsyncError(comm, NULL));
  FAILS(ncclInvalidArgument, ncclMemAlloc(NULL, 64));
  void* p = NULL;
  FAILS(ncclInvalidArgument, ncclMemAlloc(&p, 0));
  ncclWindow_t win;
  FAILS(ncclInvalidArgument, ncclCommWindowRegister(comm, NULL, sizeof buf, &win, NCCL_WIN_DEFAULT));
  CHECK(win == NULL, "a refused window registration left *win set");
  FAILS(ncclInvalidArgument, ncclCommWindowRegister(comm, buf, 0, &win, NCCL_WIN_DEFAULT));
  FAILS(ncclInvalidArgument, ncclCommWindowRegister(comm, buf, sizeof buf, NULL, NCCL_WIN_DEFAULT));
  FAILS(ncclInvalidArgument, ncclCommWindowRegister(comm, buf, sizeof buf, &win, 0x10));
  FAILS(ncclInvalidArgument, ncclCommRevoke(comm, 1));
  ncclComm_t shrunk = comm;
  int exclude = rank;
  FAILS(ncclInvalidArgument, ncclCommShrink(comm, &exclude, 1, &shrunk, NULL, NCCL_SHRINK_DEFAULT));
  CHECK(shrunk == NULL, "a refused shrink left *newcomm set");
  FAILS(ncclInvalidArgument, ncclCommShrink(comm, NULL, 0, &shrunk, NULL, 7));
  FAILS(ncclInvalidArgument, ncclCommShrink(comm, NULL, 0, NULL, NULL, NCCL_SHRINK_DEFAULT));
  FAILS(ncclInvalidUsage, ncclGroupEnd());
  ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER, unset;
  memset(&unset, 0, sizeof unset);
  FAILS(ncclInvalidUsage, ncclGroupSimulateEnd(&sim));
  OK(ncclGroupStart());
  FAILS(ncclInvalidArgument, ncclGroupSimulateEnd(&unset));
  FAILS(ncclInvalidArgument, ncclGroupSimulateEnd(NULL));
  OK(ncclGroupEnd()); /* the refused simulations left the group open */
  ncclUniqueId id;
  memset(&id, 0, sizeof id);
  ncclComm_t bad = NULL;
  FAILS(ncclInvalidArgument, ncclCommInitRank(&bad, 2, id, 5));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.magic = 0;
  FAILS(ncclInvalidArgument, ncclCommInitRankConfig(&bad, 1, id, 0, &config));
  CHECK(bad == NULL, "a failed init left a communicator");

  ncclResult_t async = ncclInternalError;
  OK(ncclCommGetAsyncError(comm, &async));
  CHECK(async == ncclSuccess, "async error %s after argument errors", ncclGetErrorString(async));
  runCollective(comm, kAllReduce, ncclFloat32, ncclSum, 1000, 0, 0);
}

/* ncclRedOpCreatePreMulSum: the sum of scalar * input, the scalar immediate or read at each
 * call through its pointer. */
static void preMulSumSection(ncclComm_t comm) {
  float two = 2.0f;
  ncclRedOp_t op;
  OK(ncclRedOpCreatePreMulSum(&op, &two, ncclFloat32, ncclScalarHostImmediate, comm));
  CHECK((int)op >= ncclNumOps, "created op %d collides with a built-in one", (int)op);
  two = 100.0f; /* immediate: the value at creation counts */
  float x[100], y[100];
  for (int i = 0; i < 100; ++i) x[i] = (float)(rank + i);
  OK(ncclAllReduce(x, y, 100, ncclFloat32, op, comm, NULL));
  int wrong = 0;
  for (int i = 0; i < 100; ++i) {
    float want = 0;
    for (int r = 0; r < nranks; ++r) want += 2.0f * (float)(r + i);
    wrong += y[i] != want;
  }
  CHECK(wrong == 0, "premulsum (immediate) allreduce: %d wrong", wrong);
  FAILS(ncclInvalidArgument, ncclAllReduce(x, y, 100, ncclFloat64, op, comm, NULL));

  int32_t scalar = 3;
  ncclRedOp_t byPointer;
  OK(ncclRedOpCreatePreMulSum(&byPointer, &scalar, ncclInt32, ncclScalarDevice, comm));
  CHECK(byPointer != op, "two live ops share number %d", (int)op);
  int32_t in[10], out[10];
  for (int i = 0; i < 10; ++i) in[i] = rank + i;
  scalar = -5; /* by pointer: the value at the call counts */
  OK(ncclReduceScatter(in, out, 1, ncclInt32, byPointer, comm, NULL));
  int32_t want = 0;
  for (int r = 0; r < nranks; ++r) want += -5 * (r + rank);
  CHECK(out[0] == want, "premulsum (pointer) reducescatter: %d, expected %d", out[0], want);
  OK(ncclReduce(in, out, 10, ncclInt32, byPointer, 0, comm, NULL));
  if (rank == 0) {
    for (int i = 0; i < 10; ++i) {
      int32_t w = 0;
      for (int r = 0; r < nranks; ++r) w += -5 * (r + i);
      CHECK(out[i] == w, "premulsum reduce [%d]: %d, expected %d", i, out[i], w);
    }
  }
  /* In a group the calls run at ncclGroupEnd, after their op was destroyed and its number
   * given to another: each keeps the scalar it was called with. */
  float three = 3.0f, grouped[100], regrouped[100];
  ncclRedOp_t inGroup, again;
  OK(ncclGroupStart());
  OK(ncclRedOpCreatePreMulSum(&inGroup, &three, ncclFloat32, ncclScalarHostImmediate, comm));
  OK(ncclAllReduce(x, grouped, 100, ncclFloat32, inGroup, comm, NULL));
  OK(ncclRedOpDestroy(inGroup, comm));
  OK(ncclRedOpCreatePreMulSum(&again, &two, ncclFloat32, ncclScalarHostImmediate, comm));
  OK(ncclAllReduce(x, regrouped, 100, ncclFloat32, again, comm, NULL));
  OK(ncclRedOpDestroy(again, comm));
  OK(ncclGroupEnd());
  wrong = 0;
  for (int i = 0; i < 100; ++i) {
    float want3 = 0, want100 = 0;
    for (int r = 0; r < nranks; ++r) {
      want3 += 3.0f * (float)(r + i);
      want100 += 100.0f * (float)(r + i);
    }
    wrong += grouped[i] != want3 || regrouped[i] != want100;
  }
  CHECK(wrong == 0, "premulsum in a group: %d wrong", wrong);
  /* float8: 0.5 (e4m3 0x30) times 1 or 2, summed: multiples of 0.5 up to 4, all exact. */
  uint8_t half = 0x30, in8[16], out8[16];
  ncclRedOp_t float8Op;
  OK(ncclRedOpCreatePreMulSum(&float8Op, &half, ncclFloat8e4m3, ncclScalarHostImmediate, comm));
  for (int i = 0; i < 16; ++i) put(in8, ncclFloat8e4m3, (size_t)i, input(rank, (size_t)i, ncclProd));
  OK(ncclAllReduce(in8, out8, 16, ncclFloat8e4m3, float8Op, comm, NULL));
  for (int i = 0; i < 16; ++i) {
    double w = 0;
    for (int r = 0; r < nranks; ++r) w += 0.5 * input(r, (size_t)i, ncclProd);
    CHECK(get(out8, ncclFloat8e4m3, (size_t)i) == w, "premulsum float8 allreduce [%d]: %g, expected %g", i,
          get(out8, ncclFloat8e4m3, (size_t)i), w);
  }
  OK(ncclRedOpDestroy(float8Op, comm));
  OK(ncclRedOpDestroy(op, comm));
  FAILS(ncclInvalidArgument, ncclAllReduce(x, y, 100, ncclFloat32, op, comm, NULL));
  FAILS(ncclInvalidArgument, ncclRedOpDestroy(op, comm));
  OK(ncclRedOpDestroy(byPointer, comm));
  FAILS(ncclInvalidArgument, ncclRedOpCreatePreMulSum(&op, NULL, ncclFloat32, ncclScalarHostImmediate, comm));
  FAILS(ncclInvalidArgument, ncclRedOpCreatePreMulSum(&op, &two, ncclFloat32, (ncclScalarResidence_t)7, comm));
}

/* Queries, registration, memory, finalize, a non-blocking init, the scalable init and abort. */
/* ncclGroupSimulateEnd on rank 0 alone: an estimate, no data moved; then every rank's
 * allreduces still line up (the simulated calls were taken back). */
static void simulateOnRankZero(ncclComm_t comm) {
  float in[256], out[256];
  for (int i = 0; i < 256; ++i) in[i] = 1.0f, out[i] = -1.0f;
  if (rank == 0) {
    ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
    OK(ncclGroupStart());
    OK(ncclAllReduce(in, out, 256, ncclFloat32, ncclSum, comm, NULL));
    OK(ncclGroupSimulateEnd(&sim));
    CHECK(sim.estimatedTime > 0, "simulated group: estimatedTime %g", (double)sim.estimatedTime);
    CHECK(out[0] == -1.0f, "a simulated allreduce wrote its output");
  }
  OK(ncclAllReduce(in, out, 256, ncclFloat32, ncclSum, comm, NULL));
  CHECK(out[0] == (float)nranks && out[255] == (float)nranks, "allreduce after a simulated group: %g", out[0]);
}

static void lifecycleSection(ncclComm_t comm) {
  simulateOnRankZero(comm);
  int count = -1, me = -1, device = 99;
  OK(ncclCommCount(comm, &count));
  OK(ncclCommUserRank(comm, &me));
  OK(ncclCommCuDevice(comm, &device));
  CHECK(count == nranks && me == rank, "count %d rank %d, expected %d and %d", count, me, nranks, rank);
  CHECK(device == -1, "a host communicator reports device %d", device);

  void* mem = NULL;
  OK(ncclMemAlloc(&mem, 1 << 20));
  CHECK(mem != NULL && ((uintptr_t)mem & 4095) == 0, "ncclMemAlloc gave %p", mem);
  void* handle = NULL;
  OK(ncclCommRegister(comm, mem, 1 << 20, &handle));
  CHECK(handle != NULL, "ncclCommRegister gave no handle");
  float* f = mem;
  for (int i = 0; i < 1000; ++i) f[i] = 1.0f;
  OK(ncclAllReduce(f, f, 1000, ncclFloat32, ncclSum, comm, NULL));
  CHECK(f[999] == (float)nranks, "allreduce on registered memory: %g", f[999]);
  OK(ncclCommDeregister(comm, handle));
  FAILS(ncclInvalidArgument, ncclCommDeregister(comm, handle));
  /* A window is a registration too (collective in NCCL: every rank registers one). */
  ncclWindow_t win = NULL;
  OK(ncclCommWindowRegister(comm, mem, 1 << 20, &win, NCCL_WIN_COLL_SYMMETRIC));
  CHECK(win != NULL, "ncclCommWindowRegister gave no window");
  OK(ncclAllReduce(f, f, 1000, ncclFloat32, ncclSum, comm, NULL));
  CHECK(f[0] == (float)(nranks * nranks), "allreduce on a window: %g", f[0]);
  OK(ncclCommWindowDeregister(comm, win));
  FAILS(ncclInvalidArgument, ncclCommWindowDeregister(comm, win));
  OK(ncclCommWindowDeregister(comm, NULL));
  OK(ncclMemFree(mem));
  OK(ncclMemFree(NULL));

  /* Non-blocking: InProgress (or done), then polled to success, then usable. */
  ncclUniqueId id;
  if (shareId(&id, "nonblocking")) {
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    config.commName = "nonblocking";
    ncclComm_t nb = NULL;
    ncclResult_t r = ncclCommInitRankConfig(&nb, nranks, id, rank, &config);
    CHECK(r == ncclInProgress || r == ncclSuccess, "non-blocking init returned %s", ncclGetErrorString(r));
    ncclResult_t state = ncclInProgress;
    for (int waited = 0; waited < 60000 && state == ncclInProgress; waited += 1) {
      OK(ncclCommGetAsyncError(nb, &state));
      if (state == ncclInProgress) sleepMs(1);
    }
    CHECK(state == ncclSuccess, "non-blocking init ended with %s: %s", ncclGetErrorString(state),
          ncclGetLastError(nb));
    runCollective(nb, kAllReduce, ncclInt64, ncclMax, 333, 1, 0);
    OK(ncclCommFinalize(nb));
    FAILS(ncclInvalidUsage, ncclAllReduce(f, f, 1, ncclFloat32, ncclSum, nb, NULL));
    OK(ncclCommDestroy(nb));
    FAILS(ncclInvalidUsage, ncclCommDestroy(nb));
  }
  if (shareId(&id, "scalable")) {
    ncclComm_t scalable = NULL;
    OK(ncclCommInitRankScalable(&scalable, nranks, rank, 1, &id, NULL));
    runCollective(scalable, kAllGather, ncclUint8, ncclSum, 77, 0, 0);
    OK(ncclCommAbort(scalable));
  }
  OK(ncclCommDestroy(NULL));
}

/* Split by parity with the order reversed; ranks that pass NOCOLOR get no communicator. */
/* ncclCommRevoke: the communicator then refuses collectives and finalize, reports no error
 * (revoking is none), and splits again. */
static void revokeAndSplit(ncclComm_t comm) {
  OK(ncclCommRevoke(comm, NCCL_REVOKE_DEFAULT));
  ncclResult_t async = ncclInternalError;
  OK(ncclCommGetAsyncError(comm, &async));
  CHECK(async == ncclSuccess, "async error %s after revoke", ncclGetErrorString(async));
  int v = 1, sum = 0;
  FAILS(ncclInvalidUsage, ncclAllReduce(&v, &sum, 1, ncclInt32, ncclSum, comm, NULL));
  FAILS(ncclInvalidUsage, ncclCommFinalize(comm));
  ncclComm_t again = NULL;
  OK(ncclCommSplit(comm, 0, rank, &again, NULL));
  OK(ncclAllReduce(&v, &sum, 1, ncclInt32, ncclSum, again, NULL));
  CHECK(sum == nranks, "allreduce on the split of a revoked communicator: %d, expected %d", sum, nranks);
  OK(ncclCommDestroy(again));
}

static void splitSection(ncclComm_t comm) {
  const int color = rank == nranks - 1 && nranks > 2 ? NCCL_SPLIT_NOCOLOR : rank % 2;
  ncclComm_t sub = (ncclComm_t)1;
  OK(ncclCommSplit(comm, color, -rank, &sub, NULL));
  if (color == NCCL_SPLIT_NOCOLOR) {
    CHECK(sub == NULL, "NOCOLOR gave a communicator");
    revokeAndSplit(comm);
    return;
  }
  int n = 0, me = -1, members = 0, myIndex = 0;
  for (int r = nranks - 1; r >= 0; --r) {
    const int c = r == nranks - 1 && nranks > 2 ? NCCL_SPLIT_NOCOLOR : r % 2;
    if (c != color) continue;
    if (r == rank) myIndex = members;
    ++members;
  }
  OK(ncclCommCount(sub, &n));
  OK(ncclCommUserRank(sub, &me));
  CHECK(n == members && me == myIndex, "split: size %d rank %d, expected %d and %d", n, me, members, myIndex);
  int v = rank, sum = 0;
  OK(ncclAllReduce(&v, &sum, 1, ncclInt32, ncclSum, sub, NULL));
  int want = 0;
  for (int r = 0; r < nranks; ++r) {
    const int c = r == nranks - 1 && nranks > 2 ? NCCL_SPLIT_NOCOLOR : r % 2;
    if (c == color) want += r;
  }
  CHECK(sum == want, "allreduce on the split: %d, expected %d", sum, want);
  OK(ncclCommDestroy(sub));
  revokeAndSplit(comm);
}

/* Under LOOM_CHECK=1 ranks that call with different counts all get ncclInvalidUsage. */
static void mismatchSection(ncclComm_t comm) {
  float buf[64] = {0};
  ncclResult_t r = ncclAllReduce(buf, buf, 32 + (size_t)rank, ncclFloat32, ncclSum, comm, NULL);
  CHECK(r == ncclInvalidUsage, "mismatched counts gave %s", ncclGetErrorString(r));
  CHECK(strstr(ncclGetLastError(comm), "count") != NULL, "message does not name the count: %s",
        ncclGetLastError(comm));
}

/* The last rank leaves without a word; every other rank's next call fails, in time, and the
 * others shrink the communicator to go on without it. */
static void deadPeerSection(ncclComm_t comm) {
  if (rank == nranks - 1) _exit(0);
  float buf[1024] = {0};
  ncclResult_t r = ncclAllReduce(buf, buf, 1024, ncclFloat32, ncclSum, comm, NULL);
  CHECK(r == ncclRemoteError || r == ncclSystemError, "a dead peer gave %s", ncclGetErrorString(r));
  ncclResult_t async = ncclSuccess;
  OK(ncclCommGetAsyncError(comm, &async));
  CHECK(async != ncclSuccess, "the communicator has no async error after its peer died");
  printf("rank %d: after the last rank left: %s\n", rank, ncclGetLastError(comm));
  /* The survivors go on without it. */
  int gone = nranks - 1, v = rank, sum = 0, n = 0, me = -1;
  ncclComm_t shrunk = NULL;
  OK(ncclCommShrink(comm, &gone, 1, &shrunk, NULL, NCCL_SHRINK_DEFAULT));
  OK(ncclCommCount(shrunk, &n));
  OK(ncclCommUserRank(shrunk, &me));
  CHECK(n == nranks - 1 && me == rank, "shrunk: size %d rank %d, expected %d and %d", n, me, nranks - 1, rank);
  OK(ncclAllReduce(&v, &sum, 1, ncclInt32, ncclSum, shrunk, NULL));
  CHECK(sum == (nranks - 1) * (nranks - 2) / 2, "allreduce after the shrink: %d", sum);
  OK(ncclCommDestroy(shrunk));
}

/* One process, several ranks: ncclCommInitAll, and ncclCommInitRank for each rank inside
 * one group (how nccl-tests creates the ranks of its threads and GPUs). */
static void initAllSection(void) {
  enum { kRanks = 3 };
  ncclComm_t comms[kRanks];
  float data[kRanks][50];
  for (int pass = 0; pass < 2; ++pass) {
    if (pass == 0) {
      OK(ncclCommInitAll(comms, kRanks, NULL));
    } else {
      ncclUniqueId id;
      OK(ncclGetUniqueId(&id));
      OK(ncclGroupStart());
      for (int i = 0; i < kRanks; ++i) OK(ncclCommInitRank(&comms[i], kRanks, id, i));
      OK(ncclGroupEnd());
    }
    for (int i = 0; i < kRanks; ++i) {
      for (int j = 0; j < 50; ++j) data[i][j] = (float)(i * 10 + j);
    }
    OK(ncclGroupStart());
    for (int i = 0; i < kRanks; ++i) OK(ncclAllReduce(data[i], data[i], 50, ncclFloat32, ncclSum, comms[i], NULL));
    OK(ncclGroupEnd());
    int wrong = 0;
    for (int i = 0; i < kRanks; ++i) {
      for (int j = 0; j < 50; ++j) wrong += data[i][j] != (float)(30 + 3 * j);
    }
    CHECK(wrong == 0, "%s: %d wrong", pass == 0 ? "ncclCommInitAll" : "grouped ncclCommInitRank", wrong);
    for (int i = 0; i < kRanks; ++i) OK(ncclCommDestroy(comms[i]));
  }
  FAILS(ncclInvalidArgument, ncclCommInitAll(comms, 0, NULL));
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s SECTION\n", argv[0]);
    return 2;
  }
  const char* section = argv[1];
  if (getenv("LOOM_RANK")) rank = atoi(getenv("LOOM_RANK"));
  if (getenv("LOOM_WORLD_SIZE")) nranks = atoi(getenv("LOOM_WORLD_SIZE"));
  /* The job's id files are named by loomrun's pid (every rank's parent) and rendezvous
   * port; the root of each id takes a port of its own. */
  const char* port = getenv("LOOM_MASTER_PORT");
  snprintf(idPath, sizeof idPath, "%s/loom-nccl-abi-%d-%s-%s", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
           (int)getppid(), port ? port : "single", section);
  unsetenv("LOOM_MASTER_PORT");

  if (strcmp(section, "abi") == 0) {
    abiSection();
  } else if (strcmp(section, "environment") == 0) {
    environmentSection();
  } else if (strcmp(section, "initall") == 0) {
    initAllSection();
  } else {
    ncclComm_t comm = initComm("world");
    if (comm == NULL) {
      ++failures;
    } else if (strcmp(section, "collectives") == 0) {
      collectivesSection(comm);
    } else if (strcmp(section, "p2p") == 0) {
      p2pSection(comm);
    } else if (strcmp(section, "errors") == 0) {
      errorsSection(comm);
    } else if (strcmp(section, "premulsum") == 0) {
      preMulSumSection(comm);
    } else if (strcmp(section, "lifecycle") == 0) {
      lifecycleSection(comm);
    } else if (strcmp(section, "split") == 0) {
      splitSection(comm);
    } else if (strcmp(section, "mismatch") == 0) {
      mismatchSection(comm);
    } else if (strcmp(section, "deadpeer") == 0) {
      deadPeerSection(comm);
    } else {
      fprintf(stderr, "unknown section %s\n", section);
      return 2;
    }
    if (comm != NULL) OK(strcmp(section, "deadpeer") == 0 ? ncclCommAbort(comm) : ncclCommDestroy(comm));
  }
  if (rank == 0 && strcmp(section, "abi") != 0 && strcmp(section, "initall") != 0 &&
      strcmp(section, "environment") != 0) {
    /* rank 0 made the id files; the others have read them by now */
    const char* tags[] = {"world", "nonblocking", "scalable"};
    for (int i = 0; i < 3; ++i) {
      char path[PATH_MAX + 32];
      snprintf(path, sizeof path, "%s.%s", idPath, tags[i]);
      unlink(path);
    }
  }
  printf("rank %d: %s: %d checks, %d failed\n", rank, section, checks, failures);
  return failures == 0 ? 0 : 1;
}
