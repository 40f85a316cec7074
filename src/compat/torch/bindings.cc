// The Python module loom_torch._C: the creator torch.distributed calls for backend "loom".
#include <pybind11/chrono.h>
#include <torch/csrc/utils/pybind.h>
#include <torch/extension.h>

#include "compat/torch/mapped_tensors.h"
#include "compat/torch/process_group_loom.h"

PYBIND11_MODULE(_C, m) {
  m.doc() = "Loom's torch.distributed backend (loom_torch registers it as 'loom')";
  // The ProcessGroup type is torch's own (registered by torch.distributed), so the returned
  // object is a torch.distributed.ProcessGroup.
  m.def("create_process_group", &loom::torch_backend::ProcessGroupLoom::create, pybind11::arg("store"),
        pybind11::arg("rank"), pybind11::arg("size"), pybind11::arg("timeout"),
        pybind11::call_guard<pybind11::gil_scoped_release>());
  m.def("is_mapped", &loom::torch_backend::isMappedCpuMemory, pybind11::arg("tensor"));
  // For loom_torch's wrappers of torch.distributed's collectives.
  m.def("set_caller_waits", &loom::torch_backend::setCallerWaits, pybind11::arg("caller_waits"));
  // Whether CUDA tensors were built in: loom_torch then registers the backend for "cuda" too.
#ifdef LOOM_TORCH_CUDA
  m.attr("cuda") = true;
#else
  m.attr("cuda") = false;
#endif
}
