"""The benchmark scripts run end to end (on tiny CPU models: their plumbing,
not their numbers), so a GPU session does not spend its time on a script
error."""

import importlib.util
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _model_cases(table="CASES"):
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    try:
        spec = importlib.util.spec_from_file_location("bench_models", os.path.join(ROOT, "bench", "models.py"))
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(os.path.join(ROOT, "bench"))
    return list(module.CASES if table == "CASES" else module.whole.WHOLE)


def test_models_dry_run(tmp_path):
    result = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "models.py"), "--cpu-dry-run",
                             "--rounds", "1", "--out", str(tmp_path)],  # the default: the MLP stacks
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    (out,) = [p for p in tmp_path.iterdir() if p.name.endswith("_models.json")]
    rows = json.loads(out.read_text())["rows"]
    # Every case, in both modes, with the fields the table asks for.
    assert {(r["case"], r["mode"]) for r in rows} == {
        (c, m) for c in _model_cases() for m in ("inference", "training")}
    for r in rows:
        assert set(r["ms"]) == {"eager", "fused"} and set(r["peak_bytes"]) == {"eager", "fused"}
        assert r["correct"], r
    # summarize.py renders such a file as models.py's table.
    table = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "summarize.py"), str(out)],
                           capture_output=True, text=True, timeout=300)
    assert table.returncode == 0, table.stdout + table.stderr
    assert all(f'{r["case"]:<20} {r["mode"]:<10}' in table.stdout for r in rows), table.stdout


def test_whole_models_dry_run(tmp_path):
    """The whole models (transformers' and timm's classes, tiny configs):
    every case in both modes, each contender's error from the fp32 copy
    beside eager's; the Llama row names its peer (timed, or why not)."""
    result = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "models.py"), "--cpu-dry-run",
                             "--rounds", "1", "--out", str(tmp_path), "--cases", "whole"],
                            capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout + result.stderr
    (out,) = [p for p in tmp_path.iterdir() if p.name.endswith("_models.json")]
    rows = json.loads(out.read_text())["rows"]
    assert {(r["case"], r["mode"]) for r in rows} == {
        (c, m) for c in _model_cases("WHOLE") for m in ("inference", "training")}
    for r in rows:
        assert {"eager", "fused"} <= set(r["ms"]) and set(r["ms"]) == set(r["peak_bytes"]), r
        assert set(r["err_vs_fp32"]) >= {"eager", "fused"} and r["correct"], r
        assert 0 < r["err_vs_fp32"]["eager"] < 0.05, r  # the fp32 copy is a different computation
        # Beside it the normwise error, of the same contenders.
        assert set(r["rms_err_vs_fp32"]) == set(r["err_vs_fp32"]), r
        assert all(0 < e < 0.05 for e in r["rms_err_vs_fp32"].values()), r
        if r["case"] == "whole_llama":
            assert "liger" in {**r["ms"], **r.get("peers_missing", {}), **r.get("peer_errors", {})}, r


def test_linear_ce_dry_run(tmp_path):
    """The LM-head rows: training only, eager, compile, the compile pass and
    fused timed (the peers CUDA only, named), each against the fp32
    computation; the pass replaced the loss."""
    result = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "models.py"), "--cpu-dry-run",
                             "--dry-run-compile", "--rounds", "1", "--out", str(tmp_path), "--cases",
                             "linear_ce_gpt2"], capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout + result.stderr
    (out,) = [p for p in tmp_path.iterdir() if p.name.endswith("_models.json")]
    (row,) = json.loads(out.read_text())["rows"]
    assert row["mode"] == "training" and set(row["ms"]) == {"eager", "compile", "compile_fusion", "fused"}, row
    assert row["compile_fusion_losses"] == 1, row
    assert set(row["peers_missing"]) == {"cce", "liger"} and row["correct"], row


def test_models_dry_run_compiled(tmp_path):
    """The compiled rows: eager, fused and the unchanged model under compile
    fusion; with --control, a copy of the eager model in every row."""
    result = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "models.py"), "--cpu-dry-run",
                             "--dry-run-compile", "--control", "--cases", "small_mlp_fp32", "--rounds", "1",
                             "--out", str(tmp_path)], capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout + result.stderr
    (out,) = [p for p in tmp_path.iterdir() if p.name.endswith("_models.json")]
    rows = json.loads(out.read_text())["rows"]
    assert {(r["mode"], r["compiled"]) for r in rows} == {
        (m, c) for m in ("inference", "training") for c in (False, True)}
    for r in rows:
        expected = {"eager", "fused", "eager_copy"} | ({"compile_fusion"} if r["compiled"] else set())
        assert set(r["ms"]) == expected and set(r["peak_bytes"]) == expected and r["correct"], r
        if r["compiled"]:
            # Its compilation went through the fusion pass (not the eager model's, reused).
            assert r["compile_fusion_pairs"] == 2, r
            # In training each pair is chained to the Linear after it.
            assert r["compile_fusion_chained"] == (2 if r["mode"] == "training" else 0), r
            # The copy compiles to eager's code; the fused model (on the
            # operators here) and compile fusion (pairs replaced) do not.
            assert r["same_code_as_eager"] == {"eager_copy": True, "fused": False, "compile_fusion": False}, r


def test_bench_gated_row_dry_run(tmp_path):
    """The gated MLP row: eager (two Linears, the gate, the product) beside
    gated_linear_act, every mode, results checked against eager."""
    shapes = tmp_path / "shapes.json"
    shapes.write_text(json.dumps({"gated": [{"M": 8, "K": 16, "N": 8, "dtype": "float32",
                                             "activation": "swiglu"}]}))
    result = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "bench.py"), "--cpu-dry-run",
                             "--shapes", str(shapes), "--rounds", "1", "--no-compile", "--out", str(tmp_path)],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    (out,) = [p for p in tmp_path.iterdir() if p.name.endswith(".json") and p.name != "shapes.json"]
    rows = json.loads(out.read_text())["rows"]
    assert {r["mode"] for r in rows} == {"inference", "forward", "forward_backward"}
    for r in rows:
        assert {"torch_mm", "eager", "gemm_act"} <= set(r["ms"]) and r["correct"], r


def test_step_profile_dry_run():
    """bench/diag/step_profile.py (device_check.sh's step profile) on a tiny
    GPT-2 on the CPU: a line per contender with its step, host and busy times."""
    result = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "diag", "step_profile.py"), "--case",
                             "whole_gpt2", "--cpu-dry-run", "--steps", "2", "--top", "2"],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = [line for line in result.stdout.splitlines() if line.startswith("--- ")]
    assert [line.split(":")[0] for line in lines] == ["--- eager", "--- fused"], result.stdout
    assert all("ms of CPU time in" in line for line in lines), lines
    diff = result.stdout.split("+++ fused - eager")[1].splitlines()[1:]
    assert len(diff) == 2 and all(" ms  x" in line for line in diff), result.stdout
