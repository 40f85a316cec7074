#!/usr/bin/python3
"""Runs a command and says how much of the machine other processes used meanwhile, so that
perf/compare.sh can rerun a measurement that shared the cpus with something else.

    perf/foreign_load.py REPORT_FILE command [args...]

Exits with the command's status. Writes to REPORT_FILE one number: the cpu time that
processes other than the command (and everything it started and waited for) used while it
ran, plus time the hypervisor stole, as a percentage of all cpus over the run's wall time.
Interrupt and softirq time is left out: loopback TCP spends its own work there.
"""
import os
import resource
import subprocess
import sys
import time


def busy_seconds():
    # cpu  user nice system idle iowait irq softirq steal guest guest_nice (USER_HZ ticks)
    with open("/proc/stat") as f:
        fields = [int(v) for v in f.readline().split()[1:9]]
    user, nice, system, _idle, _iowait, _irq, _softirq, steal = fields
    return (user + nice + system + steal) / os.sysconf("SC_CLK_TCK")


def children_seconds():
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main():
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    report, command = sys.argv[1], sys.argv[2:]
    busy0, ours0, wall0 = busy_seconds(), children_seconds(), time.monotonic()
    status = subprocess.call(command)
    busy1, ours1, wall1 = busy_seconds(), children_seconds(), time.monotonic()
    cpus = os.cpu_count()
    foreign = max(0.0, (busy1 - busy0) - (ours1 - ours0)) / (cpus * max(wall1 - wall0, 1e-9))
    with open(report, "w") as f:
        f.write(f"{100 * foreign:.0f}\n")
    return status


if __name__ == "__main__":
    sys.exit(main())
