#!/usr/bin/python3
"""Loom over UCX beside Loom over its own sockets and Open MPI over UCX (pml ucx), in one run.

    perf/ucx_compare.py [--ranks 2] [--sweep "-b 8 -e 128M -f 8"] [--runs 3] [--tls tcp]
                        [--net-devices lo] [--builddir build-perf] [--markdown FILE]

Each round runs the three programs in turn (so a slow phase of a shared machine hits them
alike), float32 sum allreduce in place, `--ranks` processes on this host, rank r on cpu r:
  loom socket  LOOM_TRANSPORTS=socket loom-perf
  loom ucx     LOOM_TRANSPORTS=ucx UCX_TLS=TLS UCX_NET_DEVICES=DEVICES loom-perf
  mpi ucx      mpirun --mca pml ucx (pml_ucx_tls/devices any) -x UCX_TLS=TLS -x UCX_NET_DEVICES=DEVICES
               perf/peers/mpi_collective
Both UCX programs get the same devices, one by default (lo), as a pair of hosts joined by one
port would have: on one host every interface loops back, and UCX stripes a large message over
all it may use (two TCP connections, lo and eth0, where Open MPI's endpoints have lanes on both;
Loom's, made with peer error handling, on lo alone), which no single link between hosts has.
`--net-devices all` leaves UCX its choice.
The table keeps each program's best round per size: busbw (GB/s), Loom over UCX against
Loom's sockets (issue 28's target: within 15 % from 1 MiB up) and against Open MPI over UCX
(target: ahead from 16 MiB up). Needs a Loom built with UCX and Open MPI with its ucx pml.
"""
import argparse
import os
import subprocess
import sys

from machine import cpu_model

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_table(cmd, env):
    """{bytes: in-place time in us} from an nccl-tests table."""
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
    if out.returncode != 0:
        sys.exit(f"ucx_compare.py: {' '.join(cmd)} failed:\n{out.stdout[-2000:]}{out.stderr[-2000:]}")
    times = {}
    for line in out.stdout.splitlines():
        f = line.split()
        if len(f) == 13 and f[0].isdigit() and f[9] != "-":
            times[int(f[0])] = float(f[9])
    return times


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--sweep", default="-b 8 -e 128M -f 8")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--tls", default="tcp", help="UCX_TLS for both UCX programs")
    p.add_argument("--net-devices", default="lo", help="UCX_NET_DEVICES for both UCX programs ('all': UCX's choice)")
    p.add_argument("--builddir", default="build-perf")
    p.add_argument("--markdown")
    a = p.parse_args()
    b = os.path.join(ROOT, a.builddir)
    timing = a.sweep.split() + ["-n", "20", "-w", "5", "-c", "1", "--min-time", "0.2"]
    loom = [f"{b}/tools/loomrun/loomrun", "-n", str(a.ranks), f"{b}/perf/loom-perf", "allreduce"] + timing + ["--pin"]
    mpi = ["mpirun", "--allow-run-as-root", "-n", str(a.ranks), "--bind-to", "core", "--mca", "pml", "ucx",
           "--mca", "pml_ucx_tls", "any", "--mca", "pml_ucx_devices", "any", "-x", f"UCX_TLS={a.tls}"]
    ucx = {"UCX_TLS": a.tls}
    if a.net_devices != "all":
        mpi += ["-x", f"UCX_NET_DEVICES={a.net_devices}"]
        ucx["UCX_NET_DEVICES"] = a.net_devices
    mpi += [f"{b}/perf/peers/mpi_collective", "allreduce"] + timing
    programs = {
        "loom socket": (loom, {"LOOM_TRANSPORTS": "socket"}),
        "loom ucx": (loom, dict(ucx, LOOM_TRANSPORTS="ucx")),
        "mpi ucx": (mpi, {}),
    }
    best = {name: {} for name in programs}
    for r in range(a.runs):
        for name, (cmd, extra) in programs.items():
            print(f"== round {r + 1}/{a.runs}: {name}", file=sys.stderr)
            env = dict(os.environ, **extra)
            for nbytes, t in run_table(cmd, env).items():
                best[name][nbytes] = min(t, best[name].get(nbytes, float("inf")))
    factor = 2 * (a.ranks - 1) / a.ranks
    bw = {n: {s: factor * s / t / 1e3 for s, t in d.items()} for n, d in best.items()}
    lines = [f"CPU: {cpu_model()}, {os.cpu_count()} cores; {a.ranks} ranks as processes on one host, pinned; "
             f"UCX_TLS={a.tls}, UCX_NET_DEVICES={a.net_devices}; float32 sum allreduce in place; best of {a.runs} interleaved rounds", "",
             "| size | Loom socket GB/s | Loom UCX GB/s | Open MPI UCX GB/s | Loom UCX / socket | Loom UCX / Open MPI UCX |",
             "|---:|---:|---:|---:|---:|---:|"]
    for s in sorted(set(bw["loom ucx"]) & set(bw["loom socket"]) & set(bw["mpi ucx"])):
        ls, lu, mu = bw["loom socket"][s], bw["loom ucx"][s], bw["mpi ucx"][s]
        lines.append(f"| {s} | {ls:.3g} | {lu:.3g} | {mu:.3g} | {lu / ls:.2f} | {lu / mu:.2f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if a.markdown:
        with open(a.markdown, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
