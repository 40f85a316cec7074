// Ring algorithms. Ranks form the ring 0 -> 1 -> ... -> n-1 -> 0; data moves in chunks, one
// per rank, and every chunk in slices, so that a slice travels on while the next one is still
// being reduced (pipelining). Each channel runs the same ring over its own part of the buffer
// on its own link.
//
//   allreduce, n = 3, rank r owns chunk r+1 after the reduce-scatter half:
//
//   step      rank 0          rank 1          rank 2
//   RS 0   send c0 recv c2  send c1 recv c0  send c2 recv c1   (recv = reduce into recvbuff)
//   RS 1   send c2 recv c1  send c0 recv c2  send c1 recv c0   -> chunk r+1 complete on r
//   AG 0   send c1 recv c0  send c2 recv c1  send c0 recv c2   (recv = plain copy)
//   AG 1   send c0 recv c2  send c1 recv c0  send c2 recv c1
//
// Steps are emitted slice-major (step, slice, channel) on every rank alike, so when channels
// share a link their bytes still arrive in the order the peer expects.
#include <vector>

#include "algorithms/algorithm.h"
#include "algorithms/partition.h"

namespace loom {
namespace {

int mod(int a, int n) { return ((a % n) + n) % n; }

// Copies `range` of the send buffer to the same place in the receive buffer, slice by slice
// (a slice at a time keeps the executor free to move other steps in between).
void copySlices(const CollectiveArgs& a, Plan& plan, const Range& range, bool finalize) {
  for (size_t j = 0; j < sliceCount(range, a.sliceElems()); ++j) {
    Range s = slice(range, a.sliceElems(), j);
    plan.add(copyStep(a.sendAt(s.begin), a.recvAt(s.begin), s.size() * a.elemSize(), finalize));
  }
}

// The step that last wrote slice j of chunk k on channel c (kNone before any).
class LastWrite {
 public:
  LastWrite(int channels, int chunks, size_t slices)
      : chunks_(chunks), slices_(slices), index_(static_cast<size_t>(channels * chunks) * slices, Step::kNone) {}
  int& at(int c, int k, size_t j) { return index_[(static_cast<size_t>(c * chunks_ + k)) * slices_ + j]; }

