"""The fuzz's model routes (fuzz.py): MLPs fused by fuse_linear_act, the
gated operators and modules, the compile-fusion pass (its LM loss too),
linear_cross_entropy and fuse_lm_loss."""

import contextlib
import copy
import math

import torch
import torch.nn.functional as F
from torch import nn

import torch_gemm_act as tga
from torch_gemm_act.activations import GATED, _twin

from fuzz_cases import COMPILE_MODELS, RELU_FAMILY, UNIT
from fuzz_trials import Trial, _Gpt2Mlp, _comp, _conv1d_class, _dtype, _fused_everywhere, _mag, act64, build_gemm_act, \
    build_linear


def build_mlp(case, data):
    """fuse_linear_act on an MLP against the unfused model."""
    p, dev = case.p, case.device
    dtype, lead, k, h, n = _dtype(p), tuple(p["lead"]), p["k"], p["h"], p["n"]
    m = math.prod(lead)
    act, act2 = p["act"], p["act2"]
    kind = p["kind"]
    torch.manual_seed(case.data_seed % (2 ** 31))
    if kind == "sequential":
        model = nn.Sequential(nn.Linear(k, h, bias=p["bias"]), _twin(act), nn.Linear(h, n, bias=p["bias"]))
    elif kind == "three":
        model = nn.Sequential(nn.Linear(k, h, bias=p["bias"]), _twin(act), nn.Linear(h, h, bias=p["bias"]),
                              _twin(act2), nn.Linear(h, n, bias=p["bias"]))
    elif kind == "timm":  # timm's Mlp: a dropout and an identity (its norm) between the layers
        model = nn.Sequential(nn.Linear(k, h, bias=p["bias"]), _twin(act), nn.Dropout(p["dropout"] or 0.0),
                              nn.Identity(), nn.Linear(h, n, bias=p["bias"]))
    else:
        model = _Gpt2Mlp(k, h, n, _twin(act), p["dropout"])
    model = model.to(device=dev, dtype=dtype)
    with torch.no_grad():
        for prm in model.parameters():
            prm.copy_(torch.randn(prm.shape, generator=data.gen, device=dev, dtype=torch.float64)
                      * (1.0 / math.sqrt(prm.shape[-1]) if p["scaled"] else 1.0))
    fused = tga.fuse_linear_act(copy.deepcopy(model))
    x = data.input(lead, k, "contiguous", dtype)
    inputs = {"x": x}
    fused_layers = [mod for mod in fused.modules() if hasattr(mod, "weight") and mod.weight.dim() == 2]
    if "params" in p["grads"]:
        for i, mod in enumerate(fused_layers):
            inputs[f"w{i}"] = mod.weight
            if mod.bias is not None:
                inputs[f"b{i}"] = mod.bias
    else:
        for prm in fused.parameters():
            prm.requires_grad_(False)
    for prm in model.parameters():
        prm.requires_grad_(False)
    if "x" in p["grads"]:
        x.requires_grad_(True)
    acts = [act, act2] if kind == "three" else [act]
    unit = UNIT[_comp(p)]
    fused_acts = [mod for mod in fused.modules() if isinstance(mod, (tga.LinearAct, tga.Conv1DAct))
                  and mod.activation != "none"]

    def capture(modules):
        seen = []
        hooks = [mod.register_forward_hook(lambda mod, i, o: seen.append(o)) for mod in modules]
        return seen, hooks

    def ours():
        seen, hooks = capture(fused_acts)
        try:
            y = fused(inputs["x"])
        finally:
            for hk in hooks:
                hk.remove()
        return (y,), seen

    def theirs():
        mods = [mod for mod in model.modules() if type(mod) in (type(_twin(a)) for a in acts)]
        seen, hooks = capture(mods)
        # The unfused model with the fused model's parameters (the same tensors).
        params = dict(model.named_parameters())
        saved = {name: prm for name, prm in params.items()}
        try:
            for (name, _), fprm in zip(model.named_parameters(), fused.parameters()):
                _set_param(model, name, fprm)
            y = model(inputs["x"])
        finally:
            for hk in hooks:
                hk.remove()
            for name, prm in saved.items():
                _set_param(model, name, prm)
        return (y,), seen

    def ref(t64, hints):
        params = [t64.get(f"w{i}") for i in range(len(fused_layers))]
        h_ = t64["x"].reshape(m, k)
        for i, mod in enumerate(fused_layers):
            w = params[i] if params[i] is not None else mod.weight.detach().to(torch.float64)
            bias = t64.get(f"b{i}")
            if bias is None and mod.bias is not None:
                bias = mod.bias.detach().to(torch.float64)
            wt = w if isinstance(mod, tga.Conv1DAct) or type(mod).__name__ == "Conv1D" else w.t()
            z = h_ @ wt
            mag = _mag(h_, wt)
            if bias is not None:
                z, mag = z + bias, mag + bias.detach().abs()
            if i < len(acts):
                hint = hints[i] if hints is not None and i < len(hints) else None
                h_ = act64(z, mag, acts[i], 0.01, hint, unit)
            else:
                h_ = z
        return (h_.reshape(*lead, n),)

    settings = _fused_everywhere if p["path"] == "fused" else None
    return Trial(inputs, ours, theirs, ref, _comp(p), (True,), settings=settings,
                 ties=any(a in RELU_FAMILY for a in acts))


