"""A fused model trains under DDP, FSDP2 (fully_shard) and tensor
parallelism exactly as in one process: two CPU processes on gloo, a few SGD
steps, then every parameter compared with the same model trained alone (on
both processes' batches; for tensor parallelism, where both see the same
batch, on that one). With two CUDA GPUs the same tests run on them too,
over NCCL."""

import datetime
import os
import socket

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn

import torch_gemm_act as tga

# The operators through the modules at every size and on the CPU (conftest.py).
pytestmark = pytest.mark.operator_everywhere

WORLD = 2

# The CPU over gloo everywhere; two GPUs over NCCL where a machine has them.
DEVICES = pytest.mark.parametrize("device", [
    "cpu", pytest.param("cuda", marks=pytest.mark.skipif(torch.cuda.device_count() < WORLD,
                                                         reason=f"needs {WORLD} CUDA GPUs"))])


class _GatedMLP(nn.Module):
    """Llama's MLP: down(act(gate(x)) * up(x))."""

    def __init__(self):
        super().__init__()
        self.gate_proj, self.up_proj = nn.Linear(16, 32, bias=False), nn.Linear(16, 32, bias=False)
        self.down_proj, self.act_fn = nn.Linear(32, 16, bias=False), nn.SiLU()

    def forward(self, x):
        return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))


def _model(engine, device):
    torch.manual_seed(0)
    if engine.endswith("_gated"):
        model = nn.Sequential(_GatedMLP(), nn.Linear(16, 4))
    elif engine == "tp_plan_after_fusion":
        # The MLP as tensor parallelism splits it: column-, then row-parallel.
        model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 4))
    else:
        model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 8), nn.SiLU(), nn.Linear(8, 4))
    return model.to(device)


def _batch(rank, device):
    g = torch.Generator().manual_seed(100 + rank)
    return torch.randn(6, 16, generator=g).to(device), torch.randn(6, 4, generator=g).to(device)


def _train(model, step_loss, steps=3):
    # The per-parameter loop (the CPU's default): the multi-tensor path, the
    # CUDA default, cannot take a model whose plan leaves some parameters
    # plain tensors beside DTensors (the "tp" model's last Linear).
    opt = torch.optim.SGD(model.parameters(), lr=0.1, foreach=False)
    for _ in range(steps):
        opt.zero_grad()
        step_loss(model).backward()
        opt.step()


def _wrap(model, engine):
    """The model as `engine` trains it."""
    if engine.startswith("ddp"):
        model = nn.parallel.DistributedDataParallel(model)
        return torch.compile(model) if engine.startswith("ddp_compile") else model
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    policy = (MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
              if engine.startswith("fsdp_bf16") else MixedPrecisionPolicy())
    for layer in model:
        if any(True for _ in layer.parameters()):
            fully_shard(layer, mp_policy=policy)
    model = fully_shard(model, mp_policy=policy)
    return torch.compile(model) if engine.startswith("fsdp_compile") else model


def _full_state(model):
    state = {k.removeprefix("_orig_mod.").removeprefix("module."): v for k, v in model.state_dict().items()}
    return {k: (v.full_tensor() if type(v).__name__ == "DTensor" else v).detach().cpu() for k, v in state.items()}


def _worker(rank, engine, device, port, out, operator_everywhere):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    if device == "cuda":
        torch.cuda.set_device(rank)
    # A rank that fails leaves the other waiting: collectives time out instead of hanging.
    dist.init_process_group("nccl" if device == "cuda" else "gloo", rank=rank, world_size=WORLD,
                            timeout=datetime.timedelta(seconds=120))
    try:
        # The parent's policy (conftest.py, operator_everywhere), which a spawned process does not inherit.
        with tga.testing.override(operator_everywhere=operator_everywhere):
            _run(rank, engine, device, out)
    finally:
        # Both ranks done with every collective before the group goes (a rank
        # that leaves first can abort the other's last gloo operation).
        dist.barrier()
        dist.destroy_process_group()
    # Done and checked: leave without the interpreter's teardown, where about
    # one run in thirty aborted ("terminate called without an active
    # exception", a thread of torch.distributed's still joinable at exit).
    os._exit(0)


