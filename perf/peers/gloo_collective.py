#!/usr/bin/python3
"""Gloo's allreduce and broadcast (torch.distributed, backend "gloo") in nccl-tests' loop and
table, the same as perf/peers/nccl_table.h prints, so that perf/compare.sh can put them beside
loom-perf's.

    /usr/bin/python3 perf/peers/gloo_collective.py allreduce|broadcast [-N 2] [-b 8] [-e 128M]
        [-f 2] [-n 20] [-w 1] [-c 1] [-a 1] [-r 0] [--min-time S] [--pin]

Run it with Debian's python3 (python3-torch), not a pyenv one. It starts its -N ranks itself
(one process each) and rendezvouses over a TCP store on 127.0.0.1; Gloo moves data over TCP
only. --pin puts rank r on the r-th allowed cpu.

float32; allreduce sums. torch's all_reduce and broadcast work in place only, so the
out-of-place fields read `-`. Each size: -w warm-up calls, -n timed calls (more while the
slowest rank's loop is shorter than --min-time, at most 2^24), the ranks' times per call
combined as -a says (0 rank 0's, 1 mean, 2 min, 3 max). The tensor holds zeros while timed;
the check (-c 1) then fills rank r's input with (i + 3r) % 61 in element i (broadcast: the
root's), every other rank's with NaN, and counts the elements of one call that differ from the
exact result. Any wrong element: exit status 1. Times in us, GB = 1e9; busbw is algbw times
2(n-1)/n for allreduce and algbw for broadcast.
"""
import argparse
import datetime
import math
import multiprocessing
import os
import socket
import sys
import time

MAX_ITERS = 1 << 24  # nccl-tests' cap on a timed loop
HEADER = (  # nccl-tests' column headers, character for character
    "#\n"
    "#                                                              out-of-place"
    "                       in-place\n"
    "#       size         count      type   redop    root"
    "     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n"
    "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)"
    "            (us)  (GB/s)  (GB/s)")
NO_MODE = "  %7s  %6s  %6s  %6s" % ("-", "-", "-", "-")


def parse_bytes(text):
    """"8", "64K", "1M", "2G" -> bytes (nccl-tests' suffixes, powers of two)."""
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:].upper(), 1)
    return int(float(text[:-1] if scale > 1 else text) * scale)


def sizes(args):
    """nccl-tests' sweep: from -b, times -f while <= -e."""
    size = args.b
    while size <= args.e:
        yield size
        size *= args.f


def fit(value, width):
    """value in width characters with the most decimals that fit, as nccl-tests does."""
    for decimals in (2, 1, 0):
        text = "%*.*f" % (width, decimals, value)
        if len(text) <= width:
            return text
    return "%*.1e" % (width, value)


