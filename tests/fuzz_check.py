"""The fuzz's checks (fuzz.py): one case run against its references, the
invariants, and the line that replays a failure."""

import contextlib
import math
import random

import torch

from torch_gemm_act import _C, testing

from fuzz_cases import CUDA_BACKENDS, FLOOR, INT_VIEW
from fuzz_trials import Data, _amp, _settings
from fuzz_models import BUILDERS


def _storages(t):
    if t is None or not isinstance(t, torch.Tensor) or t.numel() == 0:
        return None
    s = t.untyped_storage()
    return (s.data_ptr(), s.data_ptr() + s.nbytes())


def _overlaps(x, y):
    return x is not None and y is not None and x[0] < y[1] and y[0] < x[1]


def _bits(t):
    t = t.detach()
    return t.view(INT_VIEW[t.dtype]).clone() if t.dtype in INT_VIEW else t.clone()


def _err_parts(got, ref):
    """(max |got - ref|, max |ref|) over the elements where both are finite,
    as 0-d float64 tensors on their device."""
    got, ref = got.detach().to(torch.float64), ref.detach().to(torch.float64)
    if ref.numel() == 0:
        return ref.new_zeros(()), ref.new_zeros(())
    finite = torch.isfinite(got) & torch.isfinite(ref)
    return torch.where(finite, got - ref, 0.0).abs().max(), torch.where(finite, ref, 0.0).abs().max()


def _nonfinite_pattern(t):
    """NaN, +Inf and -Inf positions, as one tensor of codes."""
    t = t.detach()
    return torch.where(torch.isnan(t), 1, 0) + torch.where(t == math.inf, 2, 0) + torch.where(t == -math.inf, 3, 0)


class Failure(Exception):
    pass


def _grads(outs, wrt, gouts, want):
    pairs = [(o, g) for o, g, w in zip(outs, gouts, want) if w and o is not None and o.requires_grad]
    if not pairs or not wrt:
        return [None] * len(wrt)
    return list(torch.autograd.grad([o for o, _ in pairs], wrt, [g for _, g in pairs], allow_unused=True))


def run_case(case, determinism=True):
    """Runs one case; raises Failure with what went wrong, else returns
    (name, our error, PyTorch's) for each output and gradient compared."""
    p, dev = case.p, case.device
    data = Data(case.data_seed, dev)
    trial = BUILDERS[case.route](case, data)
    settings = trial.settings() if trial.settings else contextlib.nullcontext()
    with settings, _settings(p, dev):
        return _check(case, data, trial, determinism)


