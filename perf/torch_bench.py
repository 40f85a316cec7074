#!/usr/bin/env python3
"""torch.distributed on "loom" beside "gloo" and beside Loom's own C API, in one run.

    PYTHONPATH=build/python /usr/bin/python3 perf/torch_bench.py [--ranks 2] [--rounds 3] [--batch 1]
                                                                 [--bucket-mb 25] [--only allreduce|ddp] [--out FILE]

1. all_reduce busbw (float32, in place) from 8 B to 128 MiB through the backend "loom" and
   through "gloo", and Loom's C API on the same sizes, called (ctypes) in the processes that run
   the backend, on the same tensor, timed in turn with the backend three times a size; busbw =
   2 (n-1)/n x bytes / time, as nccl-tests and loom-perf count it; the best of the rounds.
2. DDP training step time on a model with 48 MiB of gradients, on 1 rank
   and on `--ranks` ranks with each backend, every rank computing with the cores the n-rank
   run leaves it. The step's communication time is the n-rank step minus the 1-rank step (the
   issue's target: loom's at most a third of gloo's). Each run alternates steps with and
   without gradient synchronisation (DDP's no_sync) and takes their medians' difference, so
   what differs between runs cancels; the n-rank difference minus the 1-rank one (DDP's own
   bucket copies) is the communication. Median over the rounds, with their range. The batch
   (`--batch`, 1 by default) keeps the step allreduce-bound, as the issue asks: with 16 rows
   a step computed for 0.4-0.6 s on a 2-core VM (Debian's torch has a generic BLAS), and
   its run-to-run spread was larger than the whole communication. Beside "loom" and "gloo",
   "loom heap" is the backend with LOOM_TORCH_MAPPED_MIN_BYTES=0: DDP's buckets in torch's heap
   memory, reduced through the FIFO, where "loom" maps them (docs/COMPAT_TORCH.md).
   `--bucket-mb` sets DDP's bucket_cap_mb.

Prints Markdown tables (and writes them to --out). CPU and rank count belong beside every
figure: the script prints the CPU model.
"""
import argparse
import ctypes
import datetime
import os
import socket
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import loom_torch  # noqa: F401

from machine import cpu_model

SIZES = [8 << (2 * k) for k in range(13)]  # 8 B, 32 B, ... 128 MiB (loom-perf -f 4)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LoomCApi:
    """Loom's C API on a communicator of its own, called through ctypes in the process that runs
    the backend, on the same tensor: what the backend adds to Loom shows free of what differs
    between processes, buffers and runs (a 2-core VM's phases moved whole runs by 2x)."""

    class UniqueId(ctypes.Structure):
        _fields_ = [("internal", ctypes.c_char * 128)]  # LOOM_UNIQUE_ID_BYTES

    def __init__(self, rank, size):
        self.lib = ctypes.CDLL("libloom.so.0")  # already loaded by loom_torch: the same library
        self.lib.loomGetLastError.restype = ctypes.c_char_p
        self.lib.loomAllReduce.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                                           ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
        uid = self.UniqueId()
        if rank == 0:
            self.check(self.lib.loomGetUniqueId(ctypes.byref(uid)), None)
        wire = torch.tensor(list(bytes(uid)), dtype=torch.uint8)
        dist.broadcast(wire, 0)
        uid = self.UniqueId.from_buffer_copy(bytes(wire.tolist()))
        self.comm = ctypes.c_void_p()
        self.check(self.lib.loomCommInitRank(ctypes.byref(self.comm), size, uid, rank), None)

    def check(self, result, comm):
        if result != 0:
            sys.exit(f"torch_bench.py: Loom's C API: {self.lib.loomGetLastError(comm).decode()}")

    def all_reduce(self, t):  # float32 sum in place, completed on return (stream NULL)
        self.check(self.lib.loomAllReduce(t.data_ptr(), t.data_ptr(), t.numel(), 7, 0, self.comm, None), self.comm)

    def destroy(self):
        self.lib.loomCommDestroy(self.comm)


