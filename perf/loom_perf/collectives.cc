#include "collectives.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "datatypes.h"

namespace loomperf {

Layout layoutFor(Collective c, size_t count, size_t typeSize, int nranks) {
  const size_t n = static_cast<size_t>(nranks);
  // nccl-tests keeps each rank's share a multiple of 16 bytes.
  const size_t share = (count / n) & ~(16 / typeSize - 1);
  Layout l;
  switch (c) {
    case Collective::kAllGather:
      l = {share, share * n, share, share, 0};
      break;
    case Collective::kReduceScatter:
      l = {share * n, share, share, 0, share};
      break;
    case Collective::kAllToAll:
      l = {share * n, share * n, share, 0, 0};
      break;
    default:
      l = {count, count, count, 0, 0};
      break;
  }
  return l;
}

bool takesOp(Collective c) {
  return c == Collective::kAllReduce || c == Collective::kReduce || c == Collective::kReduceScatter;
}

bool takesRoot(Collective c) { return c == Collective::kBroadcast || c == Collective::kReduce; }

bool hasInPlace(Collective c) { return c != Collective::kAllToAll && c != Collective::kSendRecv; }

double algorithmBytes(Collective c, const Layout& layout, size_t typeSize, int nranks) {
  const double bytes = static_cast<double>(layout.paramCount * typeSize);
  switch (c) {
    case Collective::kAllGather:
    case Collective::kReduceScatter:
    case Collective::kAllToAll:
      return bytes * nranks;
    default:
      return bytes;
  }
}

double busBandwidthFactor(Collective c, int nranks) {
  const double n = nranks;
  switch (c) {
    case Collective::kAllReduce:
      return 2 * (n - 1) / n;
    case Collective::kAllGather:
    case Collective::kReduceScatter:
    case Collective::kAllToAll:
      return (n - 1) / n;
    default:
      return 1;
  }
}

loomResult_t launch(const Call& k, loomComm_t comm, loomStream_t stream) {
  switch (k.collective) {
    case Collective::kAllReduce:
      return loomAllReduce(k.send, k.recv, k.count, k.type, k.op, comm, stream);
    case Collective::kBroadcast:
      return loomBroadcast(k.send, k.recv, k.count, k.type, k.root, comm, stream);
    case Collective::kReduce:
      return loomReduce(k.send, k.recv, k.count, k.type, k.op, k.root, comm, stream);
    case Collective::kAllGather:
      return loomAllGather(k.send, k.recv, k.count, k.type, comm, stream);
    case Collective::kReduceScatter:
      return loomReduceScatter(k.send, k.recv, k.count, k.type, k.op, comm, stream);
    case Collective::kAllToAll:
      return loomAllToAll(k.send, k.recv, k.count, k.type, comm, stream);
    case Collective::kSendRecv: {
      int rank = 0, nranks = 1;
      loomCommUserRank(comm, &rank);
      loomCommCount(comm, &nranks);
      loomGroupStart();
      loomResult_t sent = loomSend(k.send, k.count, k.type, (rank + 1) % nranks, comm, stream);
      loomResult_t received =
          loomRecv(k.recv, k.count, k.type, (rank + nranks - 1) % nranks, comm, stream);
      loomResult_t ended = loomGroupEnd();
      return sent != loomSuccess ? sent : received != loomSuccess ? received : ended;
    }
  }
  return loomInvalidArgument;
}

// ---- The data check --------------------------------------------------------------------
//
// Every value is a small integer, chosen per op so that each partial result is exact in the
// type (exactIntegers: int8's 127, fp8's 16 and 8): the expected result is computed in double
// and must match bit for bit, except avg on floating types, where one rounding of the division
// is allowed.
namespace {

double input(const CheckCase& c, int rank, size_t i) {
  const size_t shifted = i + static_cast<size_t>(c.rep);
  const size_t r = static_cast<size_t>(rank), exact = static_cast<size_t>(exactIntegers(c.call.type));
  if (!takesOp(c.call.collective)) return static_cast<double>((shifted + 3 * r) % exact);
  switch (c.call.op) {
    case loomSum:
    case loomAvg: {
      // nranks * (modulus - 1) <= exact.
      const size_t modulus = std::clamp<size_t>(exact / static_cast<size_t>(c.nranks) + 1, 2, 61);
      return static_cast<double>((shifted + 3 * r) % modulus);
    }
    case loomProd:  // one rank per element contributes 1..3, the others 1
      return r == shifted % static_cast<size_t>(c.nranks) ? 1.0 + static_cast<double>(shifted % 3)
                                                          : 1.0;
    default:
      return static_cast<double>((shifted + 3 * r) % exact);
  }
}

double reduced(const CheckCase& c, size_t i) {
  double acc = input(c, 0, i);
  for (int r = 1; r < c.nranks; ++r) {
    const double v = input(c, r, i);
    switch (c.call.op) {
      case loomProd: acc *= v; break;
      case loomMax: acc = std::max(acc, v); break;
      case loomMin: acc = std::min(acc, v); break;
      default: acc += v; break;
    }
  }
  if (c.call.op == loomAvg) {
    acc /= c.nranks;
    if (!isFloating(c.call.type)) acc = std::trunc(acc);
  }
  return acc;
}

// Element j of the result on rank c.rank.
double expected(const CheckCase& c, size_t j) {
  const size_t share = c.layout.paramCount;
  const int prev = (c.rank + c.nranks - 1) % c.nranks;
  switch (c.call.collective) {
    case Collective::kAllReduce:
    case Collective::kReduce:
      return reduced(c, j);
    case Collective::kBroadcast:
      return input(c, c.call.root, j);
    case Collective::kAllGather:
      return input(c, static_cast<int>(j / share), j % share);
    case Collective::kReduceScatter:
      return reduced(c, static_cast<size_t>(c.rank) * share + j);
    case Collective::kAllToAll:
      return input(c, static_cast<int>(j / share), static_cast<size_t>(c.rank) * share + j % share);
    case Collective::kSendRecv:
      return input(c, prev, j);
  }
  return 0;
}

size_t outputCount(const CheckCase& c) {
  if (c.call.collective == Collective::kReduce && c.rank != c.call.root) return 0;  // undefined
  return c.layout.recvCount;
}

bool matches(const CheckCase& c, double got, double want) {
  // The value the type can hold, as the collective stores it.
  unsigned char slot[8];
  storeElement(c.call.type, slot, 0, want);
  want = loadElement(c.call.type, slot, 0);
  if (c.call.op == loomAvg && takesOp(c.call.collective) && isFloating(c.call.type)) {
    return std::fabs(got - want) <= 2 * roundingError(c.call.type) * std::fabs(want);
  }
  return got == want;
}

}  // namespace

void poisonOutput(const CheckCase& c) {
  // 0xa5 bytes are no value any input or result takes, in any type.
  std::memset(c.call.recv, 0xa5, c.layout.recvCount * typeSize(c.call.type));
}

void fillInput(const CheckCase& c) {
  for (size_t i = 0; i < c.layout.sendCount; ++i)
    storeElement(c.call.type, c.call.send, i, input(c, c.rank, i));
}

size_t countWrong(const CheckCase& c) {
  size_t wrong = 0;
  const size_t n = outputCount(c);
  for (size_t j = 0; j < n; ++j)
    if (!matches(c, loadElement(c.call.type, c.call.recv, j), expected(c, j))) ++wrong;
  return wrong;
}

// One more, or one less where one more rounds back to the same value (fp8 above its exact
// integers).
void corruptOutput(const CheckCase& c) {
  if (outputCount(c) == 0) return;
  const double was = loadElement(c.call.type, c.call.recv, 0);
  storeElement(c.call.type, c.call.recv, 0, was + 1);
  if (loadElement(c.call.type, c.call.recv, 0) == was) storeElement(c.call.type, c.call.recv, 0, was - 1);
}

}  // namespace loomperf