def _set_param(model, dotted, value):
    *path, name = dotted.split(".")
    mod = model
    for part in path:
        mod = getattr(mod, part)
    mod._parameters[name] = value


class _GluMlp(nn.Module):
    """timm's GluMlp: fc1 packs both projections, split by chunk."""

    def __init__(self, k, n, act, gate_index, bias):
        super().__init__()
        self.fc1 = nn.Linear(k, 2 * n, bias=bias)
        self.act = act
        self.gate_index = gate_index

    def forward(self, x):
        x = self.fc1(x)
        x1, x2 = x.chunk(2, dim=-1)
        return x1 * self.act(x2) if self.gate_index == 1 else self.act(x1) * x2


class _LlamaMlp(nn.Module):
    def __init__(self, k, n, act, bias):
        super().__init__()
        self.gate_proj = nn.Linear(k, n, bias=bias)
        self.up_proj = nn.Linear(k, n, bias=bias)
        self.act_fn = act

    def forward(self, x):
        return self.act_fn(self.gate_proj(x)) * self.up_proj(x)


def build_glu(case, data):
    """gemm_glu, gated_linear_act, GatedLinearAct (through fuse_linear_act on
    a Llama MLP) and the packed form (fuse_linear_act on timm's GluMlp)."""
    p, dev, route = case.p, case.device, case.route
    dtype, lead, k, n = _dtype(p), tuple(p["lead"]), p["k"], p["n"]
    m = math.prod(lead)
    gated = p["gated"]
    gate_act = GATED[gated]
    wscale = 1.0 / math.sqrt(k) if p["scaled"] and k > 0 else 1.0
    x = data.input(lead, k, p["x"], dtype)
    # Weights [N, K] as nn.Linear holds them.
    wg = data.matrix(n, k, p["w"], dtype, wscale)
    wu = data.matrix(n, k, p["w"], dtype, wscale)
    bg = data.randn(n, dtype=dtype) if p["bias"] else None
    bu = data.randn(n, dtype=dtype) if p["bias"] else None
    unit = UNIT[_comp(p)]
    preact = p["return_preact"]
    inputs = {"x": x}
    settings = None
    if route in ("gemm_glu", "gated_linear_act"):
        inputs.update(wg=wg, wu=wu)
        if bg is not None:
            inputs.update(bg=bg, bu=bu)

        def run():
            t = inputs
            if route == "gemm_glu":
                out = tga.gemm_glu(t["x"], t["wg"].t(), t["wu"].t(), t.get("bg"), t.get("bu"), activation=gated,
                                   return_preact=preact)
                return tuple(out) if preact else (out,)
            return (tga.gated_linear_act(t["x"], t["wg"], t["wu"], t.get("bg"), t.get("bu"), gated),)

        if p.get("sm90_kernel"):
            def settings():
                return tga.testing.override(sm90_kernel=p["sm90_kernel"])
    else:
        if route == "gated_module":
            model = _LlamaMlp(k, n, _twin(gate_act), p["bias"])
        else:
            model = _GluMlp(k, n, _twin(gate_act), p["gate_index"], p["bias"])
        model = model.to(device=dev, dtype=dtype)
        with torch.no_grad():
            if route == "gated_module":
                model.gate_proj.weight.copy_(wg)
                model.up_proj.weight.copy_(wu)
                if bg is not None:
                    model.gate_proj.bias.copy_(bg)
                    model.up_proj.bias.copy_(bu)
            else:
                halves = (wg, wu) if p["gate_index"] == 0 else (wu, wg)
                model.fc1.weight.copy_(torch.cat(halves))
                if bg is not None:
                    model.fc1.bias.copy_(torch.cat((bg, bu) if p["gate_index"] == 0 else (bu, bg)))
        model = tga.fuse_linear_act(model)
        for name, prm in model.named_parameters():
            inputs[name] = prm
        settings = _fused_everywhere

        def run():
            return (model(inputs["x"]),)

    names = [name for name in inputs if name != "x"]
    if "params" in p["grads"]:
        for name in names:
            inputs[name].requires_grad_(True)
    else:
        for name in names:
            inputs[name].requires_grad_(False)
    if "x" in p["grads"]:
        x.requires_grad_(True)

    def weights(t):
        """(wg, wu, bg, bu) from the inputs (any route's parameter names)."""
        if "wg" in t:
            return t["wg"], t["wu"], t.get("bg"), t.get("bu")
        if "gate_proj.weight" in t:
            return t["gate_proj.weight"], t["up_proj.weight"], t.get("gate_proj.bias"), t.get("up_proj.bias")
        w1, b1 = t["fc1.weight"].chunk(2), (t["fc1.bias"].chunk(2) if "fc1.bias" in t else (None, None))
        order = (0, 1) if p["gate_index"] == 0 else (1, 0)
        return w1[order[0]], w1[order[1]], b1[order[0]], b1[order[1]]

    def formula(t, act_fn):
        w_g, w_u, b_g, b_u = weights(t)
        x2 = t["x"].reshape(m, k)
        g = x2 @ w_g.t()
        u = x2 @ w_u.t()
        if b_g is not None:
            g, u = g + b_g, u + b_u
        y = (act_fn(g, x2, w_g, b_g) * u).reshape(*lead, n)
        return (y, torch.cat([g, u], -1).reshape(*lead, 2 * n)) if preact else (y,)

    def ours():
        outs = run()
        return outs, outs[0]

    def theirs():
        outs = formula(inputs, lambda g, *_: _twin(gate_act)(g))
        return outs, outs[0]

    def theirs_alt():
        # As nn.Linear computes each projection (its bias in the GEMM's epilogue).
        w_g, w_u, b_g, b_u = weights(inputs)
        g, u = F.linear(inputs["x"], w_g, b_g), F.linear(inputs["x"], w_u, b_u)
        y = _twin(gate_act)(g) * u
        outs = (y, torch.cat([g, u], -1)) if preact else (y,)
        return outs, outs[0]

    def ref(t64, hint):
        def act_fn(g, x2, w_g, b_g):
            mag = _mag(x2, w_g.t()) + (b_g.detach().abs() if b_g is not None else 0.0)
            # y = relu(g) * u is nonzero exactly where relu passed g.
            positive = (hint.detach() != 0).reshape(g.shape).to(torch.float64) if hint is not None else None
            return act64(g, mag, gate_act, 0.01, positive, unit)
        return formula(t64, act_fn)

    return Trial(inputs, ours, theirs, ref, _comp(p), (True, False) if preact else (True,), settings=settings,
                 theirs_alt=theirs_alt, ties=gate_act in RELU_FAMILY)


