"""Loom as a torch.distributed backend.

    import loom_torch                      # registers the backend "loom"
    torch.distributed.init_process_group("loom", ...)

Every operation of a process group runs on Loom (docs/COMPAT_TORCH.md): CPU tensors, and CUDA
tensors where torch has CUDA (_C.cuda). On torch 1.13 the backend is a ProcessGroup, on torch 2
a Backend that torch's ProcessGroup wraps, registered for "cpu" and, with CUDA, "cuda".
"""
import functools
import inspect
import types

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

from . import _C

# While torch.compile traces (torch 2.3 and later say so), a wrapper calls straight through, so
# that the compiler meets torch's own collective, which it traces as a functional one, and not
# _C's calls, where it would break the graph.
_compiling = getattr(getattr(torch, "compiler", None), "is_compiling", None) or (lambda: False)

__all__ = ["create_process_group"]


def create_process_group(store, rank, size, timeout):
    """The creator torch.distributed calls for init_process_group("loom") and new_group."""
    return _C.create_process_group(store, rank, size, timeout)


def _saying_whether_caller_waits(fn):
    """fn, a collective of torch.distributed, telling the backend while it issues its operation
    whether its caller waits for it (async_op false): the caller's thread then runs it at once
    instead of handing it to the worker. Torch's options cannot say it for every collective."""
    params = inspect.signature(fn).parameters
    at = list(params).index("async_op")
    default = params["async_op"].default

    @functools.wraps(fn)
    def collective(*args, **kwargs):
        if _compiling():
            return fn(*args, **kwargs)
        async_op = kwargs["async_op"] if "async_op" in kwargs else args[at] if len(args) > at else default
        before = _C.set_caller_waits(not async_op)
        try:
            return fn(*args, **kwargs)
        finally:
            _C.set_caller_waits(before)

    return collective


def _wrap_blocking_collectives():
    """Every collective of torch.distributed that takes async_op, wrapped in both modules that
    name it (torch.distributed's own calls among them, as all_gather_object's all_gather, go
    through distributed_c10d's). Once: the backend's registration above guards it."""
    for name, fn in list(vars(c10d).items()):
        # type(), not isinstance: the module's deprecated reduce_op warns on any attribute read.
        if type(fn) is not types.FunctionType or "async_op" not in inspect.signature(fn).parameters:
            continue
        wrapped = _saying_whether_caller_waits(fn)
        setattr(c10d, name, wrapped)
        if getattr(dist, name, None) is fn:
            setattr(dist, name, wrapped)


if "LOOM" not in dist.Backend._plugins:
    if "devices" in inspect.signature(dist.Backend.register_backend).parameters:
        dist.Backend.register_backend("loom", create_process_group, devices=["cpu", "cuda"] if _C.cuda else ["cpu"])
    else:
        dist.Backend.register_backend("loom", create_process_group)
    _wrap_blocking_collectives()
