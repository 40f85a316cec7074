#!/usr/bin/env python3
"""torch.distributed on the backend "loom" (src/compat/torch, docs/COMPAT_TORCH.md).

    torch_backend_test.py [--ranks 1,2,3,4] [--only NAME[,NAME...]]

Each case runs as 1-4 processes (torch.multiprocessing, init_method tcp://) and checks
against values computed here: every operation of the process group for every dtype torch and
Loom share, in place and out of place, sync and async (wait, is_completed, get_future), and
torch's object collectives; refusals with a message; DDP on "loom" against the same training
on "gloo" (bitwise equal on 2 ranks, within 1e-6 on 3 and 4): as it comes, with an fp16
compression hook, with a layer used every other step under find_unused_parameters
(ddp_unused), with uneven inputs under join() (ddp_uneven), with its buckets in loomMemAlloc
memory (ddp_mapped), and FullyShardedDataParallel (fsdp, where FSDP can be imported: not on
torch 1.13 under Python 3.11); the allocator that maps large tensors (mapped_tensors); a rank
killed mid-training, after which every survivor raises within the timeout, and so do
mismatched calls under LOOM_CHECK=1 and a rank that never calls (mismatch_checked, timeout).
Where loom_torch has CUDA tensors and a GPU exists (every rank on one), the collectives, DDP
and FSDP on CUDA tensors too (cuda, ddp_cuda, fsdp_cuda); torch 2's coalesced tensor
collectives (coalesced) and float8 dtypes (float8, torch 2.1 and later). A case this machine
cannot run says why and counts as skipped.

Prints one line per case and rank count, then "N passed, N failed, N skipped"; exits 1 on any
failure, 77 (meson's skip) with the reason when torch or loom_torch cannot be imported.
"""
import argparse
import contextlib
import ctypes
import datetime
import faulthandler
import gc
import inspect
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
import traceback

from free_port import free_port

try:
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
except ImportError as e:
    print(f"skipped: torch is not importable by {sys.executable} ({e})")
    sys.exit(77)

# Torch 2.4 and later ask TCPStore for libuv unless USE_LIBUV=0, and Debian's torch 2.x has no
# libuv (init_process_group fails: "use_libuv was requested but PyTorch was build without libuv
# support"); the older store serves these tests on every torch.
os.environ.setdefault("USE_LIBUV", "0")
try:
    # Imported before loom_torch wraps torch.distributed's collectives, as a program using FSDP
    # would: its table of collectives to trace then holds torch's own (case compiled).
    import torch.distributed._functional_collectives  # noqa: F401
except ImportError:  # torch 1.13
    pass
try:
    import loom_torch  # noqa: F401  (registers the backend)
except ImportError as e:
    print(f"skipped: loom_torch is not built or not on PYTHONPATH ({e})")
    sys.exit(77)

DTYPES = [torch.int8, torch.uint8, torch.int32, torch.int64, torch.float16, torch.bfloat16,
          torch.float32, torch.float64]
OPS = [dist.ReduceOp.SUM, dist.ReduceOp.PRODUCT, dist.ReduceOp.MIN, dist.ReduceOp.MAX]
N = 1031  # elements per call: odd, larger than a cache line of any type


def init(rank, size, port, backend="loom", timeout_s=30):
    # SIGUSR1 prints every Python thread's stack: spawn sends it to a rank that hangs.
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=size, timeout=datetime.timedelta(seconds=timeout_s))


def values(rank, n, op=None, offset=0):
    """Rank `rank`'s input: small integers, so every sum, product, min and max is exact in
    every dtype (products of up to 4 ranks stay at most 16)."""
    i = torch.arange(offset, offset + n, dtype=torch.float64)
    if op is not None and op == dist.ReduceOp.PRODUCT:
        return 1 + torch.remainder(i + rank, 2)
    return 1 + torch.remainder(i + 3 * rank, 5)


def reduced(size, n, op, offset=0):
    return fold(torch.stack([values(r, n, op, offset) for r in range(size)]), op)


def fold(stack, op):
    """op over the first dimension of `stack` (one row per rank)."""
    if op == dist.ReduceOp.SUM:
        return stack.sum(0)
    if op == dist.ReduceOp.PRODUCT:
        return stack.prod(0)
    if op == dist.ReduceOp.MIN:
        return stack.min(0).values
    if op == dist.ReduceOp.MAX:
        return stack.max(0).values
    raise ValueError(op)


def expect_equal(got, want, what):
    want = want.to(got.dtype)
    if not torch.equal(got, want):
        bad = (got.double() != want.double()).nonzero()
        first = bad[0].tolist() if len(bad) else "?"
        raise AssertionError(f"{what}: {len(bad)} elements differ, first at {first}: "
                             f"{got.flatten()[0:4].tolist()} vs {want.flatten()[0:4].tolist()}")


def poll_until_completed(work, seconds, what):
    """Polls work.is_completed() (which never runs the operation itself) until it says so."""
    deadline = time.monotonic() + seconds
    while not work.is_completed():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} was not completed within {seconds} s")
        time.sleep(0.001)


# ---- cases (each runs on every rank) ----------------------------------------------------------

def case_allreduce(rank, size):
    for dtype in DTYPES:
        for op in OPS:
            t = values(rank, N, op).to(dtype)
            dist.all_reduce(t, op=op)
            expect_equal(t, reduced(size, N, op), f"all_reduce {dtype} {op}")
            # async, non-contiguous (every other element of a bigger tensor)
            big = torch.zeros(2 * N, dtype=dtype)
            big[::2] = values(rank, N, op).to(dtype)
            view = big[::2]
            work = dist.all_reduce(view, op=op, async_op=True)
            result = work.get_future().wait()
            if not work.is_completed() or not work.wait():
                raise AssertionError("async all_reduce: not completed after its future")
            expect_equal(view, reduced(size, N, op), f"async strided all_reduce {dtype} {op}")
            expect_equal(result[0], reduced(size, N, op), f"future value of all_reduce {dtype} {op}")
            if big[1::2].abs().sum() != 0:
                raise AssertionError("a strided all_reduce wrote between its elements")
        if dtype.is_floating_point:
            t = values(rank, N).to(dtype)
            dist.all_reduce(t, op=dist.ReduceOp.AVG)
            want = reduced(size, N, dist.ReduceOp.SUM) / size
            if not torch.allclose(t.double(), want, rtol=1e-2 if dtype in (torch.float16, torch.bfloat16) else 1e-6):
                raise AssertionError(f"all_reduce AVG {dtype}")
    # complex: torch.distributed sums it as its real view
    c = torch.complex(values(rank, N).float(), -values(rank, N).float())
    dist.all_reduce(c)
    expect_equal(torch.view_as_real(c)[:, 0], reduced(size, N, dist.ReduceOp.SUM), "all_reduce complex64 (real)")
    ts = [values(rank, 5 + k).float() for k in range(3)]
    dist.all_reduce_coalesced(ts)
    for k, t in enumerate(ts):
        expect_equal(t, reduced(size, 5 + k, dist.ReduceOp.SUM), "all_reduce_coalesced")


