"""How the operators compute on DTensors (tensor parallelism) without
gathering: the sharding strategies DTensor chooses from, registered with
torch.distributed.tensor's register_sharding the first time gemm_act sees a
DTensor (importing torch.distributed.tensor costs about a second, which a
user without it should not pay).

gemm_act: everything replicated; column parallel (b, a bias per column and
C sharded over N, Y and Z over their last dimension: the activation applies
locally); batch parallel (a, C, Y and Z sharded over the first dimension, b
replicated); and, without an activation, row parallel (a sharded over K, b
over its rows: each shard's product is a partial sum, and so are the bias
and C it adds, which DTensor divides among the shards). An activation of a
K-sharded partial sum has no local form: DTensor redistributes to one of
the others first. activation_backward follows
its inputs elementwise; its bias gradient is sharded with the columns, or a
partial sum across batch shards.
"""

import torch

from .activations import IDENTITY

__all__ = []  # sharding strategies, registered on import

try:
    from torch.distributed.tensor import Partial, Replicate, Shard
    from torch.distributed.tensor.experimental import register_sharding
except ImportError:  # a torch built without distributed: nothing to register
    register_sharding = None


def _optional(tensor, placement):
    return None if tensor is None else placement


def _column_bias(bias):
    # A bias per column ((N,) or (1, N)) shards with the columns; a scalar
    # bias is replicated; a bias per row does not go with column sharding.
    if bias is None:
        return None, True
    if bias.ndim == 1 and bias.shape[0] != 1:
        return Shard(0), True
    if bias.ndim == 2 and bias.shape[0] == 1 and bias.shape[1] != 1:
        return Shard(1), True
    return Replicate(), bias.numel() == 1


def _gemm_act_strategies(a, b, bias, c, activation, alpha, beta, negative_slope, store_preact):
    last = a.ndim - 1
    z = (lambda p: p) if store_preact else (lambda p: Replicate())  # an empty Z is replicated
    rest = [None] * 5
    strategies = [([Replicate(), Replicate()],
                   [Replicate(), Replicate(), _optional(bias, Replicate()), _optional(c, Replicate()), *rest])]
    bias_placement, column_ok = _column_bias(bias)
    if column_ok:
        strategies.append(([Shard(last), z(Shard(last))],
                           [Replicate(), Shard(1), bias_placement, _optional(c, Shard(last)), *rest]))
    if a.ndim >= 2 and (bias is None or bias.ndim <= 1 or bias.shape[0] == 1):
        strategies.append(([Shard(0), z(Shard(0))],
                           [Shard(0), Replicate(), _optional(bias, Replicate()), _optional(c, Shard(0)), *rest]))
    if activation == IDENTITY:
        strategies.append(([Partial(), z(Partial())],
                           [Shard(last), Shard(0), _optional(bias, Partial()), _optional(c, Partial()), *rest]))
    return strategies


def _activation_backward_strategies(grad_y, saved, bias, activation, negative_slope):
    last = grad_y.ndim - 1
    rest = [None, None]
    strategies = [([Replicate(), Replicate()], [Replicate(), Replicate(), _optional(bias, Replicate()), *rest])]
    bias_placement, column_ok = _column_bias(bias)
    if column_ok and bias_placement != Replicate():
        grad_bias = Replicate() if bias is None else bias_placement
        strategies.append(([Shard(last), grad_bias], [Shard(last), Shard(last), bias_placement, *rest]))
    if grad_y.ndim >= 2 and (bias is None or bias.ndim <= 1 or bias.shape[0] == 1):
        grad_bias = Replicate() if bias is None else Partial()  # each batch shard's sum
        strategies.append(([Shard(0), grad_bias], [Shard(0), Shard(0), _optional(bias, Replicate()), *rest]))
    return strategies


if register_sharding is not None:
    register_sharding(torch.ops.gemm_act.gemm_act.default)(_gemm_act_strategies)
    register_sharding(torch.ops.gemm_act.activation_backward.default)(_activation_backward_strategies)