def _run(rank, engine, device, out):
    if engine == "linear_ce_vocab_parallel":
        _linear_ce_vocab_parallel(rank, device, out)
        return
    if engine == "tp":
        _train_tensor_parallel(rank, device, out)
        return
    if engine.startswith("tp_plan_after_fusion"):
        _train_tensor_parallel_after_fusion(rank, engine, device, out)
        return
    x, y = _batch(rank, device)
    states = {}
    # fsdp_bf16: the unfused model under the same policy is the reference
    # (both compute in bf16, so one process in fp32 is not).
    for name in ("fused", "eager") if engine.startswith("fsdp_bf16") else ("fused",):
        model = _model(engine, device)
        if name == "fused":
            model, report = tga.fuse_linear_act(model, report=True)
            if engine.endswith("_gated"):
                assert report.fused == [("0.gate_proj * 0.up_proj", "0.act_fn", "swiglu")], str(report)
            else:  # two pairs; the second chained to the Linear after it
                assert [m.activation for m in model.modules() if isinstance(m, tga.LinearAct)] == \
                    ["gelu", "silu", "none"]
        model = _wrap(model, engine)
        _train(model, lambda m: ((m(x) - y) ** 2).mean())
        states[name] = _full_state(model)  # a collective under FSDP: every rank takes part
    if rank == 0:
        torch.save(states, out)