def case_broadcast_reduce(rank, size):
    for dtype in DTYPES + [torch.bool]:
        for root in range(size):
            t = values(rank, N).to(dtype) if dtype != torch.bool else (values(rank, N) > 2)
            dist.broadcast(t, src=root)
            want = values(root, N).to(dtype) if dtype != torch.bool else (values(root, N) > 2)
            expect_equal(t, want, f"broadcast {dtype} from {root}")
    for dtype in DTYPES:
        for op in OPS:
            root = size - 1
            t = values(rank, N, op).to(dtype)
            dist.reduce(t, dst=root, op=op)
            if rank == root:
                expect_equal(t, reduced(size, N, op), f"reduce {dtype} {op}")


def case_gathers(rank, size):
    for dtype in DTYPES:
        x = values(rank, N).to(dtype)
        outs = [torch.zeros(N, dtype=dtype) for _ in range(size)]
        dist.all_gather(outs, x)
        for r in range(size):
            expect_equal(outs[r], values(r, N), f"all_gather {dtype} block {r}")
        flat = torch.zeros(size * N, dtype=dtype)
        dist.all_gather_into_tensor(flat, x)
        expect_equal(flat, torch.cat([values(r, N) for r in range(size)]), f"all_gather_into_tensor {dtype}")
        root = size // 2
        g = [torch.zeros(N, dtype=dtype) for _ in range(size)] if rank == root else None
        dist.gather(x, gather_list=g, dst=root)
        if rank == root:
            for r in range(size):
                expect_equal(g[r], values(r, N), f"gather {dtype} block {r}")
        s = torch.zeros(N, dtype=dtype)
        pieces = [values(r, N, offset=100).to(dtype) for r in range(size)] if rank == root else None
        dist.scatter(s, scatter_list=pieces, src=root)
        expect_equal(s, values(rank, N, offset=100), f"scatter {dtype}")


def case_objects(rank, size):
    """torch.distributed's object collectives: each rank's object pickled into a byte tensor of
    its own length, the lengths exchanged first (all_gather_object pads to the longest)."""
    mine = {"rank": rank, "payload": "x" * (1000 * rank + 1), "floats": [0.5 * rank] * rank}
    want = lambda r: {"rank": r, "payload": "x" * (1000 * r + 1), "floats": [0.5 * r] * r}
    gathered = [None] * size
    dist.all_gather_object(gathered, mine)
    if gathered != [want(r) for r in range(size)]:
        raise AssertionError(f"all_gather_object: {[g['rank'] if g else g for g in gathered]}")
    root = size - 1
    listed = [want(root), "second", 3] if rank == root else [None, None, None]
    dist.broadcast_object_list(listed, src=root)
    if listed != [want(root), "second", 3]:
        raise AssertionError(f"broadcast_object_list: {listed[1:]}")
    into = [None] * size if rank == 0 else None
    dist.gather_object(mine, into, dst=0)
    if rank == 0 and into != [want(r) for r in range(size)]:
        raise AssertionError("gather_object")
    out = [None]
    dist.scatter_object_list(out, [want(r) for r in range(size)] if rank == root else None, src=root)
    if out[0] != want(rank):
        raise AssertionError(f"scatter_object_list: rank {rank} got {out[0] and out[0]['rank']}")


def case_reduce_scatter(rank, size):
    for dtype in DTYPES:
        for op in OPS:
            ins = [values(rank, N, op, offset=r * N).to(dtype) for r in range(size)]
            out = torch.zeros(N, dtype=dtype)
            dist.reduce_scatter(out, ins, op=op)
            expect_equal(out, reduced(size, N, op, offset=rank * N), f"reduce_scatter {dtype} {op}")
            flat = values(rank, size * N, op).to(dtype)
            out2 = torch.zeros(N, dtype=dtype)
            dist.reduce_scatter_tensor(out2, flat, op=op)
            expect_equal(out2, reduced(size, size * N, op)[rank * N:(rank + 1) * N], f"reduce_scatter_tensor {dtype} {op}")


def case_alltoall(rank, size):
    for dtype in DTYPES:
        x = values(rank, size * N).to(dtype)
        out = torch.zeros(size * N, dtype=dtype)
        dist.all_to_all_single(out, x)
        want = torch.cat([values(r, size * N)[rank * N:(rank + 1) * N] for r in range(size)])
        expect_equal(out, want, f"all_to_all_single {dtype}")
    # Split sizes: rank r sends (p + r) % 3 + 1 rows of 4 to rank p.
    rows = lambda src, dst: (dst + src) % 3 + 1  # noqa: E731
    send_rows = [rows(rank, p) for p in range(size)]
    recv_rows = [rows(p, rank) for p in range(size)]
    x = torch.cat([torch.full((send_rows[p], 4), float(100 * rank + p)) for p in range(size)])
    out = torch.zeros(sum(recv_rows), 4)
    dist.all_to_all_single(out, x, output_split_sizes=recv_rows, input_split_sizes=send_rows)
    want = torch.cat([torch.full((recv_rows[p], 4), float(100 * p + rank)) for p in range(size)])
    expect_equal(out, want, "all_to_all_single with split sizes")
    ins = [torch.full((p + 1,), float(10 * rank + p)) for p in range(size)]
    outs = [torch.zeros(rank + 1) for _ in range(size)]
    dist.all_to_all(outs, ins)
    for p in range(size):
        expect_equal(outs[p], torch.full((rank + 1,), float(10 * p + rank)), f"all_to_all from {p}")


