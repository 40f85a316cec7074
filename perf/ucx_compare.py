#!/usr/bin/python3
"""Loom over UCX beside Loom over its own sockets and Open MPI over UCX (pml ucx), in one run.

    perf/ucx_compare.py [--ranks 2] [--sweep "-b 8 -e 128M -f 8"] [--runs 3] [--tls tcp]
                        [--net-devices lo] [--builddir build-perf] [--markdown FILE]
                        [--hosts NS=ADDRESS,NS=ADDRESS]

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

With --hosts (perf/ucx_netns.sh makes them and passes them), each rank runs in a network
namespace of its own, rank r in the r-th, on cpu r, the namespaces joined by veth pairs on a
bridge: two hosts as far as TCP can tell. Loom runs one loomrun a host (--nnodes); Open MPI's
mpirun starts in the first and reaches the others through perf/netns_rsh.sh. The devices
default to eth0 (the veth) there.
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


def run_table(cmds, env):
    """{bytes: in-place time in us} from the nccl-tests table the first command prints; the
    others (a job's other hosts) run beside it."""
    procs = [subprocess.Popen(c, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for c in cmds]
    outs = [p.communicate(timeout=1800) for p in procs]
    for c, p, (stdout, stderr) in zip(cmds, procs, outs):
        if p.returncode != 0:
            sys.exit(f"ucx_compare.py: {' '.join(c)} failed:\n{stdout[-2000:]}{stderr[-2000:]}")
    times = {}
    for line in outs[0][0].splitlines():
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
    p.add_argument("--net-devices", help="UCX_NET_DEVICES for both UCX programs ('all': UCX's choice; "
                   "default lo, eth0 with --hosts)")
    p.add_argument("--hosts", help="NS=ADDRESS,...: rank r in network namespace NS (perf/ucx_netns.sh)")
    p.add_argument("--builddir", default="build-perf")
    p.add_argument("--markdown")
    a = p.parse_args()
    b = os.path.join(ROOT, a.builddir)
    hosts = [h.split("=") for h in a.hosts.split(",")] if a.hosts else []
    if hosts and len(hosts) != a.ranks:
        sys.exit(f"ucx_compare.py: --hosts names {len(hosts)} namespaces for {a.ranks} ranks")
    devices = a.net_devices or ("eth0" if hosts else "lo")
    timing = a.sweep.split() + ["-n", "20", "-w", "5", "-c", "1", "--min-time", "0.2"]
    perf = [f"{b}/perf/loom-perf", "allreduce"] + timing
    loomrun = f"{b}/tools/loomrun/loomrun"
    if hosts:
        loom = [["ip", "netns", "exec", ns, "taskset", "-c", str(r), loomrun, "-n", str(a.ranks), "--nnodes",
                 str(a.ranks), "--node-rank", str(r), "--master-addr", hosts[0][1], "--master-port", "29731"] + perf
                for r, (ns, _) in enumerate(hosts)]
        rankfile = os.path.join(b, "ucx_compare.rankfile")
        with open(rankfile, "w") as f:
            f.writelines(f"rank {r}={addr} slot={r}\n" for r, (_, addr) in enumerate(hosts))
        mpi = ["ip", "netns", "exec", hosts[0][0], "mpirun", "--allow-run-as-root", "-n", str(a.ranks),
               "-H", ",".join(addr for _, addr in hosts), "--rankfile", rankfile,
               "--mca", "plm_rsh_agent", os.path.join(ROOT, "perf", "netns_rsh.sh"),
               "--mca", "oob_tcp_if_include", "eth0"]
    else:
        loom = [[loomrun, "-n", str(a.ranks)] + perf + ["--pin"]]
        mpi = ["mpirun", "--allow-run-as-root", "-n", str(a.ranks), "--bind-to", "core"]
    mpi += ["--mca", "pml", "ucx", "--mca", "pml_ucx_tls", "any", "--mca", "pml_ucx_devices", "any",
            "-x", f"UCX_TLS={a.tls}"]
    ucx = {"UCX_TLS": a.tls}
    if devices != "all":
        mpi += ["-x", f"UCX_NET_DEVICES={devices}"]
        ucx["UCX_NET_DEVICES"] = devices
    mpi += [f"{b}/perf/peers/mpi_collective", "allreduce"] + timing
    secret = {"LOOM_SECRET": os.urandom(16).hex()} if hosts else {}
    programs = {
        "loom socket": (loom, dict(secret, LOOM_TRANSPORTS="socket")),
        "loom ucx": (loom, dict(ucx, **secret, LOOM_TRANSPORTS="ucx")),
        "mpi ucx": ([mpi], {}),
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
    where = (f"each in a network namespace of its own ({', '.join(ns for ns, _ in hosts)}), joined by veth"
             if hosts else "as processes on one host")
    lines = [f"CPU: {cpu_model()}, {os.cpu_count()} cores; {a.ranks} ranks {where}, rank r on cpu r; "
             f"UCX_TLS={a.tls}, UCX_NET_DEVICES={devices}; float32 sum allreduce in place; "
             f"best of {a.runs} interleaved rounds", "",
             "| size | Loom socket GB/s | Loom UCX GB/s | Open MPI UCX GB/s | Loom UCX / socket "
             "| Loom UCX / Open MPI UCX |",
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
