// CPU tensors that the other processes of the host can map: a torch CPU allocator that puts
// large allocations in loomMemAlloc memory, so that a collective on them (DDP's gradient
// buckets, made once and reduced every step) takes Loom's mapped allreduce (core/
// mapped_allreduce.h): each rank reads its peers' buffers straight, in three board rounds,
// instead of a ring through the FIFO whose every slot needs both ranks on a core.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>

namespace loom::torch_backend {

// Makes torch's CPU allocator serve allocations of at least minBytes from loomMemAlloc
// (smaller ones, and any loomMemAlloc refuses, from the allocator it replaces), keeping freed
// blocks for reuse. Called again (another group), the smaller threshold stays. minBytes > 0.
void mapCpuTensorsFrom(size_t minBytes);

// Whether t's storage came from loomMemAlloc through this allocator.
bool isMappedCpuMemory(const at::Tensor& t);

}  // namespace loom::torch_backend
