"""torch_gemm_act.tune: the CUDA backend for each GEMM a model runs, timed on
the GPU at hand and kept in a cache on disk.

The dispatch rule was measured only on the GPUs the README names; elsewhere
it runs the library backend (eager's own cuBLAS calls). ``tune`` runs the
model once, notes each problem its gemm_act calls meet (dtype, activation,
M, N, K, layouts, alignment, bias, C, Z: csrc/tuned_choices.h), times every
CUDA backend of the build and every configuration of its tensor-core
families that fits the problem, on fresh operands of that problem, beside
the rule's own choice and beside eager's ops, and keeps a backend or
configuration where it beat the rule's choice by more than the margin of
rule ``tuned``, or at all where that choice was slower than eager's ops by
the margin (_policy.tuned). The choices go into the dispatch rule for
the rest of the process and into the cache, keyed by the GPU, its driver,
PyTorch and this build; a later ``tune`` of a model meeting the same
problems, in any process, reads them instead of timing again.
"""

import hashlib
import json
import os
import random
import re
import statistics
import tempfile
import warnings
from dataclasses import dataclass, field

import torch

from . import _C, _policy
from . import testing as _testing
from .activations import _shared_twin

__all__ = ["tune", "TuneReport"]

# The environment variable naming the cache file, and the file where it is unset.
CACHE_ENV = "TORCH_GEMM_ACT_TUNE_CACHE"
DEFAULT_CACHE = os.path.join(os.path.expanduser("~"), ".cache", "torch_gemm_act", "tuned.json")
# What a cache entry says where the rule's own choice was kept.
RULE = "rule"
_FORMAT = 1

_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32, "fp64": torch.float64}
_KEY = re.compile(r"(?P<dtype>\w+) (?P<activation>\w+) m=(?P<m>\d+) n=(?P<n>\d+) k=(?P<k>\d+) a=(?P<a>\w+) "
                  r"b=(?P<b>\w+) bias=(?P<bias>\w+) c=(?P<c>[01]) z=(?P<z>[01]) aligned=(?P<aligned>[01])"
                  r"(?: tf32=(?P<tf32>[01]))?$")


@dataclass
class TuneReport:
    """What ``tune`` found: for each problem (its key), the entry kept
    (``backend``: a backend's name, "family:configuration", or "rule";
    ``us``: median microseconds of the rule's choice, each candidate and
    eager's ops; ``cached``: read
    from the cache rather than timed)."""

    device: str
    cache: str
    problems: dict = field(default_factory=dict)

    @property
    def timed(self):
        return sum(not entry["cached"] for entry in self.problems.values())

    @property
    def cached(self):
        return sum(entry["cached"] for entry in self.problems.values())

    @property
    def slower_than_eager(self):
        """The problems whose kept choice was timed slower than eager's ops
        (addmm and the activation): none of this build's backends beat them there."""
        return [key for key, entry in self.problems.items()
                if entry["us"].get(entry["backend"], float("inf")) > entry["us"].get("eager", float("inf"))]

    def __str__(self):
        lines = [f"{self.device}: {len(self.problems)} problems, {self.timed} timed, {self.cached} from {self.cache}"]
        slower = set(self.slower_than_eager)
        for key, entry in self.problems.items():
            times = ", ".join(f"{name} {us:.1f}" for name, us in entry["us"].items())
            lines.append(f"  {key}: {entry['backend']} ({times} us){' slower than eager' if key in slower else ''}")
        return "\n".join(lines)


