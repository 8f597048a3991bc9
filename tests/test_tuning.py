"""torch_gemm_act.tune: problem keys, the tuned choices' table, the cache on
disk; on a GPU, choices forcing their backend, and the cache read again by
another process instead of timing."""

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import torch_gemm_act as tga
from torch_gemm_act import _C, tuning
from conftest import requires_cuda

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture(autouse=True)
def no_choices():
    _C.set_tuned_choices({})
    yield
    _C.set_tuned_choices({})


def _call(device, dtype, a_layout, b_layout, bias, c, store, offset, activation="gelu", m=37, n=24, k=19):
    a = tuning._matrix(m, k, a_layout, dtype, offset, device)
    b = tuning._matrix(k, n, b_layout, dtype, 0, device)
    bias = {"none": None, "column": torch.randn(n, dtype=dtype, device=device),
            "row": torch.randn(m, 1, dtype=dtype, device=device),
            "scalar": torch.randn(1, dtype=dtype, device=device)}[bias]
    c = torch.randn(m, n, dtype=dtype, device=device) if c else None
    return a, b, bias, c, activation, 1.0, 1.0 if c is not None else 0.0, 0.01, store


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("a_layout, b_layout", [("row", "row"), ("col", "strided"), ("strided", "col")])
@pytest.mark.parametrize("bias, c, store, offset", [("none", False, False, 0), ("column", True, True, 1),
                                                    ("row", False, True, 0), ("scalar", True, False, 1)])
def test_problem_keys_are_made_again(device, dtype, a_layout, b_layout, bias, c, store, offset):
    """A problem's key names what decides a backend's speed, and the tuner
    makes fresh operands of the same key from it alone."""
    call = _call(device, dtype, a_layout, b_layout, bias, c, store, offset)
    key = _C.problem_key(*call)
    parsed = tuning._parse(key)
    assert (parsed["m"], parsed["n"], parsed["k"], parsed["a"], parsed["b"], parsed["bias"]) == \
        ("37", "24", "19", a_layout, b_layout, bias)
    assert parsed["c"] == str(int(c)) and parsed["activation"] == "gelu"
    assert parsed["z"] == str(int(store)) and (parsed["tf32"] is not None) == (dtype == torch.float32)
    if offset:
        assert parsed["aligned"] == "0"
    made = tuning._operands(key, torch.device(device))
    assert made is not None
    a, b, bias_t, c_t, activation, beta, store_made = made
    assert _C.problem_key(a, b, bias_t, c_t, activation, 1.0, beta, 0.01, store_made) == key


def test_a_key_says_misaligned_and_tf32():
    x = torch.randn(65, dtype=torch.float32)
    b = torch.randn(16, 8)
    key = _C.problem_key(x[1:].view(4, 16), b, None, None, "relu", 1.0, 0.0, 0.01, False)
    assert "aligned=0" in key and key.startswith("fp32 relu m=4 n=8 k=16 ")
    assert " tf32=" in key
    assert "aligned=1" in _C.problem_key(x[:64].view(4, 16), b, None, None, "relu", 1.0, 0.0, 0.01, False)


def test_the_table_is_set_and_read_whole():
    _C.set_tuned_choices({"bf16 gelu m=1 n=2 k=3": "library", "fp16 relu m=4 n=5 k=6": "sm90"})
    assert _C.tuned_choices() == {"bf16 gelu m=1 n=2 k=3": "library", "fp16 relu m=4 n=5 k=6": "sm90"}
    _C.set_tuned_choices({})
    assert _C.tuned_choices() == {}
    with pytest.raises(TypeError, match="dict"):
        _C.set_tuned_choices([("a", "b")])


def test_cache_round_trip_and_other_devices_kept(tmp_path):
    path = str(tmp_path / "sub" / "tuned.json")
    assert tuning._load(path) == {}
    first = {"k1": {"backend": "library", "us": {"rule": 2.0, "library": 1.0}}}
    tuning._store(path, "gpu A", first)
    tuning._store(path, "gpu B", {"k2": {"backend": "rule", "us": {"rule": 1.0}}})
    entries = tuning._store(path, "gpu A", {"k3": {"backend": "sm90", "us": {"rule": 3.0, "sm90": 1.0}}})
    assert set(entries) == {"k1", "k3"}
    devices = tuning._load(path)
    assert set(devices) == {"gpu A", "gpu B"} and devices["gpu A"] == entries
    assert [f for f in os.listdir(tmp_path / "sub")] == ["tuned.json"]  # written atomically, no leftovers


