// How algorithms cut a buffer: into near-equal element ranges (blocks per rank, parts per
// channel) and those into slices no larger than the pipeline slice. Every rank computes the
// same cuts from the same numbers, which is what makes their steps line up.
#pragma once

#include <algorithm>
#include <cstddef>

namespace loom {

// Position a on a ring of n, for any a (negative too).
inline int mod(int a, int n) { return ((a % n) + n) % n; }

// Elements [begin, end).
struct Range {
  size_t begin = 0;
  size_t end = 0;
  size_t size() const { return end - begin; }
};

// Part `index` of `parts` near-equal parts of [0, count); the first count % parts parts hold
// one element more.
inline Range part(size_t count, int parts, int index) {
  size_t n = static_cast<size_t>(parts), i = static_cast<size_t>(index);
  size_t base = count / n, extra = count % n;
  size_t begin = i * base + std::min(i, extra);
  return {begin, begin + base + (i < extra ? 1 : 0)};
}

// Part of a sub-range.
inline Range part(const Range& range, int parts, int index) {
  Range r = part(range.size(), parts, index);
  return {range.begin + r.begin, range.begin + r.end};
}

// Number of slices of at most sliceElems elements that cover `range` (0 for an empty range).
inline size_t sliceCount(const Range& range, size_t sliceElems) {
  return (range.size() + sliceElems - 1) / sliceElems;
}

// Slice j of `range`, or an empty range past its end.
inline Range slice(const Range& range, size_t sliceElems, size_t j) {
  size_t begin = std::min(range.end, range.begin + j * sliceElems);
  return {begin, std::min(range.end, begin + sliceElems)};
}

// Calls f(channel, slice) for every non-empty slice of every channel's part of [0, count),
// slice-major: the order in which every rank emits steps, so channels may share a link.
template <typename F>
void forEachSlice(size_t count, int channels, size_t sliceElems, F f) {
  const size_t slices = sliceCount(part(count, channels, 0), sliceElems);
  for (size_t j = 0; j < slices; ++j) {
    for (int c = 0; c < channels; ++c) {
      Range s = slice(part(count, channels, c), sliceElems, j);
      if (s.size() > 0) f(c, s);
    }
  }
}

}  // namespace loom