 private:
  int chunks_;
  size_t slices_;
  std::vector<int> index_;
};

}  // namespace

void ringAllReduce(const CollectiveArgs& a, Plan& plan) {
  const int n = a.nranks, r = a.rank, next = mod(r + 1, n), prev = mod(r - 1, n);
  const bool avg = a.info.op == loomAvg;
  if (n == 1) {
    copySlices(a, plan, {0, a.info.count}, avg);
    return;
  }
  auto chunk = [&](int c, int k) { return part(part(a.info.count, a.channels, c), n, k); };
  const size_t se = a.sliceElems(), es = a.elemSize(), slices = sliceCount(chunk(0, 0), se);
  LastWrite last(a.channels, n, slices);

  // Reduce-scatter: at step s, send chunk r-s (own data at s = 0, else what step s-1 reduced)
  // and reduce chunk r-s-1 arriving from prev into recvbuff.
  for (int s = 0; s < n - 1; ++s) {
    const int sendK = mod(r - s, n), recvK = mod(r - s - 1, n);
    for (size_t j = 0; j < slices; ++j) {
      for (int c = 0; c < a.channels; ++c) {
        Range out = slice(chunk(c, sendK), se, j);
        if (out.size() > 0) {
          const void* src = s == 0 ? a.sendAt(out.begin) : a.recvAt(out.begin);
          plan.add(linkStep(Step::Kind::kSend, next, c, src, nullptr, out.size() * es, last.at(c, sendK, j)));
        }
        Range in = slice(chunk(c, recvK), se, j);
        if (in.size() > 0) {
          Step st = linkStep(Step::Kind::kRecvReduce, prev, c, a.sendAt(in.begin), a.recvAt(in.begin), in.size() * es);
          st.finalize = avg && s == n - 2;
          last.at(c, recvK, j) = plan.add(st);
        }
      }
    }
  }
  // Allgather: chunk r+1 is complete here; pass complete chunks around the ring.
  for (int s = 0; s < n - 1; ++s) {
    const int sendK = mod(r + 1 - s, n), recvK = mod(r - s, n);
    for (size_t j = 0; j < slices; ++j) {
      for (int c = 0; c < a.channels; ++c) {
        Range out = slice(chunk(c, sendK), se, j);
        if (out.size() > 0) {
          plan.add(linkStep(Step::Kind::kSend, next, c, a.recvAt(out.begin), nullptr, out.size() * es,
                            last.at(c, sendK, j)));
        }
        Range in = slice(chunk(c, recvK), se, j);
        if (in.size() > 0) {
          last.at(c, recvK, j) =
              plan.add(linkStep(Step::Kind::kRecv, prev, c, nullptr, a.recvAt(in.begin), in.size() * es));
        }
      }
    }
  }
}

// A chain from the root through the ring: root -> root+1 -> ... -> root-1.
void ringBroadcast(const CollectiveArgs& a, Plan& plan) {
  const int n = a.nranks, r = a.rank, root = a.info.root, v = mod(r - root, n);
  const size_t es = a.elemSize();
  forEachSlice(a.info.count, a.channels, a.sliceElems(), [&](int c, const Range& s) {
    size_t bytes = s.size() * es;
    if (v == 0) {
      if (a.send != a.recv) plan.add(copyStep(a.sendAt(s.begin), a.recvAt(s.begin), bytes, false));
      if (n > 1) plan.add(linkStep(Step::Kind::kSend, mod(r + 1, n), c, a.sendAt(s.begin), nullptr, bytes));
      return;
    }
    int got = plan.add(linkStep(Step::Kind::kRecv, mod(r - 1, n), c, nullptr, a.recvAt(s.begin), bytes));
    if (v < n - 1) plan.add(linkStep(Step::Kind::kSend, mod(r + 1, n), c, a.recvAt(s.begin), nullptr, bytes, got));
  });
}

// A chain through the ring that ends at the root: root+1 -> root+2 -> ... -> root. Ranks in
// between keep partial results in scratch: a non-root's recvbuff is not touched.
void ringReduce(const CollectiveArgs& a, Plan& plan) {
  const int n = a.nranks, r = a.rank, root = a.info.root, v = mod(r - root - 1, n);
  const bool avg = a.info.op == loomAvg;
  if (n == 1) {
    copySlices(a, plan, {0, a.info.count}, avg);
    return;
  }
  const size_t es = a.elemSize();
  char* partial = (v > 0 && v < n - 1) ? plan.scratch(a.info.count * es) : nullptr;
  forEachSlice(a.info.count, a.channels, a.sliceElems(), [&](int c, const Range& s) {
    size_t bytes = s.size() * es;
    if (v == 0) {
      plan.add(linkStep(Step::Kind::kSend, mod(r + 1, n), c, a.sendAt(s.begin), nullptr, bytes));
    } else if (v < n - 1) {
      char* at = partial + s.begin * es;
      int got = plan.add(linkStep(Step::Kind::kRecvReduce, mod(r - 1, n), c, a.sendAt(s.begin), at, bytes));
      plan.add(linkStep(Step::Kind::kSend, mod(r + 1, n), c, at, nullptr, bytes, got));
    } else {
      Step st = linkStep(Step::Kind::kRecvReduce, mod(r - 1, n), c, a.sendAt(s.begin), a.recvAt(s.begin), bytes);
      st.finalize = avg;
      plan.add(st);
    }
  });
}

// recvbuff holds n blocks of `count`; block k comes from rank k. At step s a rank forwards
// block r-s (its own at s = 0, straight from sendbuff) and receives block r-s-1.
void ringAllGather(const CollectiveArgs& a, Plan& plan) {
  const int n = a.nranks, r = a.rank, next = mod(r + 1, n), prev = mod(r - 1, n);
  const size_t count = a.info.count, se = a.sliceElems(), es = a.elemSize();
  auto range = [&](int c, int k) {
    Range p = part(count, a.channels, c);
    return Range{k * count + p.begin, k * count + p.end};
  };
  const size_t slices = sliceCount(range(0, 0), se);
  // Own block into place (nothing to do in place: the copy skips dst == src).
  for (size_t j = 0; j < slices; ++j) {
    for (int c = 0; c < a.channels; ++c) {
      Range own = slice(range(c, r), se, j);
      if (own.size() == 0) continue;
      plan.add(copyStep(a.sendAt(own.begin - r * count), a.recvAt(own.begin), own.size() * es, false));
    }
  }
  LastWrite last(a.channels, n, slices);
  for (int s = 0; s < n - 1; ++s) {
    const int sendK = mod(r - s, n), recvK = mod(r - s - 1, n);
    for (size_t j = 0; j < slices; ++j) {
      for (int c = 0; c < a.channels; ++c) {
        Range out = slice(range(c, sendK), se, j);
        if (out.size() > 0) {
          const void* src = s == 0 ? a.sendAt(out.begin - r * count) : a.recvAt(out.begin);
          plan.add(linkStep(Step::Kind::kSend, next, c, src, nullptr, out.size() * es, last.at(c, sendK, j)));
        }
        Range in = slice(range(c, recvK), se, j);
        if (in.size() > 0) {
          last.at(c, recvK, j) =
              plan.add(linkStep(Step::Kind::kRecv, prev, c, nullptr, a.recvAt(in.begin), in.size() * es));
        }
      }
    }
  }
}

// sendbuff holds n blocks of `count`; rank r ends with block r reduced. At step s a rank
// sends block r-s-1 (own data at s = 0, else the partial it reduced at step s-1) and reduces
// block r-s-2 arriving from prev; the last step's block is r itself, reduced into recvbuff.
void ringReduceScatter(const CollectiveArgs& a, Plan& plan) {
  const int n = a.nranks, r = a.rank, next = mod(r + 1, n), prev = mod(r - 1, n);
  const bool avg = a.info.op == loomAvg;
  const size_t count = a.info.count, se = a.sliceElems(), es = a.elemSize();
  if (n == 1) {
    copySlices(a, plan, {0, count}, avg);
    return;
  }
  char* partial = n > 2 ? plan.scratch(static_cast<size_t>(n) * count * es) : nullptr;
  auto range = [&](int c, int k) {
    Range p = part(count, a.channels, c);
    return Range{k * count + p.begin, k * count + p.end};
  };
  const size_t slices = sliceCount(range(0, 0), se);
  LastWrite last(a.channels, n, slices);
  for (int s = 0; s < n - 1; ++s) {
    const int sendK = mod(r - s - 1, n), recvK = mod(r - s - 2, n);
    for (size_t j = 0; j < slices; ++j) {
      for (int c = 0; c < a.channels; ++c) {
        Range out = slice(range(c, sendK), se, j);
        if (out.size() > 0) {
          const void* src = s == 0 ? a.sendAt(out.begin) : partial + out.begin * es;
          plan.add(linkStep(Step::Kind::kSend, next, c, src, nullptr, out.size() * es, last.at(c, sendK, j)));
        }
        Range in = slice(range(c, recvK), se, j);
        if (in.size() > 0) {
          bool final = s == n - 2;
          void* dst = final ? a.recvAt(in.begin - r * count) : partial + in.begin * es;
          Step st = linkStep(Step::Kind::kRecvReduce, prev, c, a.sendAt(in.begin), dst, in.size() * es);
          st.finalize = avg && final;
          last.at(c, recvK, j) = plan.add(st);
        }
      }
    }
  }
}

}  // namespace loom