_COMPILED = {}


def _rows_dynamic(x):
    torch._dynamo.mark_dynamic(x, 0)
    return x


def _compile_model_layers(act, k, n, has_bias, form):
    """The compile route's model layers, as COMPILE_MODELS describes them."""
    if form == "module":
        return nn.Linear(k, n, bias=has_bias), _twin(act)
    if form == "timm":
        return nn.Linear(k, n, bias=has_bias), _twin(act), nn.Dropout(0.0), nn.Identity(), nn.Linear(n, k)
    from transformers.activations import NewGELUActivation
    from transformers.pytorch_utils import Conv1D
    assert act == "gelu_tanh" and has_bias, (act, has_bias)  # what the formula computes, Conv1D's bias
    return (nn.Linear(k, n) if form == "formula" else Conv1D(n, k)), NewGELUActivation()


def _raise_recompile_limits():
    """Dynamo's recompile limits raised for a pool of compiled functions (one
    code object each): past its limit a function would run eagerly, untested."""
    import torch._dynamo  # loaded by torch.compile, imported here before it
    config = torch._dynamo.config
    for name in ("recompile_limit", "cache_size_limit", "accumulated_recompile_limit",
                 "accumulated_cache_size_limit"):
        if hasattr(config, name):
            setattr(config, name, max(getattr(config, name), 1024))