def _check(case, data, trial, determinism):
    """Runs the trial's three sides and checks them; the device's scalars are
    read back at once (a read per check would wait on the GPU each time)."""
    p, dev = case.p, case.device
    wrt_names = [name for name, t in trial.inputs.items() if t.requires_grad]
    wrt = [trial.inputs[name] for name in wrt_names]
    in_storages = [_storages(t) for t in data.bases]
    # Inputs are views of the case's storages, but for modules' own parameters.
    held = data.bases + [t for t in trial.inputs.values() if not any(_overlaps(_storages(t), s) for s in in_storages)]
    snapshot = [(t, _bits(t)) for t in held]
    in_storages = [_storages(t) for t in held]

    def call(fn):
        with _amp(p, dev):
            return fn()

    outs, hint = call(trial.ours)
    gouts = [data.randn(*o.shape, dtype=o.dtype) if want else None for o, want in zip(outs, trial.grad_outputs)]
    given = [g for g in gouts if g is not None]
    gsnap = [_bits(g) for g in given]
    grads = _grads(outs, wrt, gouts, trial.grad_outputs)
    problems = []  # found on the host
    flags = []     # (what is wrong if the device's 0-d bool is false, the bool)
    flags.append(("an input was modified", torch.stack([(_bits(t) == b).all() for t, b in snapshot]).all()))
    if given:
        flags.append(("an incoming gradient was modified",
                      torch.stack([(_bits(g) == b).all() for g, b in zip(given, gsnap)]).all()))
    for i, o in enumerate(list(outs) + [g for g in grads if g is not None]):
        if any(_overlaps(_storages(o), s) for s in in_storages):
            problems.append(f"output {i} aliases an input")
    if determinism:
        outs2, _ = call(trial.ours)
        grads2 = _grads(outs2, wrt, gouts, trial.grad_outputs)
        for name, x, y in zip([f"out{i}" for i in range(len(outs))] + wrt_names, list(outs) + grads,
                              list(outs2) + grads2):
            if (x is None) != (y is None) or (x is not None and (x.shape != y.shape or x.dtype != y.dtype)):
                problems.append(f"{name}: a second identical call differs")
            elif x is not None:
                flags.append((f"{name}: a second identical call differs", (_bits(x) == _bits(y)).all()))

    def pytorch(fn):
        touts, thint = call(fn)
        tgouts = [None if g is None else g.to(t.dtype) for g, t in zip(gouts, touts)]
        return list(touts) + _grads(touts, wrt, tgouts, trial.grad_outputs), thint

    theirs, thint = pytorch(trial.theirs)
    # Float64 references, the ties following each side's own.
    t64 = {name: t.detach().to(torch.float64).requires_grad_(t.requires_grad) for name, t in trial.inputs.items()}
    wrt64 = [t64[name] for name in wrt_names]
    g64 = [None if g is None else g.to(torch.float64) for g in gouts]

    def reference(h):
        r = trial.ref(t64, h)
        return [o.detach() for o in r] + _grads(r, wrt64, g64, trial.grad_outputs)
    ref = reference(hint)
    tref = reference(thint) if trial.ties else ref

    names = [f"out{i}" for i in range(len(outs))] + [f"grad_{n}" for n in wrt_names]
    ours = list(outs) + grads
    compared = []  # (name, ours, reference, PyTorch's, its reference)
    for i, (name, o, t) in enumerate(zip(names, ours, theirs)):
        r, tr = ref[i], tref[i]
        if r is None:
            # The reference does not read this input (C at beta = 0): its gradient is zero.
            r = tr = torch.zeros(trial.inputs[name[5:]].shape, dtype=torch.float64, device=dev)
        if o is not None:
            if tuple(o.shape) != tuple(r.shape):
                problems.append(f"{name}: shape {tuple(o.shape)}, expected {tuple(r.shape)}")
                continue
            expected = trial.inputs[name[5:]].dtype if name.startswith("grad_") else (
                t.dtype if not p.get("amp") else o.dtype)
            if o.dtype != expected:
                problems.append(f"{name}: dtype {o.dtype}, expected {expected}")
        o = torch.zeros_like(r) if o is None else o
        t = torch.zeros_like(r) if t is None else t
        if p.get("special") is None:
            flags.append((f"{name}: non-finite values where PyTorch's has none",
                          torch.isfinite(o).all() | ~torch.isfinite(t).all()))
        elif not name.startswith("grad_"):
            # Each element's NaN/Inf as PyTorch's in the same dtype or as float64's
            # rounded to it (PyTorch's fp32/bf16 CPU GELU in its AVX-512 loop gives NaN for +inf).
            pattern = _nonfinite_pattern(o)
            flags.append((f"{name}: NaN/Inf not where PyTorch's are",
                          ((pattern == _nonfinite_pattern(t.to(o.dtype))) |
                           (pattern == _nonfinite_pattern(r.to(o.dtype)))).all()))
        else:
            flags.append((f"{name}: non-finite not where PyTorch's gradient is",
                          (torch.isfinite(o) == torch.isfinite(t)).all()))
        compared.append((i, name, o, r, t, tr))
    scalars = [f for _, f in flags] + [x for _, _, o, r, t, tr in compared
                                       for x in (*_err_parts(o, r), *_err_parts(t, tr))]
    values = torch.stack([x.to(device=dev, dtype=torch.float64) for x in scalars]).tolist() if scalars else []
    problems += [what for (what, _), ok in zip(flags, values) if not ok]
    errors = values[len(flags):]
    floor = FLOOR[trial.comp]
    ours_err = [_ratio(*errors[4 * j:4 * j + 2]) for j in range(len(compared))]
    pt_err = [_ratio(*errors[4 * j + 2:4 * j + 4]) for j in range(len(compared))]
    over = [j for j, (e, e_pt) in enumerate(zip(ours_err, pt_err)) if not e <= max(3.0 * e_pt, floor)]
    # PyTorch's own error is the larger of its two natural formulations' (one
    # rounding more or less in the pre-activation; under autocast, the bias
    # added in fp32 by type promotion or in autocast's dtype by F.linear): the
    # other one is measured where ours is over the bar, and always under
    # autocast, where the two differ in every case (the run's medians, Precision).
    other = list(range(len(compared))) if p.get("amp") else over
    if other and trial.theirs_alt is not None:
        alt, ahint = pytorch(trial.theirs_alt)
        aref = reference(ahint) if trial.ties else ref
        parts = [x for j in other for x in _err_parts(_or_zeros(alt[compared[j][0]], compared[j][3]),
                                                      _or_zeros(aref[compared[j][0]], compared[j][3]))]
        alt_values = torch.stack(parts).tolist()
        for i, j in enumerate(other):
            pt_err[j] = max(pt_err[j], _ratio(alt_values[2 * i], alt_values[2 * i + 1]))
    for j in over:
        name, e, bar = compared[j][1], ours_err[j], max(3.0 * pt_err[j], floor)
        if not e <= bar:
            problems.append(f"{name}: error {e:.3g} against PyTorch's {pt_err[j]:.3g} (bar {bar:.3g})")
            if VERBOSE:
                problems.append(_worst(*compared[j][2:]))
    if problems:
        raise Failure("; ".join(problems))
    return [(name, ours_err[j], pt_err[j]) for j, (_, name, *_rest) in enumerate(compared)]


