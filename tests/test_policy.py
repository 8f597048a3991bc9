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


def test_the_rules_table_declares_each_number_once():
    """Every rule has a place and a text whose braces name declared numbers;
    each number is an integer declared by one rule; the predicates' module
    lists exactly the Python-side rules."""
    from torch_gemm_act import _rules
    places = {"python", "both", "sm90", "cuda"}
    for name, (where, text, numbers) in _rules.RULES.items():
        assert where in places and isinstance(text, str), name
        assert all(isinstance(v, int) and not isinstance(v, bool) for v in numbers.values()), name
        assert "{" not in _rules.says(name), name
    counted = sum(len(numbers) for _, _, numbers in _rules.RULES.values())
    assert len(_rules.NUMBERS) == counted
    assert set(_policy.RULES) == {n for n, (w, _, _) in _rules.RULES.items() if w in ("python", "both")}
    assert _policy.HOST_BOUND_MULTIPLY_ADDS == 1 << _rules.NUMBERS["HOST_BOUND_MULTIPLY_ADDS_LOG2"]


def test_the_cpp_header_carries_every_number_and_text():
    from torch_gemm_act import _rules
    header = _rules.cpp_header()
    for name, (where, _, numbers) in _rules.RULES.items():
        if where == "python":
            assert f"// {name}:" not in header, name
            continue
        assert f'constexpr const char* {_rules.cpp_name(name)}Says = "{_rules.says(name)}";' in header, name
        for key, value in numbers.items():
            assert f"constexpr int64_t {_rules.cpp_name(key)} = {value};" in header, key