def tune(model, *example_inputs, cache=None, rounds=5, **example_kwargs):
    """Runs ``model(*example_inputs, **example_kwargs)`` once, then chooses
    the CUDA backend of each gemm_act problem it met (timing those the cache
    lacks) and applies the choices to later calls in this process; returns a
    :class:`TuneReport`.

    Run it as the model will run: in training the forward stores Z, without
    grad it does not, and those are different problems. ``cache``: a JSON
    file (default: ``$TORCH_GEMM_ACT_TUNE_CACHE``, else
    ``~/.cache/torch_gemm_act/tuned.json``). ``rounds``: rounds of timing,
    the candidates taking turns in an order drawn per round. The choices
    apply to every GPU of the process: tune on the GPU (the current device)
    the model runs on. Not during CUDA graph capture, nor with the testing
    switch forcing a backend."""
    if not isinstance(rounds, int) or rounds < 1:
        raise ValueError(f"torch_gemm_act.tune: rounds must be a positive int, got {rounds!r}")
    forced = _C.testing_overrides()[0]
    if forced:
        raise RuntimeError(f"torch_gemm_act.tune: the testing switch forces the CUDA backend {forced!r} "
                           "(TORCH_GEMM_ACT_BACKEND or testing.override), which tuned choices cannot override; "
                           "unset it first")
    if not torch.cuda.is_available():
        raise RuntimeError("torch_gemm_act.tune: needs a CUDA GPU (the CPU has one backend), found none")
    if torch.cuda.is_current_stream_capturing():
        raise RuntimeError("torch_gemm_act.tune: not during CUDA graph capture (it times kernels); "
                           "tune before capturing")
    path = cache if cache is not None else os.environ.get(CACHE_ENV, DEFAULT_CACHE)

    _C.start_recording()
    try:
        model(*example_inputs, **example_kwargs)
    finally:
        keys = _C.stop_recording()

    if not keys:
        warnings.warn("torch_gemm_act.tune: the model ran no CUDA gemm_act call, so there is nothing to tune "
                      "(a fused module's layer below rule host_bound runs ATen's ops; an unfused model runs none)",
                      stacklevel=2)
    device = signature()
    entries = _load(path).get(device, {})
    report = TuneReport(device, path)
    fresh = {}
    for key in keys:
        if key in entries:
            report.problems[key] = {**entries[key], "cached": True}
            continue
        entry = _time_problem(key, rounds, torch.device("cuda", torch.cuda.current_device()))
        if entry is not None:
            fresh[key] = entry
            report.problems[key] = {**entry, "cached": False}
    if fresh:
        entries = _store(path, device, fresh)
    _apply(entries)
    return report


def signature(device=None):
    """The cache's key for the GPU at hand: its name and compute capability,
    the driver, PyTorch and this build of the extension."""
    index = torch.cuda.current_device() if device is None else torch.cuda._utils._get_device_index(device)
    props = torch.cuda.get_device_properties(index)
    return (f"{props.name} sm_{props.major}{props.minor}, driver {_C.cuda_driver_version()}, "
            f"torch {torch.__version__}, build {_build_id()}")


_BUILD_ID = []


def _build_id():
    """A digest of the extension's binary: choices are this build's kernels'."""
    if not _BUILD_ID:
        digest = hashlib.sha256()
        with open(_C.__file__, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
        _BUILD_ID.append(digest.hexdigest()[:16])
    return _BUILD_ID[0]


def _load(path):
    """The cache's {signature: {problem key: entry}}; empty where there is no
    file yet. A file that is not this format's is an error, not overwritten."""
    try:
        with open(path) as f:
            data = json.load(f)
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as e:
        raise RuntimeError(f"torch_gemm_act.tune: cannot read the cache {path}: {e}") from e
    if not isinstance(data, dict) or data.get("format") != _FORMAT or not isinstance(data.get("devices"), dict):
        raise RuntimeError(f"torch_gemm_act.tune: {path} is not a tuning cache of format {_FORMAT} "
                           f"(found {type(data).__name__} with format {data.get('format') if isinstance(data, dict) else None!r}); "
                           f"name another file (cache= or ${CACHE_ENV}) or remove it")
    return data["devices"]


def _store(path, device, fresh):
    """Adds `fresh` to the cache's entries for `device` (re-reading the file,
    which another process may have extended) and writes it atomically;
    returns the device's entries."""
    devices = _load(path)
    entries = {**devices.get(device, {}), **fresh}
    devices[device] = entries
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=folder, delete=False, suffix=".tmp") as f:
        json.dump({"format": _FORMAT, "devices": devices}, f, indent=1, sort_keys=True)
    os.replace(f.name, path)
    return entries


def _apply(entries):
    """The entries that name a backend of this build, or a configuration it
    compiled, as the dispatch rule's tuned choices (with the choices already
    set for other problems)."""
    built = {*_C.cuda_backends(), *(f"{k['family']}:{k['name']}" for k in _testing.kernels())}
    choices = dict(_C.tuned_choices())
    for key, entry in entries.items():
        if entry["backend"] in built:
            choices[key] = entry["backend"]
        else:
            choices.pop(key, None)
    _C.set_tuned_choices(choices)


# A key's dtype (fp32: with TF32 only) and B layout as the kernel tables name them.
_TABLE_DTYPES = {"fp16": "f16", "bf16": "bf16", "fp32": "f32"}
_TABLE_LAYOUTS = {"col": "kmajor", "row": "nmajor"}


