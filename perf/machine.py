"""What the perf scripts print beside every figure: the machine they ran on."""
import platform


def cpu_model():
    """The CPU's model name from /proc/cpuinfo (the processor field elsewhere)."""
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor()
