"""A fused model trains under DDP, FSDP2 (fully_shard) and tensor
parallelism exactly as in one process: two CPU processes on gloo, a few SGD
steps, then every parameter compared with the same model trained alone (on
both processes' batches; for tensor parallelism, where both see the same
batch, on that one)."""

import datetime
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


def _wrap(model, engine):
    """The model as `engine` trains it."""
    if engine.startswith("ddp"):
        model = nn.parallel.DistributedDataParallel(model)
        return torch.compile(model) if engine == "ddp_compile" else model
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    policy = (MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
              if engine == "fsdp_bf16" else MixedPrecisionPolicy())
    for layer in model:
        if any(True for _ in layer.parameters()):
            fully_shard(layer, mp_policy=policy)
    return fully_shard(model, mp_policy=policy)


def _full_state(model):
    state = {k.removeprefix("_orig_mod.").removeprefix("module."): v for k, v in model.state_dict().items()}
    return {k: (v.full_tensor() if type(v).__name__ == "DTensor" else v).detach().clone() for k, v in state.items()}


def _worker(rank, engine, port, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    # A rank that fails leaves the other waiting: collectives time out instead of hanging.
    dist.init_process_group("gloo", rank=rank, world_size=WORLD, timeout=datetime.timedelta(seconds=120))
    try:
        _run(rank, engine, out)
    finally:
        # Both ranks done with every collective before the group goes (a rank
        # that leaves first can abort the other's last gloo operation).
        dist.barrier()
        dist.destroy_process_group()
    # Done and checked: leave without the interpreter's teardown, where about
    # one run in thirty aborted ("terminate called without an active
    # exception", a thread of torch.distributed's still joinable at exit).
    os._exit(0)


def _run(rank, engine, out):
    if engine == "tp":
        _train_tensor_parallel(rank, out)
        return
    x, y = _batch(rank)
    states = {}
    # fsdp_bf16: the unfused model under the same policy is the reference
    # (both compute in bf16, so one process in fp32 is not).
    for name in ("fused", "eager") if engine == "fsdp_bf16" else ("fused",):
        model = _model()
        if name == "fused":
            model = tga.fuse_linear_act(model)
            # Two pairs; the second chained to the Linear after it.
            assert [m.activation for m in model.modules() if isinstance(m, tga.LinearAct)] == \
                ["gelu", "silu", "none"]
        model = _wrap(model, engine)
        _train(model, lambda m: ((m(x) - y) ** 2).mean())
        states[name] = _full_state(model)  # a collective under FSDP: every rank takes part
    if rank == 0:
        torch.save(states, out)


def _train_tensor_parallel(rank, out):
    """The plan written for the unfused model (column-parallel first Linear,
    row-parallel second), then fuse_linear_act: the fused modules keep the
    plan's sharded parameters and input/output conversions, and the operator
    computes on the DTensor shards."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    mesh = init_device_mesh("cpu", (WORLD,))
    model = parallelize_module(_model(), mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
    model, report = tga.fuse_linear_act(model, report=True)
    assert [lin for lin, _, _ in report.fused] == ["0", "2"] and report.hooks_moved == ["0", "2"], str(report)
    assert type(model[0].weight).__name__ == "DTensor"
    x, y = _batch(0)
    _train(model, lambda m: ((m(x) - y) ** 2).mean())
    state = _full_state(model)  # a collective: every rank takes part
    if rank == 0:
        torch.save({"fused": state}, out)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _one_process(engine):
    model = _model()
    batches = [_batch(r) for r in range(1 if engine == "tp" else WORLD)]
    _train(model, lambda m: sum(((m(x) - y) ** 2).mean() for x, y in batches) / len(batches))
    return model.state_dict()


def _check(engine, tmp_path):
    out = str(tmp_path / f"{engine}.pt")
    mp.spawn(_worker, args=(engine, _free_port(), out), nprocs=WORLD)
    states = torch.load(out)
    got = states["fused"]
    expected = states["eager"] if "eager" in states else _one_process(engine)
    tol = dict(rtol=2e-2, atol=2e-2) if engine == "fsdp_bf16" else dict(rtol=1e-5, atol=1e-6)
    assert list(got) == list(expected)
    for key, value in expected.items():
        torch.testing.assert_close(got[key], value, msg=key, **tol)


def test_fused_model_trains_under_ddp(tmp_path):
    _check("ddp", tmp_path)


def test_fused_model_trains_under_ddp_compiled(tmp_path):
    _check("ddp_compile", tmp_path)


def test_fused_model_trains_under_fully_shard(tmp_path):
    _check("fsdp", tmp_path)


def test_fused_model_trains_under_fully_shard_in_bf16(tmp_path):
    """FSDP2's mixed precision (bf16 compute, fp32 reduction): the fused and
    the unfused model end within bf16's tolerance of each other."""
    _check("fsdp_bf16", tmp_path)


def test_fused_model_trains_under_tensor_parallelism(tmp_path):
    _check("tp", tmp_path)
