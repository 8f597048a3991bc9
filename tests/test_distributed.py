"""A fused model trains under DDP and FSDP2 (fully_shard) exactly as in one
process: two CPU processes on gloo, a few SGD steps, then every parameter
compared with the same model trained alone on both processes' batches."""

import os
import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

import torch_gemm_act as tga

WORLD = 2


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 8), nn.SiLU(), nn.Linear(8, 4))


def _batch(rank):
    g = torch.Generator().manual_seed(100 + rank)
    return torch.randn(6, 16, generator=g), torch.randn(6, 4, generator=g)


def _train(model, step_loss, steps=3):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(steps):
        opt.zero_grad()
        step_loss(model).backward()
        opt.step()


def _worker(rank, engine, port, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    try:
        model = tga.fuse_linear_act(_model())
        assert sum(isinstance(m, tga.LinearAct) for m in model.modules()) == 2
        if engine == "ddp":
            model = nn.parallel.DistributedDataParallel(model)
        else:
            from torch.distributed.fsdp import fully_shard
            for layer in model:
                if any(True for _ in layer.parameters()):
                    fully_shard(layer)
            fully_shard(model)
        x, y = _batch(rank)
        _train(model, lambda m: ((m(x) - y) ** 2).mean())
        state = model.state_dict()
        if engine == "ddp":
            state = {k.removeprefix("module."): v for k, v in state.items()}
        else:
            state = {k: v.full_tensor() for k, v in state.items()}
        if rank == 0:
            torch.save({k: v.detach().clone() for k, v in state.items()}, out)
    finally:
        dist.destroy_process_group()


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _one_process():
    model = _model()
    batches = [_batch(r) for r in range(WORLD)]
    _train(model, lambda m: sum(((m(x) - y) ** 2).mean() for x, y in batches) / WORLD)
    return model.state_dict()


def _check(engine, tmp_path):
    out = str(tmp_path / f"{engine}.pt")
    mp.spawn(_worker, args=(engine, _free_port(), out), nprocs=WORLD)
    got, expected = torch.load(out), _one_process()
    assert list(got) == list(expected)
    for key, value in expected.items():
        torch.testing.assert_close(got[key], value, rtol=1e-5, atol=1e-6, msg=key)


def test_fused_model_trains_under_ddp(tmp_path):
    _check("ddp", tmp_path)


def test_fused_model_trains_under_fully_shard(tmp_path):
    _check("fsdp", tmp_path)