def test_a_file_that_is_not_a_cache_is_an_error_not_overwritten(tmp_path):
    path = tmp_path / "notes.json"
    path.write_text(json.dumps({"something": "else"}))
    with pytest.raises(RuntimeError, match="not a tuning cache"):
        tuning._store(str(path), "gpu", {"k": {"backend": "rule", "us": {}}})
    assert json.loads(path.read_text()) == {"something": "else"}
    path.write_text("{broken")
    with pytest.raises(RuntimeError, match="cannot read the cache"):
        tuning._load(str(path))


def test_only_backends_of_this_build_are_applied():
    configs = {f"{k['family']}:{k['name']}" for k in tga.testing.kernels()}
    built = {*_C.cuda_backends(), *configs}
    entries = {"k1": {"backend": "library"}, "k2": {"backend": "rule"}, "k3": {"backend": "no_such_backend"},
               "k4": {"backend": "sm90"}, "k5": {"backend": "sm90:no_such_configuration"},
               "k6": {"backend": min(configs, default="sm90:none_compiled")}}
    _C.set_tuned_choices({"k0": "library", "k3": "library"})
    tuning._apply(entries)
    want = {k: e["backend"] for k, e in entries.items() if e["backend"] in built}
    assert _C.tuned_choices() == {"k0": "library", **want}  # k0: another problem's, kept; k3: dropped


def test_the_report_names_problems_slower_than_eager():
    report = tuning.TuneReport("gpu", "cache.json", {
        "k1": {"backend": "rule", "us": {"rule": 10.0, "library": 10.1, "eager": 9.0}, "cached": False},
        "k2": {"backend": "library", "us": {"rule": 10.0, "library": 8.0, "eager": 9.0}, "cached": True}})
    assert report.slower_than_eager == ["k1"] and (report.timed, report.cached) == (1, 1)
    assert "k1: rule (rule 10.0, library 10.1, eager 9.0 us) slower than eager" in str(report)
    assert "k2: library (rule 10.0, library 8.0, eager 9.0 us)\n" in str(report) + "\n"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("winner_us, kept", [(60.0, "winner"), (98.0, "rule")])
