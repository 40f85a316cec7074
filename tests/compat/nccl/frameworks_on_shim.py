#!/usr/bin/env python3
"""Frameworks that load NCCL, run on Loom's libnccl.so.2 (issue 27, its GPU part): PyTorch's own
backend "nccl" (collectives, then DDP against the same training on gloo) and CuPy's
cupy.cuda.nccl, every rank on one GPU.

    frameworks_on_shim.py SHIM_DIR [--ranks N] [--only torch|cupy] [--real]

Each rank is a process started with LD_PRELOAD=SHIM_DIR/libnccl.so.2: a library loaded under
the soname libnccl.so.2 satisfies torch's and CuPy's own dependency on that soname, whatever
their RPATH names, and each rank checks in /proc/self/maps that the libnccl.so.2 it runs is the
shim's. --real leaves NCCL itself in place, to show what it does with several ranks on one GPU
(it refuses them); that run reports, it does not count as a failure.

Prints one line per case, then "N passed, N failed, N skipped"; exits 1 on any failure, 77
(meson's skip) when no case could run (no CUDA device, or no torch or CuPy with CUDA).
"""
import argparse
import datetime
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import traceback

STEPS = 20


def loaded_nccl():
    """The path of the libnccl.so.2 this process has mapped (None: none yet)."""
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split()[-1]
            if os.path.basename(path).startswith("libnccl.so"):
                return os.path.realpath(path)
    return None


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---- what each rank runs ------------------------------------------------------------------------

def rank_torch(rank, size, port, gloo_port, shim_dir, report):
    import torch
    import torch.distributed as dist

    device = torch.device("cuda", 0)
    torch.cuda.set_device(device)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=size,
                            timeout=datetime.timedelta(seconds=60))
    n = 1031
    x = torch.arange(n, dtype=torch.float32, device=device) + rank
    dist.all_reduce(x)  # the first call makes NCCL's communicator, so the library is loaded now
    nccl = loaded_nccl()
    report["nccl"] = nccl
    if shim_dir and os.path.dirname(nccl or "") != os.path.realpath(shim_dir):
        raise AssertionError(f"libnccl.so.2 is {nccl}, not the shim's in {shim_dir}")
    want = torch.arange(n, dtype=torch.float32) * size + sum(range(size))
    check(x.cpu(), want, "all_reduce")
    b = torch.full((n,), float(rank), device=device)
    dist.broadcast(b, src=size - 1)
    check(b.cpu(), torch.full((n,), float(size - 1)), "broadcast")
    flat = torch.zeros(n * size, device=device)
    dist.all_gather_into_tensor(flat, torch.full((n,), float(rank), device=device))
    check(flat.cpu(), torch.cat([torch.full((n,), float(r)) for r in range(size)]), "all_gather_into_tensor")
    block = torch.zeros(n, device=device)
    dist.reduce_scatter_tensor(block, torch.arange(n * size, dtype=torch.float32, device=device))
    check(block.cpu(), size * torch.arange(rank * n, (rank + 1) * n, dtype=torch.float32), "reduce_scatter_tensor")
    rows = torch.arange(4 * size, dtype=torch.float32, device=device) + 100 * rank
    got = torch.empty_like(rows)
    dist.all_to_all_single(got, rows)
    want = torch.cat([torch.arange(4 * rank, 4 * rank + 4, dtype=torch.float32) + 100 * p for p in range(size)])
    check(got.cpu(), want, "all_to_all_single")
    send = torch.full((1 << 20,), float(rank), device=device)
    recv = torch.zeros(1 << 20, device=device)
    ops = [dist.P2POp(dist.isend, send, (rank + 1) % size), dist.P2POp(dist.irecv, recv, (rank - 1) % size)]
    for r in dist.batch_isend_irecv(ops):
        r.wait()
    check(recv.cpu(), torch.full((1 << 20,), float((rank - 1) % size)), "batch_isend_irecv ring")
    on_nccl = train(torch, dist, rank, device)
    dist.destroy_process_group()
    os.environ["GLOO_SOCKET_IFNAME"] = "lo"
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{gloo_port}", rank=rank, world_size=size)
    on_gloo = train(torch, dist, rank, torch.device("cpu"))
    rel = ((on_nccl - on_gloo).norm() / on_gloo.norm()).item()
    report["ddp_relative_difference"] = rel
    # The GPU's arithmetic differs from the CPU's in its last bits; a wrong reduction is far off.
    if rel > 1e-4:
        raise AssertionError(f"DDP on nccl differs from gloo by {rel:g} relative")
    dist.destroy_process_group()


def train(torch, dist, rank, device):
    torch.manual_seed(1234)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10)).to(device)
    ddp = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=1)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    gen = torch.Generator().manual_seed(99 + rank)
    for _ in range(STEPS):
        x = torch.randn(32, 64, generator=gen).to(device)
        y = torch.randint(0, 10, (32,), generator=gen).to(device)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(ddp(x), y).backward()
        opt.step()
    return torch.cat([p.detach().flatten() for p in model.parameters()]).cpu()


def check(got, want, what):
    if not bool((got == want.to(got.dtype)).all()):
        bad = (got != want.to(got.dtype)).nonzero()
        raise AssertionError(f"{what}: {len(bad)} elements differ, first at {bad[0].tolist()}")


