r"""DDP training with PyTorch on Loom: the Gloo version of this script, with the backend's
name changed (and loom_torch imported, which registers it).

    PYTHONPATH=build/python torchrun --nproc_per_node 2 examples/torch_ddp.py

Debian 12's torch 1.13 has a torchrun that fails under its Python 3.11; there, start each rank
with the variables torchrun would set:

    for r in 0 1; do RANK=$r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 \
      PYTHONPATH=build/python python3 examples/torch_ddp.py & done; wait

tests/compat/torch/example_test.py runs it (under torchrun where it works) beside its Gloo version.
"""
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

import loom_torch  # noqa: F401  registers the backend "loom"


def main():
    dist.init_process_group("loom")  # the Gloo version: dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Sequential(
        torch.nn.Linear(32, 128), torch.nn.ReLU(), torch.nn.Linear(128, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    # Each rank trains on its own slice of y = sum(x) + noise.
    gen = torch.Generator().manual_seed(rank)
    for step in range(200):
        x = torch.randn(64, 32, generator=gen)
        y = x.sum(1, keepdim=True) + 0.01 * torch.randn(64, 1, generator=gen)
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        if step % 50 == 0 or step == 199:
            reported = loss.detach().clone()
            dist.all_reduce(reported)  # a sum, then divided: Gloo has no ReduceOp.AVG
            if rank == 0:
                print(f"step {step}: mean loss over {world} ranks {reported.item() / world:.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
