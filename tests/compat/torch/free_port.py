"""A free TCP port for a test's rendezvous, shared by the torch tests."""
import os
import random
import socket
import time


def free_port():
    """A free port below the kernel's ephemeral range (32768 and up), so that a port Loom's
    root or a socket takes in the meantime cannot be this one."""
    rng = random.Random(os.getpid() ^ time.monotonic_ns())
    for _ in range(1000):
        port = rng.randrange(20000, 32000)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
                return port
            except OSError:
                continue
    raise RuntimeError("no free port in 20000-32000")
