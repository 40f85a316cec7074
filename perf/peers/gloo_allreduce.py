#!/usr/bin/python3
"""Gloo's allreduce (torch.distributed, backend "gloo") under the same loop and output as
loom-host-allreduce, so that perf/compare_host.sh can put the two side by side.

    /usr/bin/python3 perf/peers/gloo_allreduce.py -n 2 -b 8 -e 128M -f 2 [--pin]

Run it with Debian's python3 (python3-torch), not a pyenv one. It starts the ranks itself
(one process each) and rendezvouses over a TCP store on 127.0.0.1.

float32 sum. torch.distributed's all_reduce works in place, so Gloo is measured in place
(no copy is added to its time): for each size, one call on the test pattern is checked bit
for bit (rank r holds (i + 3r) % 61 in element i, so the float sums are exact), then the
tensor is zeroed (so that repeated in-place sums stay finite) and timed: a calibration that
doubles the calls until a batch lasts 20 ms (also the warm-up), then 5 timed batches of the
same number of calls, about -T seconds in all (at least one call each). A batch's time is
its mean per call on the slowest rank; time_us is the median batch, fastest_us and
slowest_us the extremes. busbw = algbw * 2(n-1)/n (nccl-tests' allreduce factor); GB = 1e9.
A wrong result exits 1.
"""
import argparse
import datetime
import math
import multiprocessing
import os
import socket
import sys
import time


BATCHES = 5


def parse_bytes(text):
    """"8", "64K", "1M", "2G" -> bytes (nccl-tests' suffixes, powers of two)."""
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:].upper(), 1)
    return int(float(text[:-1] if scale > 1 else text) * scale)


def sizes(args):
    size = args.b
    while True:
        yield size
        if size >= args.e:
            return
        size = min(args.e, max(size + 1, int(size * args.f)))


def worker(rank, args, port, results):
    if args.pin:  # before torch starts any thread, so its threads inherit the mask
        cpus = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cpus[rank % len(cpus)]})
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    # A dead peer turns into an error after the timeout instead of a hang.
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=args.n, timeout=datetime.timedelta(seconds=120))
    n = args.n

    def max_over_ranks(value):
        t = torch.tensor([value], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return t.item()

    if rank == 0:
        cpus = ",".join(str(c) for c in sorted(os.sched_getaffinity(0)))
        print(f"# gloo_allreduce: torch {torch.__version__} gloo, {n} ranks, float32 sum, "
              f"in-place; rank 0 cpus {cpus}")
        print("# time = median of 5 batches of the mean per call on the slowest rank; "
              "busbw = algbw * 2(n-1)/n; GB = 1e9")
        print("#%14s %12s %9s %12s %9s %9s %12s %12s" % (
            "bytes", "count", "iters", "time_us", "algbw", "busbw", "fastest_us", "slowest_us"),
            flush=True)
    failed = False
    for size in sizes(args):
        count = size // 4
        used = count * 4
        index = torch.arange(count, dtype=torch.int64)
        t = ((index + 3 * rank) % 61).to(torch.float32)
        want = sum(((index + 3 * r) % 61) for r in range(n)).to(torch.float32)
        dist.all_reduce(t)
        if not torch.equal(t, want):
            bad = int((t != want).nonzero()[0])
            print(f"gloo_allreduce: rank {rank}, {used} bytes: element {bad} is {t[bad].item()}, "
                  f"want {want[bad].item()}", file=sys.stderr, flush=True)
            failed = True
        del index, want
        t.zero_()

        calls = 1
        while True:
            dist.barrier()
            t0 = time.perf_counter()
            for _ in range(calls):
                dist.all_reduce(t)
            batch = max_over_ranks(time.perf_counter() - t0)
            if batch >= 0.02 or calls >= (1 << 24):
                break
            calls *= 2
        per_batch = max(1, math.ceil(args.T / BATCHES * calls / batch))
        per_call = []
        for _ in range(BATCHES):
            dist.barrier()
            t0 = time.perf_counter()
            for _ in range(per_batch):
                dist.all_reduce(t)
            per_call.append(max_over_ranks((time.perf_counter() - t0) / per_batch))
        per_call.sort()
        seconds = per_call[BATCHES // 2]
        if t.count_nonzero().item() != 0:
            print(f"gloo_allreduce: rank {rank}, {used} bytes: zeros did not stay zeros",
                  file=sys.stderr, flush=True)
            failed = True
        algbw = used / seconds / 1e9
        busbw = algbw * 2 * (n - 1) / n
        if rank == 0:
            print("%15d %12d %9d %12.2f %9.3f %9.3f %12.2f %12.2f" % (
                used, count, per_batch * BATCHES, seconds * 1e6, algbw, busbw, per_call[0] * 1e6,
                per_call[-1] * 1e6), flush=True)
        dist.barrier()
    any_failed = max_over_ranks(1.0 if failed else 0.0) > 0
    dist.destroy_process_group()
    results[rank] = 1 if any_failed else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-n", type=int, default=2, help="ranks (default 2)")
    parser.add_argument("-b", type=parse_bytes, default=8, help="smallest size in bytes")
    parser.add_argument("-e", type=parse_bytes, default=128 << 20, help="largest size in bytes")
    parser.add_argument("-f", type=float, default=2.0, help="size factor between rows")
    parser.add_argument("-T", type=float, default=0.2, help="seconds per timed batch")
    parser.add_argument("--pin", action="store_true", help="pin rank r to the r-th allowed cpu")
    args = parser.parse_args()
    if args.f <= 1 or args.b < 4 or args.e < args.b or args.n < 1:
        parser.error("need -f > 1, 4 <= -b <= -e, -n >= 1")

    with socket.socket() as s:  # a port that was free a moment ago
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Array("i", [1] * args.n)
    procs = [ctx.Process(target=worker, args=(r, args, port, results)) for r in range(args.n)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    bad = [r for r, p in enumerate(procs) if p.exitcode != 0 or results[r] != 0]
    if bad:
        print(f"gloo_allreduce: ranks {bad} failed", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