def allreduce_times(rank, size, port, backend, out, alternations=3):
    """Seconds a call for every size through `backend`; on "loom", Loom's C API too, in the same
    processes on the same tensor, the two timed in turn `alternations` times (best of each)."""
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=size,
                            timeout=datetime.timedelta(seconds=120))
    ways = {backend: dist.all_reduce}
    if backend == "loom":
        c_api = LoomCApi(rank, size)
        ways["C API"] = c_api.all_reduce
    for nbytes in SIZES:
        t = torch.ones(max(1, nbytes // 4))
        iters = max(5, min(1000, (64 << 20) // max(nbytes, 1)))
        best = {}
        for _ in range(alternations):
            for name, call in ways.items():
                for _ in range(3):
                    call(t)
                dist.barrier()
                start = time.perf_counter()
                for _ in range(iters):
                    call(t)
                best[name] = min(best.get(name, float("inf")), (time.perf_counter() - start) / iters)
        if rank == 0:
            for name, seconds in best.items():
                out.put((name, nbytes, seconds))
    if backend == "loom":
        c_api.destroy()
    dist.destroy_process_group()


def ddp_step_time(rank, size, port, label, out, threads, batch, bucket_mb, pairs=15):
    """Median step time with gradient synchronisation and without (DDP's no_sync), the two
    interleaved in one process: their difference is the step's communication time, free of
    what differs between separate runs (placement, the VM's phases), which on a 2-core VM
    moves a 1-rank step by more than the whole communication."""
    # Every run computes with the same threads per rank (the cores an n-rank run leaves each
    # rank), so that the n-rank step minus the 1-rank step is communication, not cores shared.
    torch.set_num_threads(threads)
    # "loom heap": the backend with torch's own allocator, so DDP's buckets are heap memory and
    # go through the FIFO instead of the mapped allreduce (docs/COMPAT_TORCH.md).
    backend = label
    if label == "loom heap":
        backend = "loom"
        os.environ["LOOM_TORCH_MAPPED_MIN_BYTES"] = "0"
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=size,
                            timeout=datetime.timedelta(seconds=300))
    torch.manual_seed(0)
    # 3 x (2048 x 2048) weights: 12.6 M parameters, 48 MiB of float32 gradients.
    model = torch.nn.Sequential(*[torch.nn.Linear(2048, 2048) for _ in range(3)])
    ddp = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=bucket_mb)
    opt = torch.optim.SGD(ddp.parameters(), lr=1e-3)
    x = torch.randn(batch, 2048)

    def step():
        start = time.perf_counter()
        opt.zero_grad()
        ddp(x).square().mean().backward()
        opt.step()
        return time.perf_counter() - start

    step()  # the first call builds DDP's buckets
    synced, local = [], []
    for _ in range(pairs):
        synced.append(step())
        with ddp.no_sync():
            local.append(step())
    if rank == 0:
        out.put((label, size, statistics.median(synced), statistics.median(local)))
    dist.destroy_process_group()


def spawn(fn, size, port, backend, *extra):
    ctx = mp.get_context("spawn")
    q = ctx.SimpleQueue()
    procs = [ctx.Process(target=fn, args=(r, size, port, backend, q, *extra)) for r in range(size)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    results = []
    while not q.empty():
        results.append(q.get())
    return results


def allreduce_table(n, rounds):
    best = {}

    def keep(key, t):
        best[key] = min(t, best.get(key, t))

    for _ in range(rounds):
        for backend in ("loom", "gloo"):
            for (b, nbytes, t) in spawn(allreduce_times, n, free_port(), backend):
                keep((b, nbytes), t)
    factor = 2 * (n - 1) / n
    lines = [f"all_reduce, float32, in place: busbw GB/s, best of {rounds} rounds", "",
             "| bytes | loom backend | Loom C API | backend / C API | gloo | loom / gloo |",
             "|---:|---:|---:|---:|---:|---:|"]
    for nbytes in SIZES:
        lb, cb, gb = (factor * nbytes / best.get((b, nbytes), float("nan")) / 1e9 for b in ("loom", "C API", "gloo"))
        lines.append(f"| {nbytes} | {lb:.3f} | {cb:.3f} | {lb / cb:.2f} | {gb:.3f} | {lb / gb:.2f} |")
    return lines


def ddp_table(n, rounds, batch, bucket_mb):
    threads = max(1, (os.cpu_count() or 1) // n)
    comm = {"loom": [], "loom heap": [], "gloo": []}
    rows = []
    for r in range(rounds):
        for backend in comm:
            medians = {}  # ranks -> (synced step, no_sync step)
            for size in (1, n):
                for (_, _, sync, local) in spawn(ddp_step_time, size, free_port(), backend, threads, batch,
                                                       bucket_mb):
                    medians[size] = (sync, local)
            own = {size: sync - local for size, (sync, local) in medians.items()}
            comm[backend].append(own[n] - own[1])
            rows.append(f"| {r + 1} | {backend} | {medians[1][0]:.3f} | {medians[1][1]:.3f} | {medians[n][0]:.3f} | "
                        f"{medians[n][1]:.3f} | {comm[backend][-1]:.4f} |")
    lines = [f"DDP step, 48 MiB of float32 gradients in buckets of {bucket_mb} MiB, batch {batch}, {threads} compute "
             "thread(s) per rank: median step s", "",
             f"| round | backend | 1 rank synced | 1 rank no_sync | {n} ranks synced | {n} ranks no_sync | communication s |",
             "|---:|---|---:|---:|---:|---:|---:|"] + rows
    med = {b: statistics.median(v) for b, v in comm.items()}
    lines += ["", f"communication s, median of {rounds} rounds (range): "
              + "; ".join(f"{b} {med[b]:.4f} ({min(v):.4f} to {max(v):.4f})" for b, v in comm.items()),
              f"communication time loom / gloo: {med['loom'] / med['gloo']:.2f} (target <= 0.33); "
              f"loom heap / gloo: {med['loom heap'] / med['gloo']:.2f}"]
    return lines


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", choices=("allreduce", "ddp"))
    parser.add_argument("--batch", type=int, default=1, help="rows of the DDP model's input")
    parser.add_argument("--bucket-mb", type=float, default=25, help="DDP's bucket_cap_mb (its default: 25)")
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    n = args.ranks
    lines = [f"CPU: {cpu_model()}, {os.cpu_count()} cores; {n} ranks as processes; torch {torch.__version__}", ""]
    if args.only != "ddp":
        lines += allreduce_table(n, args.rounds) + [""]
    if args.only != "allreduce":
        lines += ddp_table(n, args.rounds, args.batch, args.bucket_mb)
    text = "\n".join(lines)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