def _pass_fuses(device):
    """On the CPU the operators wherever the pass puts them (on CUDA the
    policy as it ships): the pass's rewrites, chains included, checked there too."""
    return _fused_everywhere() if str(device) == "cpu" else contextlib.nullcontext()


def build_compile(case, data):
    """The compile-fusion pass against compiled eager, both against float64."""
    p, dev = case.p, case.device
    dtype = _dtype(p)
    act, k, n, has_bias, form = COMPILE_MODELS[p["model"]]
    key = (p["model"], p["dtype"], p["train"], p["tf32"])
    if key not in _COMPILED:
        # Every pool model is an nn.Sequential (one code object for Dynamo).
        _raise_recompile_limits()
        torch.manual_seed(p["model"])
        base = nn.Sequential(*_compile_model_layers(act, k, n, has_bias, form)).to(device=dev, dtype=dtype)
        # A formula's constants would be graph inputs with every size
        # symbolic (dynamic=True, floats unspecialized), and no formula
        # could be read: the rows alone are marked dynamic there, as
        # automatic dynamic shapes would make them.
        dynamic = True if form in ("module", "timm") else None
        tga.enable_compile_fusion(True)
        try:
            fused = torch.compile(copy.deepcopy(base), dynamic=dynamic)
            with _pass_fuses(dev):
                fused(_rows_dynamic(torch.randn(8, k, device=dev, dtype=dtype, requires_grad=p["train"])))
        finally:
            tga.enable_compile_fusion(False)
        eager = torch.compile(copy.deepcopy(base), dynamic=dynamic)
        _COMPILED[key] = (base, fused, eager)
    base, fused, eager = _COMPILED[key]
    m = p["m"]
    x = data.randn(m, k, dtype=dtype)
    if p["train"]:
        x.requires_grad_(True)
    inputs = {"x": x}
    unit = UNIT[_comp(p)]
    lin = base[0]

    def ours():
        tga.enable_compile_fusion(True)
        try:
            with _pass_fuses(dev):
                y = fused(_rows_dynamic(inputs["x"]))
        finally:
            tga.enable_compile_fusion(False)
        return (y,), y

    def theirs():
        y = eager(_rows_dynamic(inputs["x"]))
        return (y,), y

    def theirs_alt():
        y = base(inputs["x"])
        return (y,), y

    def ref(t64, hint):
        w = lin.weight.detach().double()
        b = w.t() if isinstance(lin, nn.Linear) else w  # Conv1D's weight is [K, N]
        z = t64["x"] @ b
        mag = _mag(t64["x"], b)
        if lin.bias is not None:
            z, mag = z + lin.bias.detach().double(), mag + lin.bias.detach().double().abs()
        y = act64(z, mag, act, 0.01, hint, unit)
        if form == "timm":  # the dropout and the identity pass y on to the second Linear
            second = base[-1]
            y = y @ second.weight.detach().double().t() + second.bias.detach().double()
        return (y,)

    return Trial(inputs, ours, theirs, ref, _comp(p), (True,), theirs_alt=theirs_alt, ties=act in RELU_FAMILY)


def _chunks_of_128(tokens, width, vocab, element_size):
    return 128


_FORCED_ROWS = {}