def rank_cupy(rank, size, port, _gloo_port, shim_dir, report):
    import cupy
    from cupy.cuda import nccl

    cupy.cuda.Device(0).use()
    # The unique id goes from rank 0 to the others through a file named by the port.
    path = os.path.join(tempfile.gettempdir(), f"loom-cupy-uid-{port}.json")
    if rank == 0:
        with open(path + ".tmp", "w") as f:
            json.dump(list(nccl.get_unique_id()), f)
        os.replace(path + ".tmp", path)
    else:
        deadline = time.monotonic() + 60
        while not os.path.exists(path):
            if time.monotonic() > deadline:
                raise TimeoutError("rank 0 never wrote the unique id")
            time.sleep(0.01)
    with open(path) as f:
        uid = tuple(json.load(f))
    comm = nccl.NcclCommunicator(size, uid, rank)
    nccl_path = loaded_nccl()
    report["nccl"] = nccl_path
    if shim_dir and os.path.dirname(nccl_path or "") != os.path.realpath(shim_dir):
        raise AssertionError(f"libnccl.so.2 is {nccl_path}, not the shim's in {shim_dir}")
    n = 1 << 20
    x = cupy.arange(n, dtype=cupy.float32) + rank
    y = cupy.zeros(n, dtype=cupy.float32)
    stream = cupy.cuda.Stream.null
    comm.allReduce(x.data.ptr, y.data.ptr, n, nccl.NCCL_FLOAT32, nccl.NCCL_SUM, stream.ptr)
    stream.synchronize()
    want = cupy.arange(n, dtype=cupy.float32) * size + sum(range(size))
    if not bool((y == want).all()):
        raise AssertionError("cupy allReduce: wrong sums")
    comm.destroy()
    if rank == 0:
        os.unlink(path)


def rank_main(args):
    report = {"rank": args.rank}
    try:
        {"torch": rank_torch, "cupy": rank_cupy}[args.case](args.rank, args.ranks, args.port, args.gloo_port,
                                                           args.shim_dir, report)
        report["ok"] = True
    except Exception:  # noqa: BLE001 (reported to the parent)
        report["ok"] = False
        report["error"] = traceback.format_exc()
    print("REPORT " + json.dumps(report), flush=True)
    sys.stdout.flush()
    os._exit(0)  # without destructors: a framework's teardown is not what is under test


# ---- the parent -----------------------------------------------------------------------------------

def run_case(case, ranks, shim_dir, real):
    env = dict(os.environ)
    if not real:
        env["LD_PRELOAD"] = os.path.join(shim_dir, "libnccl.so.2")
    port, gloo_port = free_port(), free_port()
    procs = [subprocess.Popen([sys.executable, os.path.abspath(__file__), shim_dir if not real else "",
                               "--rank", str(r), "--ranks", str(ranks), "--case", case, "--port", str(port),
                               "--gloo-port", str(gloo_port)],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in range(ranks)]
    reports, outputs = [], []
    for p in procs:
        try:
            out, _ = p.communicate(timeout=240)
        except subprocess.TimeoutExpired:
            p.kill()
            out, _ = p.communicate()
            out += "\n(killed after 240 s)"
        outputs.append(out)
        for line in out.splitlines():
            if line.startswith("REPORT "):
                reports.append(json.loads(line[len("REPORT "):]))
    return reports, outputs


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("shim_dir")
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--only", default="")
    parser.add_argument("--real", action="store_true")
    parser.add_argument("--rank", type=int, default=-1)
    parser.add_argument("--case", default="")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--gloo-port", type=int, default=0)
    args = parser.parse_args()
    if args.rank >= 0:
        rank_main(args)
    passed = failed = skipped = 0
    for case, module in (("torch", "torch"), ("cupy", "cupy")):
        if args.only and args.only != case:
            continue
        probe = subprocess.run([sys.executable, "-c", f"import {module}; import {module}.cuda as c; "
                                "print(c.is_available() if hasattr(c, 'is_available') else "
                                "c.runtime.getDeviceCount() > 0)"], capture_output=True, text=True)
        if probe.returncode != 0 or probe.stdout.strip() != "True":
            print(f"{case}: skipped: {module} with a CUDA device is not available to {sys.executable} "
                  f"({(probe.stderr.strip().splitlines() or [probe.stdout.strip()])[-1]})")
            skipped += 1
            continue
        reports, outputs = run_case(case, args.ranks, args.shim_dir, args.real)
        ok = len(reports) == args.ranks and all(r["ok"] for r in reports)
        which = "NCCL itself" if args.real else "the shim"
        print(f"{case} on {which}, {args.ranks} ranks on one GPU: {'ok' if ok else 'FAILED'}")
        for r in reports:
            print(f"  rank {r['rank']}: libnccl {r.get('nccl')}"
                  + (f", DDP against gloo {r['ddp_relative_difference']:.3g}" if "ddp_relative_difference" in r else "")
                  + ("" if r["ok"] else "\n    " + r["error"].replace("\n", "\n    ")))
        if not ok:
            for rank, out in enumerate(outputs):
                print(f"  --- rank {rank}'s output (last 3000 characters):\n{out[-3000:]}")
        if args.real:
            continue  # NCCL's own answer is reported, not judged
        passed += ok
        failed += not ok
    print(f"{passed} passed, {failed} failed, {skipped} skipped")
    if failed:
        return 1
    return 77 if skipped and not passed else 0  # 77: meson's skip, when nothing could run here


if __name__ == "__main__":
    sys.exit(main())