def worker(rank, args, port, results):
    if args.pin:  # before torch starts any thread, so its threads inherit the mask
        cpus = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cpus[rank % len(cpus)]})
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    # A dead peer turns into an error after the timeout instead of a hang.
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=args.N, timeout=datetime.timedelta(seconds=120))
    n = args.N
    allreduce = args.collective == "allreduce"
    bus_factor = 2 * (n - 1) / n if allreduce else 1.0

    def call(t):
        if allreduce:
            dist.all_reduce(t)
        else:
            dist.broadcast(t, src=args.r)

    def combine(value, how):
        """One number agreed by all ranks: 0 rank 0's, 1 mean, 2 min, 3 max, "sum"."""
        t = torch.tensor([value], dtype=torch.float64)
        if how == 0:
            dist.broadcast(t, src=0)
            return t.item()
        op = {1: dist.ReduceOp.SUM, "sum": dist.ReduceOp.SUM, 2: dist.ReduceOp.MIN,
              3: dist.ReduceOp.MAX}[how]
        dist.all_reduce(t, op=op)
        return t.item() / n if how == 1 else t.item()

    def time_per_call(t):
        for _ in range(args.w):
            call(t)
        iters = args.n
        while True:
            dist.barrier()
            t0 = time.perf_counter()
            for _ in range(iters):
                call(t)
            elapsed = time.perf_counter() - t0
            slowest = combine(elapsed, 3)
            if args.min_time <= 0 or slowest >= args.min_time or iters >= MAX_ITERS:
                break
            iters = min(MAX_ITERS, math.ceil(iters * 1.2 * args.min_time / max(slowest, 1e-9)))
        return combine(elapsed / iters, args.a)

    def check(count):
        """Wrong elements of one checked call, summed over the ranks."""
        index = torch.arange(count, dtype=torch.int64)
        if allreduce:
            t = ((index + 3 * rank) % 61).to(torch.float32)
            want = sum((index + 3 * r) % 61 for r in range(n)).to(torch.float32)
        else:
            want = ((index + 3 * args.r) % 61).to(torch.float32)
            t = want.clone() if rank == args.r else torch.full((count,), math.nan)
        call(t)
        return combine(float((t != want).sum().item()), "sum")

    if rank == 0:
        cpus = ",".join(str(c) for c in sorted(os.sched_getaffinity(0)))
        what = " sum" if allreduce else ""
        print(f"# gloo_collective {args.collective}: torch {torch.__version__} gloo (TCP), "
              f"{n} ranks, float32{what}, in-place only (torch's calls have one tensor); "
              f"rank 0 cpus {cpus}")
        print(f"# -b {args.b} -e {args.e} -f {args.f} -n {args.n} -w {args.w} -c {args.c} "
              f"-a {args.a} --min-time {args.min_time:g}")
        print(HEADER, flush=True)
    busbw_sum, measured, wrong_sum = 0.0, 0, 0.0
    for size in sizes(args):
        count = size // 4
        used = count * 4
        t = torch.zeros(count, dtype=torch.float32)
        seconds = time_per_call(t)
        del t
        wrong = check(count) if args.c else None
        wrong_sum += wrong or 0
        if rank == 0:
            algbw = used / seconds / 1e9
            busbw = algbw * bus_factor
            busbw_sum, measured = busbw_sum + busbw, measured + 1
            row = "%12li  %12li  %8s  %6s  %6i" % (
                used, count, "float", "sum" if allreduce else "none", -1 if allreduce else args.r)
            row += NO_MODE
            row += "  %7s  %6s  %6s  %6s" % (fit(seconds * 1e6, 7), fit(algbw, 6), fit(busbw, 6),
                                             "N/A" if wrong is None else "%g" % wrong)
            print(row, flush=True)
    if rank == 0:
        print("# Out of bounds values : %d %s" % (wrong_sum, "FAILED" if wrong_sum else "OK"))
        print("# Avg bus bandwidth    : %g" % (busbw_sum / max(measured, 1)))
        print("#", flush=True)
    dist.destroy_process_group()
    results[rank] = 1 if wrong_sum else 0  # the check's counts are every rank's


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("collective", choices=["allreduce", "broadcast"])
    parser.add_argument("-N", type=int, default=2, help="ranks (default 2)")
    parser.add_argument("-b", type=parse_bytes, default=8, help="smallest size in bytes (8)")
    parser.add_argument("-e", type=parse_bytes, default=128 << 20, help="largest size (128M)")
    parser.add_argument("-f", type=int, default=2, help="size factor between rows (2)")
    parser.add_argument("-n", type=int, default=20, help="timed calls, at least (20)")
    parser.add_argument("-w", type=int, default=1, help="warm-up calls per size (1)")
    parser.add_argument("-c", type=int, default=1, help="check one call per size (1; 0: no)")
    parser.add_argument("-a", type=int, default=1, choices=[0, 1, 2, 3],
                        help="ranks' times: 0 rank 0's, 1 mean, 2 min, 3 max (1)")
    parser.add_argument("-r", type=int, default=0, help="broadcast's root (0)")
    parser.add_argument("--min-time", type=float, default=0.0,
                        help="lengthen each timed loop to this many seconds on the slowest rank")
    parser.add_argument("--pin", action="store_true", help="pin rank r to the r-th allowed cpu")
    args = parser.parse_args()
    if args.f < 2 or args.b < 4 or args.e < args.b or args.N < 1 or args.n < 1 or args.w < 0 \
            or not 0 <= args.r < args.N:
        parser.error("need -f >= 2, 4 <= -b <= -e, -N >= 1, -n >= 1, -w >= 0, 0 <= -r < -N")

    with socket.socket() as s:  # a port that was free a moment ago
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = multiprocessing.get_context("spawn")
    results = ctx.Array("i", [1] * args.N)
    procs = [ctx.Process(target=worker, args=(r, args, port, results)) for r in range(args.N)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    bad = [r for r, p in enumerate(procs) if p.exitcode != 0 or results[r] != 0]
    if bad:
        print(f"gloo_collective: ranks {bad} failed", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