def _forced_rows(rows):
    """Rule ce_rows answering `rows` (the rows road's block; 0 the chunk
    road), one function per value (a compiled graph guards on it), and rule
    ce_eager answering no; None: the rules' own answers."""
    from unittest import mock

    from torch_gemm_act import _policy
    if rows is None:
        return contextlib.nullcontext()
    stack = contextlib.ExitStack()
    stack.enter_context(mock.patch.object(_policy, "ce_rows", _FORCED_ROWS.setdefault(rows, lambda *args: rows)))
    stack.enter_context(mock.patch.object(_policy, "ce_eager", _no_eager))
    return stack


def _no_eager(tokens, vocab, element_size):
    return False


def _head_inputs(case, data):
    """({hidden, weight[, bias]}, target) of an LM-head case: the share of
    ignored targets -100, the weight at 1/sqrt(k) where the case is scaled."""
    p, dev = case.p, case.device
    dtype, lead, k, vocab = _dtype(p), tuple(p["lead"]), p["k"], p["vocab"]
    wscale = 1.0 / math.sqrt(k) if p["scaled"] else 1.0
    h = data.randn(*lead, k, dtype=dtype)
    w = data.randn(vocab, k, dtype=dtype, scale=wscale)
    b = data.randn(vocab, dtype=dtype) if p["bias"] else None
    target = torch.randint(vocab, lead, generator=data.gen, device=dev)
    ignored = torch.rand(lead, generator=data.gen, device=dev) < p["ignored"]
    target = torch.where(ignored, -100, target)
    data.bases.append(target)
    inputs = {"hidden": h, "weight": w}
    if b is not None:
        inputs["bias"] = b
    if p["train"]:
        for t in inputs.values():
            t.requires_grad_(True)
    return inputs, target


def build_linear_ce(case, data):
    """linear_cross_entropy against F.linear + F.cross_entropy, both against float64."""
    from unittest import mock

    from torch_gemm_act import _policy

    p = case.p
    lead, vocab = tuple(p["lead"]), p["vocab"]
    inputs, target = _head_inputs(case, data)
    options = dict(reduction=p["reduction"], label_smoothing=p["smoothing"])

    def logits(h, w, b):
        z = F.linear(h, w, b)
        return p["softcap"] * torch.tanh(z / p["softcap"]) if p["softcap"] else z

    def ours():
        chunks = mock.patch.object(_policy, "ce_chunk", _chunks_of_128) if p["small_chunks"] else contextlib.nullcontext()
        with chunks, _forced_rows(p.get("rows")):
            y = tga.linear_cross_entropy(inputs["hidden"], inputs["weight"], target, inputs.get("bias"),
                                         softcap=p["softcap"], **options)
        return (y,), None

    def theirs():
        z = logits(inputs["hidden"], inputs["weight"], inputs.get("bias"))
        y = F.cross_entropy(z.reshape(-1, vocab), target.reshape(-1), **options)
        return (y.reshape(lead) if p["reduction"] == "none" else y,), None

    def ref(t64, hint):
        z = logits(t64["hidden"], t64["weight"], t64.get("bias"))
        y = F.cross_entropy(z.reshape(-1, vocab), target.reshape(-1), **options)
        return (y.reshape(lead) if p["reduction"] == "none" else y,)

    return Trial(inputs, ours, theirs, ref, _comp(p), (True,))


_LOSS_COMPILED = {}


def _lm_loss_formula(form, reduction, smoothing, softcap):
    """The compile_lm_loss route's loss, as a model writes it."""
    def loss(h, w, b, target):
        z = F.linear(h, w, b)
        if softcap:
            z = torch.tanh(z / softcap) * softcap
        if form == "upcast":
            z = z.float()
        z = z.view(-1, z.shape[-1])
        if form == "nll":
            return F.nll_loss(F.log_softmax(z, dim=-1), target.view(-1), reduction=reduction)
        return F.cross_entropy(z, target.view(-1), reduction=reduction, label_smoothing=smoothing)
    return loss