def ring_exchange(rank, size, n, batched):
    """Every rank sends n elements to the next and receives from the previous: through
    batch_isend_irecv, or as a plain isend then irecv (which must not wait on each other, as
    with Gloo, even larger than any FIFO)."""
    nxt, prv = (rank + 1) % size, (rank - 1) % size
    send = values(rank, n).float()
    recv = torch.zeros(n)
    if batched:
        reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, send, nxt), dist.P2POp(dist.irecv, recv, prv)])
    else:
        reqs = [dist.isend(send, nxt), dist.irecv(recv, prv)]
    for r in reqs:
        r.wait()
    expect_equal(recv, values(prv, n), f"{'batch_isend_irecv' if batched else 'isend then irecv'} ring of {n}")


def case_p2p(rank, size):
    ring_exchange(rank, size, N, batched=True)
    ring_exchange(rank, size, 1 << 20, batched=False)
    partner = rank ^ 1
    if partner < size:
        # Blocking pairs in an order that cannot deadlock: even ranks send first.
        got = torch.zeros(7, dtype=torch.int64)
        mine = torch.arange(7) + 1000 * rank
        if rank % 2 == 0:
            dist.send(mine, partner)
            dist.recv(got, partner)
        else:
            dist.recv(got, partner)
            dist.send(mine, partner)
        expect_equal(got, torch.arange(7) + 1000 * partner, "send/recv pair")
        # A send only polled (is_completed), or waited on through its future, still goes.
        big = values(rank, 1 << 20).float()
        got = torch.zeros(1 << 20)
        if rank % 2 == 0:
            poll_until_completed(dist.isend(big, partner), 20, "isend polled with is_completed")
            dist.isend(big, partner).get_future().wait()
        else:
            for how in ("polled", "through its future"):
                dist.recv(got, partner)
                expect_equal(got, values(partner, 1 << 20), f"isend {how}")
    dist.barrier()


def case_premul_sum(rank, size):
    """PREMUL_SUM (torch's _make_nccl_premul_sum): each rank's input times its own factor, summed.
    The factors (0.5 and 1) keep every product and sum exact."""
    factor = lambda r: 0.5 if r % 2 == 0 else 1.0  # noqa: E731
    want = lambda n, offset=0: sum(factor(r) * values(r, n, offset=offset).double() for r in range(size))  # noqa: E731
    for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
        op = dist._make_nccl_premul_sum(factor(rank))
        t = values(rank, N).to(dtype)
        dist.all_reduce(t, op=op)
        expect_equal(t, want(N), f"all_reduce {dtype} premul_sum")
        flat = values(rank, size * N).to(dtype)
        out = torch.zeros(N, dtype=dtype)
        dist.reduce_scatter_tensor(out, flat, op=op)
        expect_equal(out, want(size * N)[rank * N:(rank + 1) * N], f"reduce_scatter_tensor {dtype} premul_sum")
        r = values(rank, N).to(dtype)
        dist.reduce(r, dst=size - 1, op=op)
        if rank == size - 1:
            expect_equal(r, want(N), f"reduce {dtype} premul_sum")
    # The factor as a one-element tensor, read when the call runs.
    factor_tensor = torch.tensor([factor(rank)])
    torch1 = torch.__version__.split(".")[0] == "1"
    tensor_op = dist._make_nccl_premul_sum([factor_tensor] if torch1 else factor_tensor)
    ts = [values(rank, 5 + k).float() for k in range(3)]
    dist.all_reduce_coalesced(ts, op=tensor_op)
    for k, t in enumerate(ts):
        expect_equal(t, want(5 + k), "all_reduce_coalesced premul_sum (tensor factor)")
    try:
        dist.all_reduce(torch.ones(2, dtype=torch.bool), op=dist._make_nccl_premul_sum(2.0))
    except RuntimeError as e:
        if "bool" not in str(e):
            raise AssertionError(f"bool PREMUL_SUM: unclear message: {e}")
    else:
        raise AssertionError("PREMUL_SUM of bools did not raise")


def case_refusals(rank, size):
    t = torch.ones(4, dtype=torch.int32)
    for op in (dist.ReduceOp.BAND, dist.ReduceOp.BOR, dist.ReduceOp.BXOR):
        try:
            dist.all_reduce(t, op=op)
        except RuntimeError as e:
            if "not supported by Loom" not in str(e):
                raise AssertionError(f"{op}: unclear message: {e}")
        else:
            raise AssertionError(f"all_reduce with {op} did not raise")
    for bad in (torch.ones(3, dtype=torch.int16), torch.ones(3, dtype=torch.float16).to_sparse()):
        try:
            dist.all_reduce(bad)
        except RuntimeError as e:
            if "not supported by Loom" not in str(e) and "dense" not in str(e):
                raise AssertionError(f"{bad.dtype} {bad.layout}: unclear message: {e}")
        else:
            raise AssertionError(f"all_reduce of {bad.dtype} {bad.layout} did not raise")
    try:
        dist.all_reduce(torch.ones(2, dtype=torch.bool))
    except RuntimeError as e:
        if "bool" not in str(e):
            raise AssertionError(f"bool SUM: unclear message: {e}")
    else:
        raise AssertionError("SUM of bools did not raise")
    # The group still works after refusals.
    t = values(rank, N).float()
    dist.all_reduce(t)
    expect_equal(t, reduced(size, N, dist.ReduceOp.SUM), "all_reduce after refusals")


def case_order(rank, size):
    """Operations run in issue order whichever thread runs them: the worker, or a caller whose
    wait() finds its operation still queued and runs it, and what came before it, itself."""
    sums = dist.ReduceOp.SUM
    # Asynchronous calls left unwaited, then a blocking one: every earlier one is done by then.
    ts = [values(rank, N, offset=k).float() for k in range(4)]
    works = [dist.all_reduce(t, async_op=True) for t in ts]
    b = torch.full((N,), float(rank))
    dist.broadcast(b, src=size - 1)
    if not all(w.is_completed() for w in works):
        raise AssertionError("an all_reduce issued before a blocking broadcast was not done after it")
    for k, t in enumerate(ts):
        expect_equal(t, reduced(size, N, sums, offset=k), f"queued all_reduce {k}")
    expect_equal(b, torch.full((N,), float(size - 1)), "broadcast after queued all_reduces")
    # Waiting on the second of three: the first two are done, then the third after its wait.
    us = [values(rank, N, offset=10 + k).float() for k in range(3)]
    works = [dist.all_reduce(u, async_op=True) for u in us]
    works[1].wait()
    if not (works[0].is_completed() and works[1].is_completed()):
        raise AssertionError("wait() on the second all_reduce returned before the first two were done")
    works[2].wait()
    for k, u in enumerate(us):
        expect_equal(u, reduced(size, N, sums, offset=10 + k), f"all_reduce {k} of three waited out of order")


