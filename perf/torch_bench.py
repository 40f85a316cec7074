#!/usr/bin/env python3
"""torch.distributed on "loom" beside "gloo" and beside Loom's own C API, in one run.

    PYTHONPATH=build/python /usr/bin/python3 perf/torch_bench.py [--ranks 2] [--out FILE]

1. all_reduce busbw (float32, in place) from 8 B to 128 MiB through the backend "loom" and
   through "gloo", and Loom's C API on the same sizes (build/perf/loom-perf under loomrun);
   busbw = 2 (n-1)/n x bytes / time, as nccl-tests and loom-perf count it.
2. DDP training step time on a model with 48 MiB of gradients (allreduce-bound), on 1 rank
   and on `--ranks` ranks with each backend; the step's communication time is the n-rank step
   minus the 1-rank step (the issue's target: loom's at most a third of gloo's).

Prints Markdown tables (and writes them to --out). CPU and rank count belong beside every
figure: the script prints the CPU model.
"""
import argparse
import datetime
import os
import re
import socket
import subprocess
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import loom_torch  # noqa: F401

from machine import cpu_model

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SIZES = [8 << (2 * k) for k in range(13)]  # 8 B, 32 B, ... 128 MiB (loom-perf -f 4)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def allreduce_times(rank, size, port, backend, out):
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=size,
                            timeout=datetime.timedelta(seconds=120))
    for nbytes in SIZES:
        t = torch.ones(max(1, nbytes // 4))
        iters = max(5, min(1000, (64 << 20) // max(nbytes, 1)))
        for _ in range(3):
            dist.all_reduce(t)
        dist.barrier()
        start = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(t)
        elapsed = (time.perf_counter() - start) / iters
        if rank == 0:
            out.put((backend, nbytes, elapsed))
    dist.destroy_process_group()


def ddp_step_time(rank, size, port, backend, out, steps=12):
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=size,
                            timeout=datetime.timedelta(seconds=300))
    torch.manual_seed(0)
    # 3 x (2048 x 2048) weights: 12.6 M parameters, 48 MiB of float32 gradients.
    model = torch.nn.Sequential(*[torch.nn.Linear(2048, 2048) for _ in range(3)])
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=1e-3)
    x = torch.randn(16, 2048)
    times = []
    for step in range(steps):
        start = time.perf_counter()
        opt.zero_grad()
        ddp(x).square().mean().backward()
        opt.step()
        times.append(time.perf_counter() - start)
    if rank == 0:
        times.sort()
        out.put((backend, size, times[len(times) // 2]))
    dist.destroy_process_group()


def spawn(fn, size, port, backend):
    ctx = mp.get_context("spawn")
    q = ctx.SimpleQueue()
    procs = [ctx.Process(target=fn, args=(r, size, port, backend, q)) for r in range(size)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    results = []
    while not q.empty():
        results.append(q.get())
    return results


def loom_c_api(ranks):
    """loom-perf's busbw column (float32 allreduce, in place) for the same sizes."""
    cmd = [os.path.join(ROOT, "build/tools/loomrun/loomrun"), "-n", str(ranks),
           os.path.join(ROOT, "build/perf/loom-perf"), "allreduce", "-b", "8", "-e", "128M", "-f", "4", "-c", "0"]
    text = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    busbw = {}
    factor = 2 * (ranks - 1) / ranks
    for line in text.splitlines():
        cols = line.split()
        if len(cols) == 13 and cols[0].isdigit():
            # nccl-tests columns: size count type redop root | out-of-place time algbw busbw #wrong
            # | in-place time algbw busbw #wrong; the in-place time (us), for more digits than busbw's
            busbw[int(cols[0])] = factor * int(cols[0]) / (float(cols[9]) * 1e-6) / 1e9
    return busbw


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    n = args.ranks
    lines = [f"CPU: {cpu_model()}, {os.cpu_count()} cores; {n} ranks as processes; torch {torch.__version__}", ""]

    results = {}
    for backend in ("loom", "gloo"):
        for (b, nbytes, t) in spawn(allreduce_times, n, free_port(), backend):
            results[(b, nbytes)] = t
    capi = loom_c_api(n)
    factor = 2 * (n - 1) / n
    lines += ["| bytes | loom backend busbw GB/s | Loom C API busbw GB/s | backend / C API | gloo busbw GB/s | loom / gloo |",
              "|---:|---:|---:|---:|---:|---:|"]
    for nbytes in SIZES:
        lb = factor * nbytes / results[("loom", nbytes)] / 1e9
        gb = factor * nbytes / results[("gloo", nbytes)] / 1e9
        c = capi.get(nbytes, float("nan"))
        lines.append(f"| {nbytes} | {lb:.3f} | {c:.3f} | "
                     f"{lb / c:.2f} | {gb:.3f} | {lb / gb:.2f} |")

    steps = {}
    for backend in ("loom", "gloo"):
        for size in (1, n):
            for (b, s, t) in spawn(ddp_step_time, size, free_port(), backend):
                steps[(b, s)] = t
    lines += ["", "| DDP step (48 MiB of gradients) | 1 rank s | %d ranks s | communication s |" % n, "|---|---:|---:|---:|"]
    comm = {}
    for backend in ("loom", "gloo"):
        comm[backend] = steps[(backend, n)] - steps[(backend, 1)]
        lines.append(f"| {backend} | {steps[(backend, 1)]:.3f} | {steps[(backend, n)]:.3f} | {comm[backend]:.3f} |")
    lines.append("")
    lines.append(f"communication time loom / gloo: {comm['loom'] / comm['gloo']:.2f} (target <= 0.33)")
    text = "\n".join(lines)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
