"""DDP training with PyTorch on Loom: the Gloo version of this script, with the backend's
name changed (and loom_torch imported, which registers it).

    PYTHONPATH=build/python torchrun --nproc_per_node 2 examples/torch_ddp.py
    (Debian: /usr/bin/python3 -m torch.distributed.run --nproc_per_node 2 examples/torch_ddp.py)
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
            dist.all_reduce(reported, op=dist.ReduceOp.AVG)
            if rank == 0:
                print(f"step {step}: mean loss over {world} ranks {reported.item():.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