def build_compile_lm_loss(case, data):
    """The compile pass's LM loss (linear_cross_entropy) against the same loss
    in eager mode, both against float64; every compilation fuses the loss."""
    from torch._dynamo.testing import CompileCounterWithBackend

    p = case.p
    lead, vocab = tuple(p["lead"]), p["vocab"]
    options = (p["form"], p["reduction"], p["smoothing"], p["softcap"])
    key = options + (p["dtype"], p["train"], p["bias"], len(lead), p["tf32"], p.get("rows"))
    if key not in _LOSS_COMPILED:
        _raise_recompile_limits()
        counter = CompileCounterWithBackend("inductor")
        _LOSS_COMPILED[key] = (torch.compile(_lm_loss_formula(*options), backend=counter), counter)
    compiled, counter = _LOSS_COMPILED[key]
    formula = _lm_loss_formula(*options)
    inputs, target = _head_inputs(case, data)

    def shaped(y):
        return y.view(lead) if p["reduction"] == "none" else y

    def ours():
        tga.enable_compile_fusion(True, lm_loss=True)
        fusion = torch._inductor.config.pre_grad_custom_pass
        losses, frames = fusion.losses, counter.frame_count
        try:
            # Uncached, so that each compilation runs the pass and counts what it
            # fused; the options constants, as a model's config holds them (the
            # pool's functions share one code object, whose floats Dynamo would
            # otherwise make graph inputs, which the pass leaves).
            with torch._inductor.config.patch(fx_graph_cache=False), \
                    torch._functorch.config.patch(enable_autograd_cache=False), \
                    torch._dynamo.config.patch(specialize_float=True), _forced_rows(p.get("rows")):
                y = compiled(inputs["hidden"], inputs["weight"], inputs.get("bias"), target)
        finally:
            tga.enable_compile_fusion(False)
        assert fusion.losses - losses == counter.frame_count - frames, "a compilation left the loss to Inductor"
        return (shaped(y),), None

    def theirs():
        return (shaped(formula(inputs["hidden"], inputs["weight"], inputs.get("bias"), target)),), None

    def ref(t64, hint):
        z = F.linear(t64["hidden"], t64["weight"], t64.get("bias"))
        if p["softcap"]:
            z = p["softcap"] * torch.tanh(z / p["softcap"])
        y = F.cross_entropy(z.reshape(-1, vocab), target.reshape(-1), reduction=p["reduction"],
                            label_smoothing=p["smoothing"])
        return (shaped(y),)

    return Trial(inputs, ours, theirs, ref, _comp(p), (True,))


def _lm(family, k, vocab):
    """A tiny transformers model of the family, dropout off and eager
    attention (SDPA's backward need not repeat itself bit for bit)."""
    import transformers as t
    common = dict(vocab_size=vocab, attn_implementation="eager")
    if family == "gpt2":
        return t.GPT2LMHeadModel(t.GPT2Config(n_layer=2, n_embd=k, n_head=4, n_positions=64, bos_token_id=0,
                                              eos_token_id=0, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                                              **common))
    if family == "llama":
        return t.LlamaForCausalLM(t.LlamaConfig(hidden_size=k, intermediate_size=2 * k, num_hidden_layers=2,
                                                num_attention_heads=4, num_key_value_heads=2,
                                                max_position_embeddings=64, bos_token_id=0, eos_token_id=0,
                                                pad_token_id=None, **common))
    return t.BertForMaskedLM(t.BertConfig(hidden_size=k, intermediate_size=2 * k, num_hidden_layers=2,
                                          num_attention_heads=4, max_position_embeddings=64,
                                          hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, **common))


