"""Loom as a torch.distributed backend.

    import loom_torch                      # registers the backend "loom"
    torch.distributed.init_process_group("loom", ...)

Every operation of a process group runs on Loom (docs/COMPAT_TORCH.md): CPU tensors, and CUDA
tensors where torch has CUDA (_C.cuda). On torch 1.13 the backend is a ProcessGroup, on torch 2
a Backend that torch's ProcessGroup wraps, registered for "cpu" and, with CUDA, "cuda".
"""
import inspect

import torch.distributed as dist

from . import _C

__all__ = ["create_process_group"]


def create_process_group(store, rank, size, timeout):
    """The creator torch.distributed calls for init_process_group("loom") and new_group."""
    return _C.create_process_group(store, rank, size, timeout)


if "LOOM" not in dist.Backend._plugins:
    if "devices" in inspect.signature(dist.Backend.register_backend).parameters:
        dist.Backend.register_backend("loom", create_process_group, devices=["cpu", "cuda"] if _C.cuda else ["cpu"])
    else:
        dist.Backend.register_backend("loom", create_process_group)