def _candidates(p):
    """What a choice may name for a problem (its parsed key): the build's
    CUDA backends but the SIMT kernel, a tested fallback, and for each
    tensor-core family built, "family:configuration" for each gemm_act
    configuration compiled for the problem's dtype and B layout that stores Z
    where the problem does and loads C through TMA only where it has a C."""
    backends = [name for name in _C.cuda_backends() if name != "simt"]
    dtype = _TABLE_DTYPES.get(p["dtype"]) if p["dtype"] != "fp32" or p["tf32"] == "1" else None
    layout = _TABLE_LAYOUTS.get(p["b"])  # strided: the family runs aligned copies, of either layout
    configs = [f"{k['family']}:{k['name']}" for k in _testing.kernels()
               if k["family"] in backends and k["dtype"] == dtype and layout in (None, k["b_layout"])
               and (k["stores_z"] or p["z"] == "0") and (k["c_source"] != "tma" or p["c"] == "1")]
    return backends + list(dict.fromkeys(configs))


def _parse(key):
    found = _KEY.match(key)
    if found is None:
        raise ValueError(f"torch_gemm_act.tune: not a problem key: {key!r}")
    return found.groupdict()


def _matrix(rows, cols, layout, dtype, offset, device):
    """A [rows, cols] operand of `layout` (row, col, strided), its storage
    starting `offset` elements into a fresh buffer, values about 1/sqrt(cols)."""
    strides = {"row": (cols, 1), "col": (1, rows), "strided": (2 * cols, 2)}[layout]
    size = offset + (rows - 1) * strides[0] + (cols - 1) * strides[1] + 1
    buffer = torch.randn(size, dtype=dtype, device=device) / max(cols, 1) ** 0.5
    return buffer.as_strided((rows, cols), strides, offset)


def _operands(key, device):
    """(a, b, bias, c, activation, beta, store_preact) reproducing `key`'s
    problem on fresh random operands, or None where no such call is found."""
    p = _parse(key)
    dtype = _DTYPES.get(p["dtype"])
    if dtype is None:
        return None
    m, n, k = int(p["m"]), int(p["n"]), int(p["k"])
    for offset in (0, 1):
        a = _matrix(m, k, p["a"], dtype, offset, device)
        b = _matrix(k, n, p["b"], dtype, 0, device)
        bias = {"none": None, "column": torch.randn(n, dtype=dtype, device=device),
                "row": torch.randn(m, 1, dtype=dtype, device=device),
                "scalar": torch.randn(1, dtype=dtype, device=device)}[p["bias"]]
        c = torch.randn(m, n, dtype=dtype, device=device) if p["c"] == "1" else None
        beta = 1.0 if c is not None else 0.0
        call = (a, b, bias, c, p["activation"], beta, p["z"] == "1")
        if _C.problem_key(a, b, bias, c, p["activation"], 1.0, beta, 0.01, p["z"] == "1") == key:
            return call
    return None


def _time_problem(key, rounds, device):
    """The entry for `key`: each candidate's, the rule's and eager's median
    microseconds on `device`, and the backend kept (rule tuned); None where
    the key's problem cannot be made again."""
    call = _operands(key, device)
    if call is None:
        return None
    a, b, bias, c, activation, beta, store = call
    op = torch.ops.gemm_act.gemm_act.default
    twin = _shared_twin(activation)

    def run():
        return op(a, b, bias, c, activation, 1.0, beta, 0.01, store)

    def eager():
        z = torch.addmm(bias, a, b) if bias is not None and bias.dim() == 1 and c is None else a @ b
        if c is not None:
            z = z + beta * c
        if bias is not None and not (bias.dim() == 1 and c is None):
            z = z + bias
        return twin(z)

    previous = dict(_C.tuned_choices())
    candidates = _candidates(_parse(key))
    contenders = {RULE: None, **{name: name for name in candidates}}
    samples = {name: [] for name in (*contenders, "eager")}
    others = {k: v for k, v in previous.items() if k != key}
    last = None
    try:
        with torch.no_grad():
            for r in range(rounds):
                # Each round in its own order (seeded by the problem and round:
                # the same on every run, never the previous round's), so that
                # no contender always runs after the same one.
                order = [*contenders, "eager"]
                random.Random(f"{key}/{r}").shuffle(order)
                if order == last:
                    order.reverse()
                last = order
                for name in order:
                    backend = contenders.get(name)
                    _C.set_tuned_choices(others if backend is None else {**others, key: backend})
                    samples[name] += _times_us(eager if name == "eager" else run)
    finally:
        _C.set_tuned_choices(previous)
    us = {name: statistics.median(times) for name, times in samples.items()}
    best = min(candidates, key=us.__getitem__)
    backend = best if _policy.tuned(us[RULE], us[best], us["eager"]) else RULE
    return {"backend": backend, "us": us}


def _times_us(fn, calls=10):
    """Microseconds of each of `calls` calls of fn, by CUDA events, after two
    unmeasured calls."""
    fn()
    fn()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(calls)]
    for start, end in events:
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return [start.elapsed_time(end) * 1000 for start, end in events]
