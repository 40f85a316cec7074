// Reference-checked collective calls: deterministic per-rank data, the expected results
// computed here without any of Loom's code, and a runner that makes one call on one rank
// and says what (if anything) came out wrong. Used by the multi-rank tests and by the
// multi-host rank program; public API only, no GoogleTest.
//
// Exactness. The data are chosen so that every result is exact whatever order the ranks'
// values are combined in, so the reference is a plain loop and any algorithm must match it
// bit for bit:
// - integers: any bits; sum and prod wrap in the element type (two's complement), avg is
//   the wrapped sum divided once by nranks, truncating toward zero;
// - floats, sum/avg/max/min: small multiples of a power of two, bounded so that a sum of
//   nranks of them is still exact in the type (fp16: |sum| <= 2048 steps, bf16: 256,
//   float32: 2^24, float64: 2^53); max/min also see +0 and -0 (max(+0,-0) = +0,
//   min(+0,-0) = -0, as src/kernels/reduce.h promises);
// - floats, prod: mostly 1, sometimes -1, 2, 0.5 or -2, so every partial product is a
//   power of two within 2^-8..2^8;
// - avg of floats: the exact sum divided by nranks in the type's precision (fp16 and bf16:
//   in float32, then rounded to nearest-even once);
// - byte movers (Broadcast, AllGather, AllToAll): random bytes, NaN patterns included,
//   which must arrive unchanged.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/matrix_scale.h"
#include "loom/loom.h"

namespace loomtest {

enum class Collective { kAllReduce, kBroadcast, kReduce, kAllGather, kReduceScatter, kAllToAll };

constexpr Collective kAllCollectives[] = {Collective::kAllReduce,     Collective::kBroadcast,
                                          Collective::kReduce,        Collective::kAllGather,
                                          Collective::kReduceScatter, Collective::kAllToAll};
constexpr loomDataType_t kAllTypes[] = {loomInt8,    loomUint8,    loomInt32,      loomUint32,
                                        loomInt64,   loomUint64,   loomFloat16,    loomFloat32,
                                        loomFloat64, loomBfloat16, loomFloat8e4m3, loomFloat8e5m2};
constexpr int kTypeCount = static_cast<int>(sizeof kAllTypes / sizeof kAllTypes[0]);
constexpr loomRedOp_t kAllOps[] = {loomSum, loomProd, loomMax, loomMin, loomAvg};

const char* collectiveName(Collective collective);
const char* typeName(loomDataType_t type);
const char* opName(loomRedOp_t op);
size_t typeSize(loomDataType_t type);
bool isReducing(Collective collective);
// A premultiplied sum's scalar on `rank`, typeSize(type) bytes into out: rank + 3 for
// integers; 0.5 on even ranks and 1 on odd ones for floats (exact products).
void preMulScalar(loomDataType_t type, int rank, unsigned char* out);
// AllToAll has no in-place form (its buffers must not overlap).
bool hasInPlace(Collective collective);

// One call of one collective, as every rank makes it.
struct CollectiveCase {
  Collective collective = Collective::kAllReduce;
  loomDataType_t type = loomFloat32;
  loomRedOp_t op = loomSum;  // reducing collectives only
  // A premultiplied sum (op is loomSum): each rank's input times preMulScalar(type, rank).
  bool preMulSum = false;
  int root = 0;              // Broadcast and Reduce only
  size_t count = 0;          // as passed to the call: per rank block for AllGather,
                             // ReduceScatter and AllToAll
  bool inPlace = false;
  uint64_t seed = 1;  // the data; different cases should use different seeds

  // "allreduce float16 avg count=7 in-place" and so on.
  std::string describe() const;
};

// Makes a case's buffers on one rank, launches the call and checks what it left.
//
//   CollectiveRun run(c, rank, nranks);
//   loomResult_t r = run.launch(comm, stream);   // then loomStreamSynchronize / GroupEnd
//   std::string wrong = run.check();              // "" when everything is as expected
//
// check() looks at the result and at everything the call must not touch: an out-of-place
// sendbuff, a non-root's recvbuff in Reduce, a non-root's sendbuff in Broadcast.
class CollectiveRun {
 public:
  CollectiveRun(const CollectiveCase& c, int rank, int nranks);
  // Off the root, out of place: the call gets `untouchable` as the buffer the contract keeps
  // it away from (Broadcast's sendbuff, Reduce's recvbuff) instead of one of ours, and
  // check() leaves it alone; its page protection (PROT_NONE, PROT_READ) is the check.
  CollectiveRun(const CollectiveCase& c, int rank, int nranks, void* untouchable);
  loomResult_t launch(loomComm_t comm, loomStream_t stream);
  std::string check() const;
  const CollectiveCase& collectiveCase() const { return case_; }