VERBOSE = False  # replay: the element each failing comparison is worst at


def _worst(o, r, t, tr):
    """Where |ours - reference| is largest, with PyTorch's and the magnitudes."""
    diff = (o.detach().double() - r).abs().nan_to_num(nan=math.inf)
    i = int(diff.reshape(-1).argmax())
    at = lambda x: float(x.detach().double().reshape(-1)[i])  # noqa: E731
    return (f"[worst at flat index {i} of {tuple(o.shape)}: ours {at(o):.6g}, float64 {at(r):.6g}, "
            f"PyTorch's {at(t):.6g} (its float64 {at(tr):.6g}); max |float64| {float(r.abs().max()):.4g}]")


def _or_zeros(t, like):
    return torch.zeros_like(like) if t is None else t


def _ratio(diff, scale):
    return diff / scale if scale > 0 else diff


# --------------------------------------------------------------------------
# Command line


def _backend_context(backend):
    if backend == "tuned":
        return _tuned_choices_cleared()
    if backend in CUDA_BACKENDS:
        return testing.override(cuda_backend="" if backend == "rule" else backend)
    return contextlib.nullcontext()


@contextlib.contextmanager
def _tuned_choices_cleared():
    """The rule (the testing switch's backend unset), no tuned choice before
    or after."""
    with testing.override(cuda_backend=""):
        _C.set_tuned_choices({})
        try:
            yield
        finally:
            _C.set_tuned_choices({})


def draw_tuned_choices(case):
    """For backend "tuned": runs the case once while its problems are noted,
    then gives each a tuned choice drawn from the case's seed (a redraw's
    data meets the same problems): a backend of the build, or any gemm_act
    configuration of its families, those that cannot run the problem too
    (the family's heuristic then takes it)."""
    _C.start_recording()
    try:
        _fails(case)  # only the problems it meets are wanted
    finally:
        keys = _C.stop_recording()
    rng = random.Random(case.seed)
    names = [*_C.cuda_backends(), *sorted({f"{k['family']}:{k['name']}" for k in testing.kernels()})]
    _C.set_tuned_choices({key: rng.choice(names) for key in keys})


def replay_line(case, backend):
    return f"python tests/fuzz.py --route {case.route} --backend {backend} --replay {case.seed}"


# A failure is confirmed when at least CONFIRM of REDRAWS fresh draws of the
# same case's data (its shapes, layouts, dtype, activation and terms kept)
# fail too. One that does not is reported apart: an error that exceeded the
# bar once, in a sum that cancels (a bias gradient of a few rows, a
# saturated tanh), where PyTorch's own error is as much chance as ours.
REDRAWS, CONFIRM = 3, 2


def _fails(case):
    try:
        run_case(case, determinism=False)
    except Exception:  # noqa: BLE001 - any failure
        return True
    return False


# --------------------------------------------------------------------------
# Precision over a run: a road that rounds once more than PyTorch's (a bias
# added after the product's rounding, say) stays within the per-case bar
# (3 x PyTorch's error) and shows only as a shift of every case's error.


class Precision:
    """Our error over PyTorch's, per precision and output (``out0``,
    ``grad_weight``...), over the passing cases of a run: the median of
    log2(ours / PyTorch's), each case's clamped to [-4, 4] (our error of 0
    counts as 1/16 of PyTorch's), over the cases where PyTorch's is not 0."""

    def __init__(self):
        self.logs = {}

    @staticmethod
    def key(case, name):
        p = case.p
        label = p["dtype"] + ("+tf32" if p.get("tf32") and p["dtype"] == "float32" else "") + \
            (f"+autocast:{p['amp']}" if p.get("amp") else "")
        return label, name

    def add(self, case, errors):
        for name, e, e_pt in errors:
            if not (math.isfinite(e) and math.isfinite(e_pt)) or e_pt <= 0:
                continue  # PyTorch's exact (float64's composite is the reference): nothing to compare with
            ratio = math.log2(max(e, e_pt / 16) / max(e_pt, e / 16))
            self.logs.setdefault(self.key(case, name), []).append(ratio)

    def medians(self, least=1):
        """{(precision, output): (median ratio, cases)} over groups of at least `least` cases."""
        out = {}
        for key, logs in self.logs.items():
            if len(logs) >= least:
                logs = sorted(logs)
                out[key] = (2.0 ** logs[len(logs) // 2], len(logs))
        return out