def worker_switches():
    """Context switches so far of the process groups' worker threads (named loom-torch)."""
    total = 0
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                if f.read().strip() != "loom-torch":
                    continue
            with open(f"/proc/self/task/{tid}/status") as f:
                total += sum(int(line.split()[1]) for line in f if "ctxt_switches:" in line)
        except FileNotFoundError:  # a thread that ended meanwhile
            continue
    return total


def case_caller_runs(rank, size):
    """A blocking collective runs on its caller's thread (loom_torch's wrappers of
    torch.distributed say that its caller waits): the worker is not woken for it, its context
    switches stay put; an asynchronous one wakes the worker, which runs it while the caller
    only polls."""
    t = torch.ones(1 << 16)
    parts = [torch.empty(1 << 16) for _ in range(size)]
    dist.all_reduce(t)
    time.sleep(0.05)  # the worker, done looking for more work, asleep
    before = worker_switches()
    calls = 20
    for _ in range(calls):
        dist.all_reduce(t)
        dist.broadcast(t, src=0)
        dist.all_gather(parts, t)
        dist.barrier()
    woke = worker_switches() - before
    if woke > 2:
        raise AssertionError(f"the worker switched {woke} times during {4 * calls} blocking collectives")
    time.sleep(0.05)
    before = worker_switches()
    poll_until_completed(dist.all_reduce(t, async_op=True), 30, "an asynchronous all_reduce the caller only polls")
    time.sleep(0.01)  # the worker looks for more work for 200 µs, then blocks: a switch counted
    if worker_switches() == before:
        raise AssertionError("an asynchronous all_reduce completed without waking the worker")
    # A refused blocking call leaves this thread's word as it was (the next async_op=True call
    # must not run on the caller).
    try:
        dist.all_reduce(torch.ones(3, dtype=torch.bool), op=dist.ReduceOp.SUM)
        raise AssertionError("a SUM of bool tensors was not refused")
    except RuntimeError:
        pass
    if loom_torch._C.set_caller_waits(False):
        raise AssertionError("a refused blocking call left the caller-waits word set")


def case_compiled(rank, size):
    """torch.compile traces dist.all_reduce on a loom group into one graph (fullgraph: a graph
    break at loom_torch's wrapper would fail it), and the compiled step sums."""
    if not hasattr(getattr(torch, "compiler", None), "is_compiling"):
        raise Skip(f"torch {torch.__version__} has no torch.compiler.is_compiling (torch 2.3 and later have)")

    def step(t):
        dist.all_reduce(t)
        return t * 2

    t = values(rank, N).float()
    out = torch.compile(step, backend="eager", fullgraph=True)(t)
    expect_equal(out, 2 * reduced(size, N, dist.ReduceOp.SUM), "compiled all_reduce")


class Skip(Exception):
    """A case this torch cannot run; its message says why."""


def case_coalesced(rank, size):
    """torch 2's coalescing manager turns all_gather_into_tensor and reduce_scatter_tensor calls
    made inside it into one allgather_into_tensor_coalesced / reduce_scatter_tensor_coalesced."""
    manager = dist.distributed_c10d._coalescing_manager
    if "async_ops" not in inspect.signature(manager).parameters:
        raise Skip(f"torch {torch.__version__} has no coalescing of tensor collectives (torch 2 has)")
    ins = [values(rank, N + k).float() for k in range(3)]
    outs = [torch.zeros((N + k) * size) for k in range(3)]
    with manager(async_ops=False):
        for o, i in zip(outs, ins):
            dist.all_gather_into_tensor(o, i)
    for k, o in enumerate(outs):
        expect_equal(o, torch.cat([values(r, N + k) for r in range(size)]), f"coalesced all_gather_into_tensor {k}")
    full = [values(rank, (N + k) * size).float() for k in range(3)]
    mine = [torch.zeros(N + k) for k in range(3)]
    with manager(async_ops=False):
        for o, i in zip(mine, full):
            dist.reduce_scatter_tensor(o, i)
    for k, o in enumerate(mine):
        want = reduced(size, (N + k) * size, dist.ReduceOp.SUM)[rank * (N + k):(rank + 1) * (N + k)]
        expect_equal(o, want, f"coalesced reduce_scatter_tensor {k}")


def case_float8(rank, size):
    """torch's float8_e4m3fn and float8_e5m2 (torch 2.1 and later) as Loom's float8 types. Inputs
    1..2 (products, sums of up to 4 ranks) and 1..5 (min, max) are exact in both formats; results
    are compared as float32, which torch's float8 tensors convert to."""
    if not hasattr(torch, "float8_e4m3fn"):
        raise Skip(f"torch {torch.__version__} has no float8 dtypes (torch 2.1 and later have)")
    for dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        def check(got, want, what):
            expect_equal(got.float(), want.float(), f"{what} {dtype}")
        for op in OPS:
            pattern = dist.ReduceOp.PRODUCT if op in (dist.ReduceOp.SUM, dist.ReduceOp.PRODUCT) else op
            ins = torch.stack([values(r, N, pattern) for r in range(size)])
            t = ins[rank].to(dtype)
            dist.all_reduce(t, op=op)
            check(t, fold(ins, op), f"all_reduce {op}")
        t = values(rank, N).to(dtype)
        dist.broadcast(t, src=size - 1)
        check(t, values(size - 1, N), "broadcast")
        flat = torch.zeros(size * N, dtype=dtype)
        dist.all_gather_into_tensor(flat, values(rank, N).to(dtype))
        check(flat, torch.cat([values(r, N) for r in range(size)]), "all_gather_into_tensor")
        ins = torch.stack([values(r, size * N, dist.ReduceOp.PRODUCT) for r in range(size)])
        out = torch.zeros(N, dtype=dtype)
        dist.reduce_scatter_tensor(out, ins[rank].to(dtype))
        check(out, ins.sum(0)[rank * N:(rank + 1) * N], "reduce_scatter_tensor")
        x = values(rank, size * N).to(dtype)
        out = torch.zeros(size * N, dtype=dtype)
        dist.all_to_all_single(out, x)
        check(out, torch.cat([values(r, size * N)[rank * N:(rank + 1) * N] for r in range(size)]), "all_to_all_single")