def _train_tensor_parallel(rank, device, out):
    """The plan written for the unfused model (column-parallel first Linear,
    row-parallel second), then fuse_linear_act: the fused modules keep the
    plan's sharded parameters and input/output conversions, and the operator
    computes on the DTensor shards."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    mesh = init_device_mesh(device, (WORLD,))
    model = parallelize_module(_model("tp", device), mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()})
    model, report = tga.fuse_linear_act(model, report=True)
    assert [lin for lin, _, _ in report.fused] == ["0", "2"] and report.hooks_moved == ["0", "2"], str(report)
    assert type(model[0].weight).__name__ == "DTensor"
    x, y = _batch(0, device)
    _train(model, lambda m: ((m(x) - y) ** 2).mean())
    state = _full_state(model)  # a collective: every rank takes part
    if rank == 0:
        torch.save({"fused": state}, out)


def _train_tensor_parallel_after_fusion(rank, engine, device, out):
    """The plan written for the unfused MLP, applied to the fused one: the
    fused modules are nn.Linears to ColwiseParallel and RowwiseParallel
    (for the gated MLP: gate and up projections column parallel, down row
    parallel, as for Llama).
    Each rank's operators compute on its shards: a step's one collective is
    the row-parallel output's all-reduce; no weight or activation is
    gathered."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.debug import CommDebugMode
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    mesh = init_device_mesh(device, (WORLD,))
    model, report = tga.fuse_linear_act(_model(engine, device), report=True)
    if engine.endswith("_gated"):
        assert report.fused == [("0.gate_proj * 0.up_proj", "0.act_fn", "swiglu")], str(report)
        plan = {"0.gate_proj": ColwiseParallel(), "0.up_proj": ColwiseParallel(), "0.down_proj": RowwiseParallel()}
        column, row = model[0].gate_proj, model[0].down_proj
        assert isinstance(column, tga.LinearGate) and isinstance(model[0].up_proj, tga.LinearUp)
    else:
        assert report.fused == [("0", "1", "gelu")] and report.chained == [("0", "2")], str(report)
        plan = {"0": ColwiseParallel(), "2": RowwiseParallel()}
        column, row = model[0], model[2]
        assert isinstance(column, tga.LinearAct) and isinstance(row, tga.LinearAct)
    model = parallelize_module(model, mesh, plan)
    assert column.weight.to_local().shape == (32 // WORLD, 16)
    assert row.weight.to_local().shape[1] == 32 // WORLD
    x, y = _batch(0, device)
    comm = CommDebugMode()
    with comm:
        ((model(x) - y) ** 2).mean().backward()
    counts = {str(op).rsplit(".", 1)[-1]: n for op, n in comm.get_comm_counts().items()}
    assert set(counts) == {"all_reduce"}, counts
    model.zero_grad()
    _train(model, lambda m: ((m(x) - y) ** 2).mean())
    state = _full_state(model)
    if rank == 0:
        torch.save({"fused": state}, out)


def _linear_ce_case(device):
    g = torch.Generator().manual_seed(3)
    hidden, weight = torch.randn(10, 16, generator=g), torch.randn(40, 16, generator=g) / 4
    target = torch.randint(40, (10,), generator=g)
    target[::4] = -100
    return hidden.to(device), weight.to(device), target.to(device)


def _linear_ce_vocab_parallel(rank, device, out):
    """linear_cross_entropy on a vocabulary-parallel head (weight Shard(0)
    over the ranks, as ColwiseParallel leaves an LM head): the loss and the
    gradients, the weight's back on its shards."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    mesh = init_device_mesh(device, (WORLD,))
    hidden, weight, target = _linear_ce_case(device)
    hidden.requires_grad_()
    sharded = distribute_tensor(weight, mesh, [Shard(0)]).requires_grad_()
    loss = tga.linear_cross_entropy(hidden, sharded, target, label_smoothing=0.1)
    loss.backward()
    assert type(sharded.grad).__name__ == "DTensor" and sharded.grad.placements == (Shard(0),)
    grad_weight = sharded.grad.full_tensor()  # a collective: every rank takes part
    if rank == 0:
        torch.save({"loss": loss.detach().cpu(), "hidden": hidden.grad.cpu(), "weight": grad_weight.cpu()}, out)


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _one_process(engine, device):
    model = _model(engine, device)
    batches = [_batch(r, device) for r in range(1 if engine.startswith("tp") else WORLD)]
    _train(model, lambda m: sum(((m(x) - y) ** 2).mean() for x, y in batches) / len(batches))
    return {k: v.cpu() for k, v in model.state_dict().items()}


def _check(engine, tmp_path, device):
    out = str(tmp_path / f"{engine}.pt")
    mp.spawn(_worker, args=(engine, device, _free_port(), out, tga._policy._operator_everywhere), nprocs=WORLD)
    states = torch.load(out)
    got = states["fused"]
    expected = states["eager"] if "eager" in states else _one_process(engine, device)
    if engine.startswith("fsdp_bf16"):
        tol = dict(rtol=2e-2, atol=2e-2)
    else:  # fp32; on CUDA, reductions in another order than one process's
        tol = dict(rtol=1e-5, atol=1e-6) if device == "cpu" else dict(rtol=1e-4, atol=1e-5)
    assert list(got) == list(expected)
    for key, value in expected.items():
        torch.testing.assert_close(got[key], value, msg=key, **tol)


# "_gated": a fused Llama-style MLP (LinearGate and LinearUp) instead of the
# chained Linear -> activation stack.
MODELS = pytest.mark.parametrize("model", ["", "_gated"], ids=["mlp", "gated"])


@DEVICES
@MODELS
def test_fused_model_trains_under_ddp(model, device, tmp_path):
    _check("ddp" + model, tmp_path, device)


@DEVICES
@MODELS
def test_fused_model_trains_under_ddp_compiled(model, device, tmp_path):
    _check("ddp_compile" + model, tmp_path, device)


@DEVICES
@MODELS
def test_fused_model_trains_under_fully_shard(model, device, tmp_path):
    _check("fsdp" + model, tmp_path, device)


@DEVICES
@MODELS
def test_fused_model_trains_under_fully_shard_compiled(model, device, tmp_path):
    _check("fsdp_compile" + model, tmp_path, device)


@DEVICES
@MODELS
def test_fused_model_trains_under_fully_shard_in_bf16(model, device, tmp_path):
    """FSDP2's mixed precision (bf16 compute, fp32 reduction): the fused and
    the unfused model end within bf16's tolerance of each other."""
    _check("fsdp_bf16" + model, tmp_path, device)


@DEVICES
def test_fused_model_trains_under_tensor_parallelism(device, tmp_path):
    _check("tp", tmp_path, device)


@DEVICES
@MODELS
def test_tensor_parallel_plan_applies_to_the_fused_model(model, device, tmp_path):
    _check("tp_plan_after_fusion" + model, tmp_path, device)


@DEVICES
def test_linear_cross_entropy_gathers_a_vocabulary_parallel_head(device, tmp_path):
    out = str(tmp_path / "linear_ce.pt")
    mp.spawn(_worker, args=("linear_ce_vocab_parallel", device, _free_port(), out,
                            tga._policy._operator_everywhere), nprocs=WORLD)
    got = torch.load(out)
    hidden, weight, target = _linear_ce_case(device)
    hidden.requires_grad_()
    weight.requires_grad_()
    loss = torch.nn.functional.cross_entropy(hidden @ weight.t(), target, label_smoothing=0.1)
    loss.backward()
    tol = dict(rtol=1e-5, atol=1e-6) if device == "cpu" else dict(rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(got["loss"], loss.detach().cpu(), **tol)
    torch.testing.assert_close(got["hidden"], hidden.grad.cpu(), **tol)
    torch.testing.assert_close(got["weight"], weight.grad.cpu(), **tol)
