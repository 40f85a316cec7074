// The cross-rank check of registered tensor shapes (shape_check.h).
#include "ddp/shape_check.h"

#include <cstdint>
#include <cstring>

#include "algorithms/plan.h"
#include "ddp/exchange.h"

namespace loom::ddp {
namespace {

// FNV-1a over (count, type) of every tensor.
uint64_t shapeHash(const std::vector<TensorShape>& shapes) {
  uint64_t hash = 0xcbf29ce484222325ull;
  auto mix = [&hash](uint64_t value) {
    for (int i = 0; i < 8; ++i) {
      hash ^= (value >> (8 * i)) & 0xFF;
      hash *= 0x100000001b3ull;
    }
  };
  for (const TensorShape& shape : shapes) {
    mix(shape.count);
    mix(static_cast<uint64_t>(shape.type));
  }
  return hash;
}

std::string describe(const TensorShape& shape) {
  return format("%zu x %s", shape.count, typeName(shape.type));
}

template <typename T>
T read(const std::vector<unsigned char>& all, size_t index) {
  T value;
  std::memcpy(&value, all.data() + index * sizeof(T), sizeof(T));
  return value;
}

}  // namespace

Status checkSameShapes(loomComm_t comm, const std::vector<TensorShape>& shapes, const std::vector<std::string>& names) {
  int nranks = 0;
  LOOM_TRY(fromLoom(loomCommCount(comm, &nranks), comm, "loomCommCount"));
  const uint64_t summary[2] = {shapes.size(), shapeHash(shapes)};
  std::vector<unsigned char> all;
  LOOM_TRY(allGatherBytes(comm, summary, sizeof(summary), &all));

  bool same = true;
  for (int r = 1; r < nranks; ++r) {
    const uint64_t count = read<uint64_t>(all, 2 * r);
    if (count != read<uint64_t>(all, 0)) {
      return error(loomInvalidUsage, "rank 0 registered %llu tensors and rank %d registered %llu",
                   static_cast<unsigned long long>(read<uint64_t>(all, 0)), r,
                   static_cast<unsigned long long>(count));
    }
    same = same && read<uint64_t>(all, 2 * r + 1) == read<uint64_t>(all, 1);
  }
  if (same) return Status::ok();

  // Every rank saw the same summaries, so all of them take this second step together.
  std::vector<uint64_t> mine;
  for (const TensorShape& shape : shapes) {
    mine.push_back(shape.count);
    mine.push_back(static_cast<uint64_t>(shape.type));
  }
  LOOM_TRY(allGatherBytes(comm, mine.data(), mine.size() * sizeof(uint64_t), &all));
  const size_t n = shapes.size();
  for (size_t i = 0; i < n; ++i) {
    for (int r = 1; r < nranks; ++r) {
      TensorShape theirs{read<uint64_t>(all, r * 2 * n + 2 * i),
                         static_cast<loomDataType_t>(read<uint64_t>(all, r * 2 * n + 2 * i + 1))};
      TensorShape root{read<uint64_t>(all, 2 * i),
                       static_cast<loomDataType_t>(read<uint64_t>(all, 2 * i + 1))};
      if (theirs.count != root.count || theirs.type != root.type) {
        return error(loomInvalidUsage, "tensor %zu (%s here) differs across ranks: rank 0 has %s, rank %d has %s",
                     i, names[i].c_str(), describe(root).c_str(), r, describe(theirs).c_str());
      }
    }
  }
  return error(loomInternalError, "tensor shape hashes differ across ranks but the shapes agree");
}

}  // namespace loom::ddp