def build_lm_loss(case, data):
    """fuse_lm_loss's training loss against the same model's own forward
    (its class's, on the same parameters), both against a float64 copy."""
    from unittest import mock

    from torch_gemm_act import _policy

    p, dev = case.p, case.device
    dtype, (batch, length), k, vocab = _dtype(p), p["lead"], p["k"], p["vocab"]
    torch.manual_seed(case.data_seed % (2 ** 31))
    model = tga.fuse_lm_loss(_lm(p["family"], k, vocab).to(device=dev, dtype=dtype).train())
    causal = p["family"] != "bert"
    head = model.lm_head if causal else model.cls.predictions.decoder
    if not p["scaled"]:
        with torch.no_grad():  # unscaled logits: the head (tied to the embedding in GPT-2 and BERT) at unit scale
            head.weight.copy_(data.randn(*head.weight.shape, dtype=dtype))
    ids = torch.randint(vocab, (batch, length), generator=data.gen, device=dev)
    labelled = torch.rand(ids.shape, generator=data.gen, device=dev) < p["labelled"]
    labels = torch.where(labelled, ids, -100)
    data.bases += [ids, labels]
    kwargs = dict(input_ids=ids, labels=labels)
    if p["num_items"]:
        kwargs["num_items_in_batch"] = torch.tensor(1 + int(labelled.sum()), device=dev)
    checked = {"head": head.weight}
    if not causal:
        checked["transform"] = model.cls.predictions.transform.dense.weight
    base = [prm for prm in model.base_model.parameters() if prm.dim() == 2]
    checked["base"] = base[-1]  # the last block's last matrix
    inputs = dict(checked)

    def chunks():
        return mock.patch.object(_policy, "ce_chunk", _chunks_of_128) if p["small_chunks"] else contextlib.nullcontext()

    def ours():
        with chunks(), _forced_rows(p.get("rows")):
            out = model(**kwargs)
        assert out.logits is None
        return (out.loss,), None

    def theirs():
        return (type(model).forward(model, **kwargs).loss,), None

    def ref(t64, hint):
        # The loss's formula in float64 (the model's own forward computes a
        # causal LM's loss from fp32 logits, whatever the model's dtype).
        m64 = copy.deepcopy(model).to(torch.float64)
        for name, prm in checked.items():
            _replace_everywhere(m64, _find(model, m64, prm), t64[name])
        hidden = m64.base_model(input_ids=ids)[0]
        if not causal:
            return (F.cross_entropy(m64.cls(hidden).flatten(0, 1), labels.flatten()),)
        target = F.pad(labels, (0, 1), value=-100)[:, 1:].flatten()
        logits = m64.lm_head(hidden).flatten(0, 1)
        if p["num_items"]:
            return (F.cross_entropy(logits, target, reduction="sum") / kwargs["num_items_in_batch"],)
        return (F.cross_entropy(logits, target),)

    return Trial(inputs, ours, theirs, ref, _comp(p), (True,))


def _find(model, copied, prm):
    """copied's parameter at prm's place in model."""
    names = dict(model.named_parameters())
    name = next(n for n, q in names.items() if q is prm)
    return dict(copied.named_parameters())[name]


def _replace_everywhere(model, old, new):
    """new for old at every place it is held (tied weights among them)."""
    for mod in model.modules():
        for name, prm in list(mod._parameters.items()):
            if prm is old:
                mod._parameters[name] = new


class _ResidualOut(nn.Module):
    """A residual output as BERT's: r + dropout(proj(x)), either operand order."""

    def __init__(self, proj, p, branch_first):
        super().__init__()
        self.proj, self.drop, self.branch_first = proj, nn.Dropout(p), branch_first

    def forward(self, x, residual):
        branch = self.drop(self.proj(x))
        return branch + residual if self.branch_first else residual + branch


def _fused_residual_out(inputs, p, dev):
    """fuse_linear_act's ResidualOutput of a _ResidualOut whose projection
    holds the case's weight and bias (the tensors themselves)."""
    k, n = p["k"], p["n"]
    conv = p["entry"] == "conv1d_module"
    proj = _conv1d_class()(n, k) if conv else nn.Linear(k, n, bias=p["bias"])
    proj._parameters["weight"] = inputs["weight"]
    proj._parameters["bias"] = inputs.get("bias") if p["bias"] else None
    parent = nn.Sequential(_ResidualOut(proj, p["dropout"], p["branch_first"])).train(p["training"])
    fused = tga.fuse_linear_act(parent)[0]
    if type(fused).__name__ != "ResidualOutput":
        raise AssertionError(f"fuse_linear_act left the residual output as {type(fused).__name__}")
    return fused