def test_a_problem_is_timed_in_turns_and_the_table_restored(monkeypatch, dtype, winner_us, kept):
    """_time_problem runs each contender (backends, and in bf16 the families'
    configurations) with the table naming it for the problem alone (others'
    choices kept), eager with none, keeps a winner only by rule tuned's
    margin, and restores the table. The timer is faked (by what the table
    says while it runs): the logic, not the GPU."""
    call = _call("cpu", dtype, "row", "col", "column", False, True, 0)
    key = _C.problem_key(*call)
    backends = tuning._candidates(tuning._parse(key))
    if not backends:
        pytest.skip("a build without CUDA backends has nothing to choose between")
    winner = backends[-1]
    seen = []  # (whose turn: "eager" or the table's choice, None being the rule's; the other problem's choice)

    def fake_times(fn, calls=10):
        choice = _C.tuned_choices().get(key)
        assert fn.__name__ != "eager" or choice is None  # eager's ops run with no choice for the problem
        seen.append(("eager" if fn.__name__ == "eager" else choice, _C.tuned_choices().get("other")))
        fn()
        return [winner_us if choice == winner else 100.0] * calls

    monkeypatch.setattr(tuning, "_times_us", fake_times)
    _C.set_tuned_choices({"other": "library"})
    entry = tuning._time_problem(key, 2, torch.device("cpu"))
    assert entry["backend"] == (winner if kept == "winner" else "rule")
    assert set(entry["us"]) == {"rule", *backends, "eager"} and entry["us"][winner] == winner_us
    assert seen.count((None, "library")) == seen.count(("eager", "library")) == 2  # once each round
    assert all(turn in (None, "eager", *backends) and other == "library" for turn, other in seen)
    assert _C.tuned_choices() == {"other": "library"}
    # Every candidate once a round, the rounds in different orders, the same on every run.
    rounds = [seen[:len(seen) // 2], seen[len(seen) // 2:]]
    assert all(sorted(map(str, r)) == sorted(map(str, rounds[0])) for r in rounds) and rounds[0] != rounds[1]
    first = list(seen)
    seen.clear()
    tuning._time_problem(key, 2, torch.device("cpu"))
    assert seen == first


@pytest.mark.parametrize("key", [
    "bf16 gelu m=512 n=256 k=128 a=row b=col bias=column c=0 z=1 aligned=1",
    "fp16 relu m=512 n=256 k=128 a=row b=row bias=none c=1 z=0 aligned=1",
    "bf16 gelu m=512 n=256 k=128 a=row b=strided bias=none c=0 z=0 aligned=0",
    "fp32 gelu m=512 n=256 k=128 a=row b=col bias=column c=0 z=1 aligned=1 tf32=1",
    "fp32 gelu m=512 n=256 k=128 a=row b=col bias=column c=0 z=1 aligned=1 tf32=0",
    "fp64 gelu m=512 n=256 k=128 a=row b=col bias=column c=0 z=0 aligned=1"])
def test_the_candidates_are_the_backends_and_the_configurations_that_fit(key):
    """A problem's candidates: every built CUDA backend but SIMT, then each
    family configuration compiled for its dtype (fp32: with TF32 only) and B
    layout (either, for a strided B) that stores Z where the problem does and
    loads C through TMA only where the problem has a C."""
    p = tuning._parse(key)
    candidates = tuning._candidates(p)
    backends = [b for b in _C.cuda_backends() if b != "simt"]
    assert candidates[:len(backends)] == backends and len(set(candidates)) == len(candidates)
    dtype = {"bf16": "bf16", "fp16": "f16", "fp32": "f32" if p["tf32"] == "1" else None, "fp64": None}[p["dtype"]]
    layouts = {"col": ("kmajor",), "row": ("nmajor",), "strided": ("kmajor", "nmajor")}[p["b"]]
    fits = {f"{k['family']}:{k['name']}" for k in tga.testing.kernels()
            if k["family"] in backends and k["dtype"] == dtype and k["b_layout"] in layouts
            and (k["stores_z"] or p["z"] == "0") and (k["c_source"] == "gmem" or p["c"] == "1")}
    assert set(candidates[len(backends):]) == fits
    if dtype is None:
        assert candidates == backends


def test_rule_tuned_keeps_only_a_clear_win():
    """A clear win over the rule's choice; where that choice is clearly
    slower than eager, any win."""
    margin, tuned = tga._policy.TUNE_MARGIN, tga._policy.tuned
    assert tuned(100.0, 100.0 * (1 - margin) - 0.01, 100.0)
    assert not tuned(100.0, 100.0 * (1 - margin) + 0.01, 100.0)
    assert not tuned(100.0, 120.0, 100.0)
    slower_than_eager = 100.0 / (1 + margin) - 0.01
    assert tuned(100.0, 99.0, slower_than_eager)
    assert not tuned(100.0, 100.5, slower_than_eager)
    assert not tuned(100.0, 99.0, 100.0 / (1 + margin) + 0.01)


def test_tune_refuses_what_it_cannot_do(monkeypatch):
    model = torch.nn.Linear(4, 4)
    with pytest.raises(ValueError, match="rounds must be a positive int, got 0"):
        tga.tune(model, torch.randn(2, 4), rounds=0)
    if "library" in tga.testing.cuda_backends():  # a CPU-only build has no backend to force
        with tga.testing.override(cuda_backend="library"):
            with pytest.raises(RuntimeError, match="testing switch forces the CUDA backend 'library'"):
                tga.tune(model, torch.randn(2, 4))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(RuntimeError, match="needs a CUDA GPU"):
        tga.tune(model, torch.randn(2, 4))


def test_tune_warns_where_the_model_met_no_gemm_act(monkeypatch, tmp_path):
    """A model that runs no CUDA gemm_act call (here a CPU model, as a layer
    below rule host_bound would be) is tuned to nothing, said in a warning."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    monkeypatch.setattr(tuning, "signature", lambda device=None: "a GPU")
    model = tga.LinearAct(4, 4, activation="gelu")
    with pytest.warns(UserWarning, match="ran no CUDA gemm_act call"):
        report = tga.tune(model, torch.randn(2, 4), cache=str(tmp_path / "tuned.json"))
    assert report.problems == {} and _C.tuned_choices() == {}


def _mlp():
    """Two layers above rule host_bound at 2048 rows (below it a layer runs ATen's ops: nothing to tune)."""
    torch.manual_seed(0)
    return torch.nn.Sequential(tga.LinearAct(1024, 2048, activation="gelu"), tga.LinearAct(2048, 1024, activation="relu"))


@requires_cuda
def test_a_tuned_choice_forces_its_backend_cuda():
    """A choice starts the rule at its backend, which then takes every case
    it can run (explain says "(tuned)"), the others falling through as when
    forced; the result stays correct; without choices the rule is back."""
    major, _ = torch.cuda.get_device_capability()
    for dtype in (torch.bfloat16, torch.float32):
        a = torch.randn(96, 64, device="cuda", dtype=dtype)
        b = torch.randn(64, 80, device="cuda", dtype=dtype)
        bias = torch.randn(80, device="cuda", dtype=dtype)
        key = _C.problem_key(a, b, bias, None, "gelu", 1.0, 0.0, 0.01, False)
        ref = torch.nn.functional.gelu(torch.addmm(bias.double(), a.double(), b.double()))
        untuned = tga.explain(a, b, bias, activation="gelu")
        # which backends take this case when chosen (fp32 without TF32: only library and simt)
        takes = {"library": True, "simt": True, "sm90": dtype == torch.bfloat16 and major == 9,
                 "sm80": dtype == torch.bfloat16 and major >= 8}
        for backend in _C.cuda_backends():
            _C.set_tuned_choices({key: backend})
            plan = tga.explain(a, b, bias, activation="gelu")
            assert plan.startswith(f"{backend} (tuned): ") == takes[backend] == ("(tuned)" in plan), (backend, plan)
            y = tga.gemm_act(a, b, bias, activation="gelu")
            torch.testing.assert_close(y.double(), ref, rtol=2e-2, atol=2e-2)
        _C.set_tuned_choices({})
        assert tga.explain(a, b, bias, activation="gelu") == untuned


@requires_cuda
def test_a_tuned_configuration_runs_where_it_can_cuda():
    """A choice naming an sm90 configuration runs it (explain names it; the
    result is right); one that cannot run the case (compiled for another
    dtype only) leaves the case to the family's heuristic, as the choice of
    the backend alone does."""
    if "sm90" not in _C.cuda_backends() or torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("the sm90 family runs on compute capability 9.0 only")
    a = torch.randn(256, 64, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(80, 64, device="cuda", dtype=torch.bfloat16).t()  # K-major, as nn.Linear's weight
    bias = torch.randn(80, device="cuda", dtype=torch.bfloat16)
    key = _C.problem_key(a, b, bias, None, "gelu", 1.0, 0.0, 0.01, False)
    ref = torch.nn.functional.gelu(torch.addmm(bias.double(), a.double(), b.double()))
    table = tga.testing.kernels("sm90")
    runs = sorted({k["name"] for k in table if k["dtype"] == "bf16" and k["b_layout"] == "kmajor"})
    assert runs, "the sm90 family compiled no bf16 gemm_act configuration"
    for name in runs:
        _C.set_tuned_choices({key: f"sm90:{name}"})
        assert tga.explain(a, b, bias, activation="gelu").startswith(f"sm90 (tuned): {name}, kmajor B")
        y = tga.gemm_act(a, b, bias, activation="gelu")
        torch.testing.assert_close(y.double(), ref, rtol=2e-2, atol=2e-2)
    _C.set_tuned_choices({key: "sm90"})
    heuristic = tga.explain(a, b, bias, activation="gelu")
    for name in sorted({k["name"] for k in table} - set(runs)):
        _C.set_tuned_choices({key: f"sm90:{name}"})
        assert tga.explain(a, b, bias, activation="gelu") == heuristic, name
        torch.testing.assert_close(tga.gemm_act(a, b, bias, activation="gelu").double(), ref, rtol=2e-2, atol=2e-2)


@requires_cuda
def test_tune_times_then_reads_the_cache_in_another_process_cuda(tmp_path):
    """tune() times each problem once; another process tuning the same model
    reads every choice from the cache and times nothing; the tuned model's
    output is the untuned one's within bf16's rounding."""
    cache = str(tmp_path / "tuned.json")
    model = _mlp().cuda().to(torch.bfloat16)
    x = torch.randn(2048, 1024, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        before = model(x)
        report = tga.tune(model, x, cache=cache, rounds=2)
        after = model(x)
    assert len(report.problems) == 2 and report.timed == 2 and report.cached == 0, str(report)
    # A backend of the build, or one configuration of a tensor-core family.
    built = {*_C.cuda_backends(), *(f"{k['family']}:{k['name']}" for k in tga.testing.kernels())}
    for entry in report.problems.values():
        assert entry["backend"] == "rule" or entry["backend"] in built
        assert {"rule", "eager"} <= set(entry["us"])
    applied = {k: e["backend"] for k, e in report.problems.items() if e["backend"] != "rule"}
    assert {k: v for k, v in _C.tuned_choices().items() if k in report.problems} == applied
    torch.testing.assert_close(after, before, rtol=2e-2, atol=2e-2)
    script = textwrap.dedent(f"""
        import sys, torch
        sys.path.insert(0, {HERE!r})
        import torch_gemm_act as tga
        from test_tuning import _mlp
        model = _mlp().cuda().to(torch.bfloat16)
        with torch.no_grad():
            report = tga.tune(model, torch.randn(2048, 1024, device="cuda", dtype=torch.bfloat16), cache={cache!r})
        print(report.timed, report.cached, sorted(report.problems))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    timed, cached = out.split()[:2]
    assert (timed, cached) == ("0", "2"), out
