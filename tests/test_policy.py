"""torch_gemm_act._policy: every Python-side rule named once, and the
testing switch that turns the module rules off."""

import pytest
import torch

import torch_gemm_act as tga
from torch_gemm_act import _policy


def test_every_rule_is_a_function_of_the_policy_module():
    # own_node is the modules' (it needs the module); every other rule is a function here.
    for name in _policy.RULES:
        assert name == "own_node" or callable(getattr(_policy, name, None)), name
    assert _policy.NODE_ACTIVATIONS == {"relu", "leaky_relu", "tanh", "sigmoid"}


def test_cpu_layers_run_atens_ops_unless_switched_off():
    x = torch.randn(4, 8)
    assert _policy.cpu_atens(x) and _policy.runs_atens_ops(x, 16) and not _policy.host_bound(x, 16)
    with tga.testing.override(operator_everywhere=True):
        assert not _policy.cpu_atens(x) and not _policy.runs_atens_ops(x, 16)
        with tga.testing.override(operator_everywhere=False):
            assert _policy.cpu_atens(x)
        assert not _policy.cpu_atens(x)
    assert _policy.cpu_atens(x)


def test_the_switch_is_restored_after_an_error():
    with pytest.raises(RuntimeError, match="inside"):
        with tga.testing.override(operator_everywhere=True):
            raise RuntimeError("inside")
    assert not _policy._operator_everywhere


def test_links_only_where_the_derivative_needs_z():
    assert {a for a in tga.ACTIVATIONS if _policy.links(a)} == {"gelu", "gelu_tanh", "silu"}
    x = torch.randn(2, 3)
    assert _policy.chains(x, "relu")  # on the CPU every linked layer chains (the numerics are tested there)
