"""examples/torch_ddp.py as README runs it: 2 ranks under torchrun, on backend "loom", and again
as its Gloo version (the same file with the backend's name changed). Both must finish on every
rank, the loss must fall, and the losses rank 0 prints must be the same digits on both backends
(DDP on 2 ranks is bitwise equal to Gloo's, torch_backend_test's ddp case).

    PYTHONPATH=<builddir>/python python3 tests/compat/torch/example_test.py

Where torchrun cannot work, the test starts the ranks itself with the variables torchrun sets,
and says why: torch 1.13's torchrun fails under Python 3.11 inside its elastic agent, and a
torch built without libuv (Debian 13's 2.6) has a torchrun whose store asks for libuv.
Exit status 77 (skipped, reason printed) where torch or loom_torch is not importable.
"""
import os
import re
import subprocess
import sys
import tempfile

from free_port import free_port

# As README tells users of a torch 2 without libuv (Debian's): init_process_group's env://
# store asks for libuv unless USE_LIBUV=0 (torch_backend_test.py sets it alike).
os.environ.setdefault("USE_LIBUV", "0")
HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(HERE, "..", "..", "..", "examples", "torch_ddp.py")
LOSS = re.compile(r"step (\d+): mean loss over 2 ranks (\S+)")

try:
    import torch
    import loom_torch  # noqa: F401
except ImportError as e:
    print(f"skipped: torch or loom_torch is not importable by {sys.executable} ({e})")
    sys.exit(77)


def why_not_torchrun():
    """Why this torch's torchrun cannot start the ranks; None where it can."""
    if int(torch.__version__.split(".")[0]) < 2 and sys.version_info >= (3, 11):
        return (f"torch {torch.__version__}'s torchrun fails under Python {sys.version.split()[0]} "
                "(its elastic agent)")
    try:
        # As torchrun's rendezvous makes its store: with torch's default transport.
        torch.distributed.TCPStore("127.0.0.1", 0, 1, True)
    except RuntimeError as e:
        return f"torchrun's store cannot be made on torch {torch.__version__} ({e})"
    return None


def run(script, backend, torchrun):
    """Runs `script` on 2 ranks (under torchrun, or with its variables); rank 0's (step, loss)
    lines, or exits saying what failed."""
    port = str(free_port())
    env = dict(os.environ, OMP_NUM_THREADS="1")
    if torchrun:
        procs = [subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                                   "--master_port", port, script], env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True)]
    else:
        procs = [subprocess.Popen([sys.executable, script],
                                  env=dict(env, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE="2",
                                           MASTER_ADDR="127.0.0.1", MASTER_PORT=port),
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for r in range(2)]
    outputs = []
    for p in procs:
        try:
            out, _ = p.communicate(timeout=300)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            sys.exit(f"FAIL: {backend}: the example did not finish within 300 s")
        outputs.append(out)
        if p.returncode != 0:
            sys.exit(f"FAIL: {backend}: exit status {p.returncode}:\n{out}")
    losses = [(int(step), loss) for step, loss in LOSS.findall("".join(outputs))]
    if [step for step, _ in losses] != [0, 50, 100, 150, 199]:
        sys.exit(f"FAIL: {backend}: rank 0 printed {losses}, not steps 0, 50, 100, 150, 199:\n" + "".join(outputs))
    return losses


def main():
    why = why_not_torchrun()
    launcher = "torchrun" if why is None else "2 processes with torchrun's variables"
    if why is not None:
        print(f"{why}: the ranks are started with RANK WORLD_SIZE LOCAL_RANK MASTER_ADDR MASTER_PORT")
    with tempfile.TemporaryDirectory() as tmp:
        gloo = os.path.join(tmp, "torch_gloo_ddp.py")
        with open(EXAMPLE) as f:
            source = f.read()
        if source.count('init_process_group("loom")') != 1:
            sys.exit('FAIL: examples/torch_ddp.py no longer calls init_process_group("loom") once')
        with open(gloo, "w") as f:
            f.write(source.replace('init_process_group("loom")', 'init_process_group("gloo")'))
        loom = run(EXAMPLE, "loom", why is None)
        reference = run(gloo, "gloo", why is None)
    print(f"{launcher}: loom {loom}")
    print(f"{launcher}: gloo {reference}")
    if float(loom[-1][1]) >= float(loom[0][1]) / 10:
        sys.exit(f"FAIL: the loss fell from {loom[0][1]} to only {loom[-1][1]}")
    if loom != reference:
        sys.exit("FAIL: loom's losses differ from gloo's")
    print("1 passed, 0 failed")


if __name__ == "__main__":
    main()
