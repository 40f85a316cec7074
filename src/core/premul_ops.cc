// A communicator's premultiplied-sum ops (premul_ops.h).
#include "core/premul_ops.h"

#include <cstring>

namespace loom {

Status PreMulOps::create(loomDataType_t type, const void* scalar, bool immediate, int* op) {
  Entry entry{type, {}};
  entry.preMul.on = true;
  if (immediate) {
    std::memcpy(entry.preMul.value, scalar, typeSize(type));
  } else {
    entry.preMul.at = scalar;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  size_t slot = 0;
  while (slot < ops_.size() && ops_[slot].has_value()) ++slot;
  if (slot == ops_.size()) ops_.emplace_back();
  ops_[slot] = entry;
  *op = kFirstOp + static_cast<int>(slot);
  return Status::ok();
}

std::optional<PreMulOps::Entry>* PreMulOps::liveSlot(int op) {
  const long slot = static_cast<long>(op) - kFirstOp;
  if (slot < 0 || static_cast<size_t>(slot) >= ops_.size() || !ops_[static_cast<size_t>(slot)]) return nullptr;
  return &ops_[static_cast<size_t>(slot)];
}

Status PreMulOps::destroy(int op) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::optional<Entry>* slot = liveSlot(op);
  if (slot == nullptr) {
    return error(loomInvalidArgument, "op %d is not an op made by loomRedOpCreatePreMulSum on this communicator", op);
  }
  slot->reset();
  return Status::ok();
}

Status PreMulOps::find(int op, loomDataType_t type, PreMul* out) {
  std::lock_guard<std::mutex> lock(mutex_);
  const std::optional<Entry>* slot = liveSlot(op);
  if (slot == nullptr) {
    return error(loomInvalidArgument,
                 "op %d is neither a loomRedOp_t (0..%d) nor a live op from loomRedOpCreatePreMulSum on this "
                 "communicator",
                 op, loomNumOps - 1);
  }
  const Entry& entry = **slot;
  if (entry.type != type) {
    return error(loomInvalidArgument, "op %d was made for datatype %s; the call's datatype is %s", op,
                 typeName(entry.type), typeName(type));
  }
  *out = entry.preMul;
  return Status::ok();
}

}  // namespace loom