def cuda_device(rank):
    """This rank's CUDA device (every rank on one GPU where there is one), or Skip saying why not."""
    if not loom_torch._C.cuda:
        raise Skip(f"loom_torch was built without CUDA tensors (torch {torch.__version__} has no CUDA)")
    if not torch.cuda.is_available():
        raise Skip("no CUDA device")
    device = torch.device("cuda", rank % torch.cuda.device_count())
    torch.cuda.set_device(device)
    return device


def case_cuda(rank, size):
    """CUDA tensors on the device communicator, on the caller's current stream."""
    dev = cuda_device(rank)
    for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.int32, torch.int64):
        for op in (dist.ReduceOp.SUM, dist.ReduceOp.MAX):
            t = values(rank, N, op).to(dtype).to(dev)
            dist.all_reduce(t, op=op)
            expect_equal(t.cpu(), reduced(size, N, op), f"cuda all_reduce {dtype} {op}")
    b = torch.full((N,), float(rank), device=dev)
    dist.broadcast(b, src=size - 1)
    expect_equal(b.cpu(), torch.full((N,), float(size - 1)), "cuda broadcast")
    mine = values(rank, N).float().to(dev)
    flat = torch.zeros(N * size, device=dev)
    dist.all_gather_into_tensor(flat, mine)
    expect_equal(flat.cpu(), torch.cat([values(r, N) for r in range(size)]), "cuda all_gather_into_tensor")
    outs = [torch.zeros(N, device=dev) for _ in range(size)]
    dist.all_gather(outs, mine)
    for r, o in enumerate(outs):
        expect_equal(o.cpu(), values(r, N), f"cuda all_gather from {r}")
    block = torch.zeros(N, device=dev)
    dist.reduce_scatter_tensor(block, values(rank, N * size).float().to(dev))
    want = reduced(size, N * size, dist.ReduceOp.SUM)[rank * N:(rank + 1) * N]
    expect_equal(block.cpu(), want, "cuda reduce_scatter_tensor")
    rows = torch.arange(4 * size, dtype=torch.float32, device=dev) + 100 * rank
    got = torch.empty_like(rows)
    dist.all_to_all_single(got, rows)
    want = torch.cat([torch.arange(4 * rank, 4 * rank + 4, dtype=torch.float32) + 100 * p for p in range(size)])
    expect_equal(got.cpu(), want, "cuda all_to_all_single")
    # A ring of sends and receives larger than any FIFO, which torch 2 coalesces on CUDA tensors.
    nxt, prv = (rank + 1) % size, (rank - 1) % size
    send = values(rank, 1 << 20).float().to(dev)
    recv = torch.zeros(1 << 20, device=dev)
    for r in dist.batch_isend_irecv([dist.P2POp(dist.isend, send, nxt), dist.P2POp(dist.irecv, recv, prv)]):
        r.wait()
    expect_equal(recv.cpu(), values(prv, 1 << 20), "cuda batch_isend_irecv ring")
    strided = values(rank, 2 * N).float().to(dev)[::2]
    dist.all_reduce(strided)
    expect_equal(strided.cpu(), reduced(size, 2 * N, dist.ReduceOp.SUM)[::2], "cuda all_reduce of a strided view")
    # Issued on a side stream, waited on from the default one; through its future; polled.
    t = values(rank, N).float().to(dev)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        work = dist.all_reduce(t, async_op=True)
    work.wait()
    expect_equal(t.cpu(), reduced(size, N, dist.ReduceOp.SUM), "cuda all_reduce on a side stream")
    u = values(rank, N).float().to(dev)
    value = dist.all_reduce(u, async_op=True).get_future().wait()
    expect_equal(value[0].cpu(), reduced(size, N, dist.ReduceOp.SUM), "cuda all_reduce through its future")
    v = values(rank, N).float().to(dev)
    poll_until_completed(dist.all_reduce(v, async_op=True), 20, "a cuda all_reduce polled with is_completed")
    expect_equal(v.cpu(), reduced(size, N, dist.ReduceOp.SUM), "cuda all_reduce polled")