  // For device memory: the case's host buffers (guards and sentinels included; the send
  // buffer is empty when in place), which a test copies to device buffers of the same size
  // and back again before check(); launchMirrored makes the call with the pointers at the
  // same offsets in those device copies.
  std::vector<unsigned char>& sendBuffer() { return send_; }
  std::vector<unsigned char>& recvBuffer() { return recv_; }
  loomResult_t launchMirrored(loomComm_t comm, loomStream_t stream, void* deviceSend, void* deviceRecv);

 private:
  loomResult_t launchWith(loomComm_t comm, loomStream_t stream, const void* send, void* recv) const;
  loomResult_t launchOp(loomComm_t comm, loomStream_t stream, const void* send, void* recv, loomRedOp_t op) const;

  CollectiveCase case_;
  int rank_;
  int nranks_;
  std::vector<unsigned char> send_;  // unused when in place (everything lives in recv_)
  std::vector<unsigned char> recv_;
  const void* sendPtr_ = nullptr;  // what launch() passes
  void* recvPtr_ = nullptr;
  bool untouchable_ = false;  // sendPtr_ (Broadcast) or recvPtr_ (Reduce) is not ours
};

// What one blocking call on one rank came to. callFailed: the call returned an error (the
// communicator is then unusable and the caller should stop); error: "" or what was wrong.
struct CaseOutcome {
  bool callFailed = false;
  std::string error;
};

// Launches, waits (loomStreamSynchronize when stream is not NULL) and checks.
CaseOutcome runCollectiveCase(const CollectiveCase& c, loomComm_t comm, int rank, int nranks,
                              loomStream_t stream = nullptr);

// AllReduce of random floats whose sums round (so the order of additions matters): the
// result must be bitwise identical on every rank (compared through an AllGather of the
// results), identical when the same call is made again, and close to the exact sum.
CaseOutcome runDeterminismCase(loomDataType_t type, loomRedOp_t op, size_t count,
                               uint64_t seed, loomComm_t comm, int rank, int nranks);

// Case lists. Every rank must build the same list (they depend only on the arguments).
//
// sliceCases: every collective x every type x every op (the reducing ones), each once, with
// count, in-place and root rotating through {1, 7, 1023}, {no, yes} and the ranks, count
// 65537 for two types per collective and count 0 once per collective. `rotation` shifts
// which combination meets which count, so that different configurations cover different
// ones.
std::vector<CollectiveCase> sliceCases(int nranks, unsigned rotation);
// fullCases: every collective x type x op x count {0, 1, 7, 1023, 65537} x in-place/out-of-
// place, roots rotating; plus one float32 (sum) case of about 16M elements per collective
// (about 16M elements in all for the blocked collectives).
std::vector<CollectiveCase> fullCases(int nranks, unsigned rotation);
// quickCases: sliceCases thinned for the sanitizer runs: per collective its count-0 and
// 65537-element cases and every seventh of the others (types, ops and counts still rotate
// across configurations).
std::vector<CollectiveCase> quickCases(int nranks, unsigned rotation);
// The rank count the quick slices of the matrices give their `index`-th configuration
// beyond one rank: 2, 3, 4, 5 and 8 in turn (under a sanitizer a configuration costs its
// communicators' making, whatever its cases, so each configuration meets one count).
int quickRankCount(size_t index);
// The list for a scale: quickCases, sliceCases or fullCases.
std::vector<CollectiveCase> casesAt(MatrixScale scale, int nranks, unsigned rotation);

// The element count of a "~16M" case: 2^24 + 3, so that no split is even.
constexpr size_t kLargeCount = (size_t{1} << 24) + 3;

}  // namespace loomtest