def build_dropout_add(case, data):
    """linear_dropout_add / gemm_dropout_add / a fused residual output
    against PyTorch's r + F.linear(x, w, b) * mask with the same mask
    (dropout.h's, read from dropout_scale on the CPU), both against float64."""
    p, dev = case.p, case.device
    dtype, lead, k, n = _dtype(p), tuple(p["lead"]), p["k"], p["n"]
    m = math.prod(lead)
    wscale = 1.0 / math.sqrt(k) if p["scaled"] and k > 0 else 1.0
    conv = p["entry"] in ("conv1d", "conv1d_module")
    if p["entry"] == "conv1d_module" and (_conv1d_class() is None or k == 0):
        # transformers absent, or K = 0, which Conv1D's own view cannot take: the module holds a Linear.
        conv, p["entry"] = False, "module"
    x = data.input(lead, k, p["x"], dtype)
    w = data.matrix(k, n, p["w"], dtype, wscale) if conv else data.matrix(n, k, p["w"], dtype, wscale)
    r = data.input(lead, n, p["residual"], dtype)
    inputs = {"x": x, "weight": w, "residual": r}
    if p["bias"] or p["entry"] == "conv1d_module":  # Conv1D always has a bias
        p["bias"] = True
        inputs["bias"] = data.randn(n, dtype=dtype)
    for name in p["grads"]:
        if name in inputs:
            inputs[name].requires_grad_(True)
    drop = p["dropout"] if p["training"] else 0.0
    module = _fused_residual_out(inputs, p, dev) if p["entry"].endswith("module") else None

    def seeded():
        torch.manual_seed(p["mask_seed"])

    seeded()
    seed = torch.randint(-2 ** 63, 2 ** 63 - 1, (), dtype=torch.int64, device=dev)
    # The factors (0 or 2^32 / T) the kernels draw; all ones without dropout.
    mask64 = torch.ops.gemm_act.dropout_scale(torch.ones(m, n, dtype=torch.float64), drop, seed.cpu()) \
        if drop > 0 else torch.ones(m, n, dtype=torch.float64)
    mask64 = mask64.reshape(*lead, n).to(dev)

    def ours():
        seeded()
        if module is not None:
            y = module(x=inputs["x"], residual=inputs["residual"]) if p["keywords"] else \
                module(inputs["x"], inputs["residual"])
        elif conv:
            sd = torch.randint(-2 ** 63, 2 ** 63 - 1, (), dtype=torch.int64, device=dev) if drop > 0 else \
                torch.zeros((), dtype=torch.int64, device=dev)
            y = torch.ops.gemm_act.gemm_dropout_add(inputs["x"], inputs["weight"], inputs.get("bias"),
                                                    inputs["residual"], drop, sd)
        else:
            y = tga.linear_dropout_add(inputs["x"], inputs["weight"], inputs.get("bias"), inputs["residual"],
                                       p["dropout"], p["training"])
        return (y,), None

    def linear(t):
        return t["x"] @ t["weight"] + (t["bias"] if "bias" in t else 0.0) if conv else \
            F.linear(t["x"], t["weight"], t.get("bias"))

    def theirs():
        z = linear(inputs)
        return (inputs["residual"] + z * mask64.to(z.dtype),), None

    def ref(t64, hint):
        return (t64["residual"] + linear(t64) * mask64,)

    # A module with dropout on takes the operator everywhere (its mask is this
    # project's; on the CPU and host-bound it would run PyTorch's dropout).
    everywhere = module is not None and drop > 0
    forced = p.get("sm90_kernel")
    settings = None
    if forced or everywhere:
        settings = lambda: tga.testing.override(sm90_kernel=forced, operator_everywhere=everywhere or None)  # noqa: E731
    return Trial(inputs, ours, theirs, ref, _comp(p), (True,), settings=settings)


BUILDERS = {"gemm_act": build_gemm_act, "linear_act": build_linear, "linear_module": build_linear,
            "conv1d": build_linear, "fuse_mlp": build_mlp, "gemm_glu": build_glu, "gated_linear_act": build_glu,
            "gated_module": build_glu, "packed_glu": build_glu, "compile": build_compile,
            "linear_cross_entropy": build_linear_ce, "fuse_lm_loss": build_lm_loss,
            "compile_lm_loss": build_compile_lm_loss, "linear_dropout_add": build_dropout_add}

# --------------------------------------------------------------------------
# Running and checking a trial