def case_mapped_tensors(rank, size):
    """Once a group of two or more ranks exists, CPU tensors from 1 MiB get loomMemAlloc memory
    (LOOM_TORCH_MAPPED_MIN_BYTES), so that allreduces on them run mapped: their results, a freed
    block reused, the oldest let go beyond 1 GiB of freed blocks, a forked child's writes kept
    from the parent, and torch's allocator again once the blocks would hold a quarter of the
    descriptor limit."""
    is_mapped = loom_torch._C.is_mapped
    n = 1 << 18  # float32 elements: 1 MiB
    t = torch.empty(n)
    if size == 1:
        if is_mapped(t):
            raise AssertionError("a group of one rank maps tensors")
        return
    below = torch.empty(n - 1024)
    if not is_mapped(t) or is_mapped(below):
        raise AssertionError(f"1 MiB mapped: {is_mapped(t)}, 1 MiB less 4 KiB mapped: {is_mapped(below)}")
    for offset in range(3):
        v = values(rank, n + 17, offset=offset).float()
        if not is_mapped(v):
            raise AssertionError("the input is not mapped")
        dist.all_reduce(v)
        expect_equal(v, reduced(size, n + 17, dist.ReduceOp.SUM, offset=offset), f"mapped all_reduce {offset}")
    # A block kept for reuse still holds what it held (a fresh one is zeroed pages).
    t.fill_(7.0)
    address = t.data_ptr()
    del t
    t = torch.empty(n)
    if t.data_ptr() != address or not bool(t.eq(7.0).all()):
        raise AssertionError("a freed block was not reused for a tensor of its size")
    # Beyond 1 GiB of freed blocks the oldest go back: sizes no longer made do not stay held.
    # (Blocks never written hold no memory: 17 of 64 MiB and more cost nothing here.)
    old = torch.empty(n)
    old.fill_(3.0)
    del old
    recent = None
    for k in range(17):
        recent = torch.empty((64 << 18) + 1024 * (k + 1))
    recent.fill_(5.0)
    del recent
    if not bool(torch.empty(n).eq(0.0).all()):
        raise AssertionError("the oldest freed block was kept beyond 1 GiB of freed blocks")
    if not bool(torch.empty((64 << 18) + 1024 * 17).eq(5.0).all()):
        raise AssertionError("the most recently freed block was not kept")
    t.fill_(1.0)
    child = os.fork()
    if child == 0:
        ctypes.memset(t.data_ptr(), 0, 4 * n)
        os._exit(0)
    os.waitpid(child, 0)
    if not bool(t.eq(1.0).all()):
        raise AssertionError("a forked child's write reached the parent's tensor")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    open_now = len(os.listdir("/proc/self/fd"))
    limit = 4 * open_now + 200
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))
    try:
        held = [torch.empty(n) for _ in range(limit // 4 + 20)]
        mapped = sum(is_mapped(x) for x in held)
        if mapped == 0 or mapped >= limit // 4:
            raise AssertionError(f"{mapped} of {len(held)} tensors mapped under a limit of {limit} descriptors")
        # What the blocks leave of the table is the program's: every descriptor up to the limit opens.
        files = [open(os.devnull) for _ in range(limit - open_now - limit // 4 - 4)]
        for f in files:
            f.close()
        del held
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def case_teardown(rank, size):
    """A group freed by Python (the GIL held) while its worker still runs operations on tensors
    only those operations hold: freeing such a tensor takes the GIL. The worker once freed a
    finished batch holding the lock the destructor waits for, and both waited forever. The
    destructor runs what is queued before it returns."""
    for round_ in range(30):
        group = dist.new_group(backend="loom")
        for k in range(32):
            dist.all_reduce(values(rank, N, offset=k).float(), group=group, async_op=True)
        last = values(rank, N, offset=round_).float()
        dist.all_reduce(last, group=group, async_op=True)
        dist.destroy_process_group(group)
        del group
        expect_equal(last, reduced(size, N, dist.ReduceOp.SUM, offset=round_), f"round {round_}: queued all_reduce")


CASES = {
    "allreduce": case_allreduce,
    "order": case_order,
    "caller_runs": case_caller_runs,
    "compiled": case_compiled,
    "broadcast_reduce": case_broadcast_reduce,
    "gathers": case_gathers,
    "objects": case_objects,
    "reduce_scatter": case_reduce_scatter,
    "alltoall": case_alltoall,
    "p2p": case_p2p,
    "coalesced": case_coalesced,
    "premul_sum": case_premul_sum,
    "float8": case_float8,
    "cuda": case_cuda,
    "refusals": case_refusals,
    "mapped_tensors": case_mapped_tensors,
    "teardown": case_teardown,
}


def run_cases(rank, size, port, names, results):
    init(rank, size, port)
    try:
        for name in names:
            try:
                CASES[name](rank, size)
                results.put((name, rank, None))
            except Skip as e:
                results.put((name, rank, ("skip", str(e))))  # a tuple: Skip would not unpickle in the parent
            except Exception:  # noqa: BLE001 (reported, then the case counts as failed)
                results.put((name, rank, traceback.format_exc()))
                raise
    finally:
        dist.destroy_process_group()


# ---- DDP: loom against gloo ---------------------------------------------------------------

class Phases:
    """When a rank reached each phase of run_ddp, for the failure report: which rank was late, and
    where. (In CI, once, a rank's loom teardown hung, and the others' gloo init timed out
    waiting for it: case_teardown's deadlock.)"""

    def __init__(self):
        self.start = time.monotonic()
        self.marks = []

    def mark(self, what):
        self.marks.append(f"{time.monotonic() - self.start:.2f} s {what}")

    def __str__(self):
        return "; ".join(self.marks)


class WithUnusedLayer(torch.nn.Module):
    """The test model, and a layer that only even steps use: DDP with find_unused_parameters
    then allreduces which parameters each rank used, besides the gradients."""

    def __init__(self):
        super().__init__()
        self.body = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
        self.extra = torch.nn.Linear(10, 10)

    def forward(self, x, step):
        y = self.body(x)
        return self.extra(y) if step % 2 == 0 else y


def train(rank, size, port, backend, variant, phases, device="cpu", steps=20):
    # Gloo's reference run on loopback: without it, gloo resolves the host name to pick an
    # interface, which depends on the machine's resolver, not on anything under test here.
    if backend == "gloo":
        os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    phases.mark(f"{backend}: init")
    init(rank, size, port, backend)
    phases.mark(f"{backend}: training")
    torch.manual_seed(1234)
    if variant == "unused":
        model = WithUnusedLayer().to(device)
    else:
        model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10)).to(device)
    if variant == "fsdp":
        from torch.distributed.fsdp import FullyShardedDataParallel
        # Each rank keeps a shard of every parameter: all_gather_into_tensor before each layer
        # runs, reduce_scatter_tensor of its gradients.
        ddp = FullyShardedDataParallel(model, device_id=torch.device(device), use_orig_params=True)
    else:
        # "unused": also gradients kept as views into DDP's buckets.
        ddp = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=1,
                                                        find_unused_parameters=variant == "unused",
                                                        gradient_as_bucket_view=variant == "unused")
    if variant == "fp16_hook":
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
        ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    gen = torch.Generator().manual_seed(99 + rank)
    # "uneven": ranks run different numbers of steps; DDP's join() shadows the collectives of
    # those that ran out, so the others still finish theirs.
    if variant == "uneven":
        steps += 3 * rank
    with ddp.join() if variant == "uneven" else contextlib.nullcontext():
        for step in range(steps):
            x = torch.randn(32, 64, generator=gen)
            y = torch.randint(0, 10, (32,), generator=gen)
            opt.zero_grad()
            out = ddp(x.to(device), step) if variant == "unused" else ddp(x.to(device))
            torch.nn.functional.cross_entropy(out, y.to(device)).backward()
            opt.step()
    if variant == "fsdp":
        with type(ddp).summon_full_params(ddp):
            params = torch.cat([p.detach().flatten() for p in ddp.parameters()]).cpu()
    else:
        params = torch.cat([p.detach().flatten() for p in model.parameters()]).cpu()
    phases.mark(f"{backend}: trained")
    dist.destroy_process_group()
    # torch 1.13's ProcessGroupGloo destructor joins its worker with the GIL held, while the
    # worker may still need the GIL to drop the fp16 hook's Python callback: it hangs now and
    # then (seen in gdb). The gloo run's objects are kept until the process exits without
    # destructors (run_ddp); loom's process group goes here, with the DDP holding it.
    if backend == "gloo":
        return params, ddp
    del ddp, opt
    gc.collect()
    phases.mark(f"{backend}: torn down")
    return params, None


def ddp_name(variant, device):
    base = "fsdp" if variant == "fsdp" else "ddp" + (f"_{variant}" if variant else "")
    return base + ("_cuda" if device == "cuda" else "")


def run_ddp(rank, size, ports, variant, device, results):
    """variant: "" (DDP as it comes), "fp16_hook" (fp16 compression), "unused" (a layer used on
    even steps only, find_unused_parameters, gradients as bucket views), "uneven" (rank r runs 3r
    more steps, under DDP's join()), "mapped" (the test
    model's buckets, 76 KiB, in loomMemAlloc memory and reduced by the mapped allreduce) or
    "fsdp" (FullyShardedDataParallel instead of DDP)."""
    name = ddp_name(variant, device)
    hook = variant == "fp16_hook"
    phases = Phases()
    try:
        if variant == "fsdp":
            try:
                from torch.distributed.fsdp import FullyShardedDataParallel  # noqa: F401
            except Exception as e:  # noqa: BLE001 (torch 1.13 under Python 3.11: a ValueError)
                results.put((name, rank, ("skip", f"FSDP cannot be imported on torch {torch.__version__}: {e}")))
                return
        if variant == "mapped":
            os.environ["LOOM_MAPPED_MIN_BYTES"] = "4096"  # the allocator follows it
        if device == "cuda":
            try:
                device = cuda_device(rank)
            except Skip as e:
                results.put((name, rank, ("skip", str(e))))
                return
            torch.backends.cuda.matmul.allow_tf32 = False
            torch.backends.cudnn.allow_tf32 = False
        on_loom, _ = train(rank, size, ports[0], "loom", variant, phases, device)
        on_gloo, gloo_objects = train(rank, size, ports[1], "gloo", variant, phases)
        # 2 ranks add in one order whatever the algorithm: the same bits. More ranks add in the
        # algorithm's order (Loom's and Gloo's differ), so the parameters drift apart by rounding:
        # ||loom - gloo|| / ||gloo|| after the steps, within 1e-6 in float32, 1e-3 through fp16.
        # On a GPU the model's own arithmetic differs from the CPU's too: within 1e-4.
        rel = ((on_loom - on_gloo).norm() / on_gloo.norm()).item()
        if device != "cpu":
            if rel > (1e-3 if hook else 1e-4):
                raise AssertionError(f"parameters on cuda differ from gloo's on the cpu by {rel:g} relative")
        elif size <= 2:
            if not torch.equal(on_loom, on_gloo):
                raise AssertionError(f"parameters differ from gloo's by {rel:g} relative")
        elif rel > (1e-3 if hook else 1e-6):
            raise AssertionError(f"parameters differ from gloo's by {rel:g} relative")
        if rank == 0:
            print(f"{name} on {size} ranks: ||loom - gloo|| / ||gloo|| = {rel:.3g}", flush=True)
        results.put((name, rank, None))
    except Exception:  # noqa: BLE001
        results.put((name, rank, f"{traceback.format_exc()}phases: {phases}"))
        raise
    sys.stdout.flush()
    os._exit(0)  # without destructors: see train()


# ---- where the allocator places tensors ---------------------------------------------------------

# Each in processes of its own (the allocator is the process's): the environment every rank
# sets before its first group, and the smallest tensor then mapped (None: none is).
MAPPED_PLACEMENTS = {
    # Ranks on two hosts: the group's allreduces cannot run mapped, whatever the setting says.
    "placement_across_hosts": (lambda rank: {"LOOM_HOSTID": f"host{rank % 2}", "LOOM_TORCH_MAPPED_MIN_BYTES": "4096"},
                               None),
    # Unset, the size follows the group's own (LOOM_MAPPED_MIN_BYTES here).
    "placement_follows_loom": (lambda rank: {"LOOM_MAPPED_MIN_BYTES": "65536"}, 65536),
    # The group never runs mapped: nothing is placed for it.
    "placement_never_mapped": (lambda rank: {"LOOM_MAPPED_MIN_BYTES": "0", "LOOM_TORCH_MAPPED_MIN_BYTES": "4096"},
                               None),
}


def run_placement(rank, size, port, name, results):
    environment, smallest = MAPPED_PLACEMENTS[name]
    try:
        os.environ.update(environment(rank))
        init(rank, size, port)
        for nbytes in (4096, 65536 - 4096, 65536, 1 << 20, 4 << 20):
            t = values(rank, nbytes // 4).float()
            want = smallest is not None and nbytes >= smallest
            if loom_torch._C.is_mapped(t) != want:
                raise AssertionError(f"a tensor of {nbytes} bytes mapped: {not want}, wanted {want}")
            dist.all_reduce(t)
            expect_equal(t, reduced(size, nbytes // 4, dist.ReduceOp.SUM), f"all_reduce of {nbytes} bytes")
        if name == "placement_across_hosts" and size >= 3:
            # A group of one host's ranks, made after the world group: its members place tensors
            # from then on (from the setting's 4 KiB), the other host's ranks still do not.
            members = list(range(0, size, 2))
            group = dist.new_group(members, backend="loom")
            t = values(rank, 1024).float()
            if loom_torch._C.is_mapped(t) != (rank in members):
                raise AssertionError(f"4 KiB mapped: {rank not in members}, after a one-host group of {members}")
            if rank in members:
                dist.all_reduce(t, group=group)
                expect_equal(t, sum(values(r, 1024) for r in members), "all_reduce in the one-host group")
            # The store lives in rank 0's process, and torch 1.13's new_group ends with a barrier
            # in it that each rank polls every 10 ms: rank 0 must not leave while another still
            # polls (CI once saw "Broken pipe" there, rank 0 having finished its group call first).
            dist.barrier()
        dist.destroy_process_group()
        results.put((name, rank, None))
    except Exception:  # noqa: BLE001
        results.put((name, rank, traceback.format_exc()))
        raise


# ---- a rank killed mid-training -----------------------------------------------------------------

def run_killed(rank, size, port, results):
    init(rank, size, port, timeout_s=10)
    t = torch.ones(1 << 16)
    for step in range(1000):
        if rank == size - 1 and step == 20:
            os._exit(0)  # dies without a word, as a killed process does
        start = time.monotonic()
        try:
            dist.all_reduce(t)
        except RuntimeError as e:
            waited = time.monotonic() - start
            ok = waited < 10.5 and "loom" in str(e)
            results.put(("killed_rank", rank,
                         None if ok else f"raised after {waited:.1f} s: {e}"))
            print(f"rank {rank}: raised after {waited:.2f} s: {str(e).splitlines()[0]}", flush=True)
            os._exit(0)  # the group cannot be torn down cleanly with a peer gone
    results.put(("killed_rank", rank, "the survivors never raised"))


# Failures a rank does not cause by dying (that is run_killed): each must reach every rank that
# waits as a RuntimeError carrying Loom's own message, within the group's timeout. Each kind in
# processes of its own, its group left broken.
FAILURES = {
    # LOOM_CHECK=1: the ranks compare each call first; rank 0's count differs from the others'.
    "mismatch_checked": ({"LOOM_CHECK": "1"}, "mismatched calls"),
    # Rank 0 never calls: the others' no-progress timeout (2 s) ends their call.
    "timeout": ({}, "timed out after"),
}


def run_failure(rank, size, port, kind, results):
    env, expected = FAILURES[kind]
    os.environ.update(env)
    init(rank, size, port, timeout_s=2)
    if kind == "timeout" and rank == 0:
        time.sleep(6)  # past the others' deadline, then gone without calling
        results.put((kind, rank, None))
        os._exit(0)
    t = torch.ones(10 if kind == "mismatch_checked" and rank == 0 else 20)
    start = time.monotonic()
    try:
        dist.all_reduce(t)
        results.put((kind, rank, f"all_reduce returned {t[:3].tolist()}... instead of raising"))
    except RuntimeError as e:
        waited = time.monotonic() - start
        ok = waited < 4 and expected in str(e)
        results.put((kind, rank, None if ok else f"raised after {waited:.1f} s without '{expected}': {e}"))
        print(f"{kind}: rank {rank}: raised after {waited:.2f} s: {str(e).splitlines()[0][:200]}", flush=True)
    os._exit(0)  # the group cannot be torn down cleanly once it failed


def spawn(fn, size, args):
    ctx = mp.get_context("spawn")
    results = ctx.SimpleQueue()
    procs = [ctx.Process(target=fn, args=(rank, size, *args, results)) for rank in range(size)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(150)
        if p.is_alive():
            # A rank that hangs says where before it goes: its Python threads (faulthandler,
            # armed in init) and, where gdb exists, its native ones.
            os.kill(p.pid, signal.SIGUSR1)
            time.sleep(1)
            if shutil.which("gdb"):
                stacks = subprocess.run(["gdb", "-p", str(p.pid), "-batch", "-ex", "thread apply all bt 30"],
                                        capture_output=True, text=True, timeout=60)
                print(f"rank process {p.pid} hung; its native stacks:\n{stacks.stdout[-20000:]}", flush=True)
            p.kill()
    out = []
    while not results.empty():
        out.append(results.get())
    return out, [p.exitcode for p in procs]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ranks", default="1,2,3,4")
    parser.add_argument("--only", default="")
    args = parser.parse_args()
    sizes = [int(s) for s in args.ranks.split(",")]
    only = set(filter(None, args.only.split(",")))
    passed = failed = skipped = 0

    def tally(label, reports, expected_ranks, codes):
        nonlocal passed, failed, skipped
        skips = {e[1] for (_, _, e) in reports if isinstance(e, tuple)}
        if skips and len(skips) == 1 and {r for (_, r, _) in reports} == set(expected_ranks):
            print(f"{label}: skipped: {skips.pop()}", flush=True)
            skipped += 1
            return
        errors = [f"rank {r}: {e}" for (_, r, e) in reports if e]
        ranks = {r for (_, r, _) in reports}
        if not errors and ranks != set(expected_ranks):
            errors.append(f"ranks {sorted(set(expected_ranks) - ranks)} reported nothing (exit codes {codes})")
        print(f"{label}: {'ok' if not errors else 'FAILED'}", flush=True)
        for e in errors:
            print("  " + e.replace("\n", "\n  "))
        passed += not errors
        failed += bool(errors)

    for size in sizes:
        names = [n for n in CASES if not only or n in only]
        if names:
            reports, codes = spawn(run_cases, size, (free_port(), names))
            for name in names:
                tally(f"{name} on {size} rank(s)", [x for x in reports if x[0] == name], range(size), codes)
        for device in ("cpu", "cuda"):
            for variant in ("", "fp16_hook", "unused", "uneven", "fsdp") + (("mapped",) if device == "cpu" else ()):
                name = ddp_name(variant, device)
                if size > 1 and (not only or name in only):
                    reports, codes = spawn(run_ddp, size, ((free_port(), free_port()), variant, device))
                    tally(f"{name} against gloo on {size} ranks", reports, range(size), codes)
        for name in MAPPED_PLACEMENTS:
            if size > 1 and (not only or name in only):
                reports, codes = spawn(run_placement, size, (free_port(), name))
                tally(f"{name} on {size} ranks", reports, range(size), codes)
        for kind in FAILURES:
            if size > 1 and (not only or kind in only):
                reports, codes = spawn(run_failure, size, (free_port(), kind))
                tally(f"{kind} on {size} ranks", reports, range(size), codes)
        if size > 1 and (not only or "killed_rank" in only):
            reports, codes = spawn(run_killed, size, (free_port(),))
            tally(f"killed_rank on {size} ranks", reports, range(size - 1), codes)
    print(f"{passed} passed, {failed} failed, {skipped} skipped")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
