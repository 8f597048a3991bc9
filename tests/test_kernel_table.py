"""The sm90 configuration table and its generator (csrc/cuda/sm90/sm90_kernels.py):
one unit per configuration, dtype and B layout; names unique; extra rows
(an experiment's, built on a branch) only where asked for."""

import importlib.util
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _load(path, name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, path))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def table():
    return _load("csrc/cuda/sm90/sm90_kernels.py", "sm90_kernels")


def test_release_table_generates_one_unit_per_target(table, tmp_path):
    units = table.generate(str(tmp_path))
    expected = sum(len(r.targets) for r in table.CONFIGS)
    assert len(units) == expected == len(set(units))
    header = open(tmp_path / "cuda" / "sm90" / "sm90_kernel_table.h").read()
    for r in table.CONFIGS:
        assert f"struct ConfigSpec<KernelConfig::{r.name}>" in header
        assert "lab" not in header
        for dtype, layout in r.targets:
            unit = tmp_path / "cuda" / "sm90" / "kernels" / f"sm90_{r.name}_{dtype}_{layout}.cu"
            text = unit.read_text()
            assert f'#include "{r.header}"' in text
            if r.op in table.NO_ACTIVATION:  # one kernel, no activation
                assert "GEMM_ACT_FOR_EACH_ACTIVATION" not in text and text.count("template LaunchResult") == 1
                assert "Activation::None>" in text
            else:
                assert "GEMM_ACT_FOR_EACH_ACTIVATION(GEMM_ACT_SM90_INSTANTIATE)" in text
    rows = re.findall(r"^  X\((\w+), (\w+), (\w+)\)", header, re.M)
    assert len(rows) == expected


def test_names_say_what_the_configuration_is(table):
    for r in table.CONFIGS:
        assert r.name.startswith(f"{r.schedule}_{r.tile[0]}x{r.tile[1]}")
        assert f"c{r.cluster[0]}x{r.cluster[1]}" in r.name
        assert ("_k2" in r.name) == (r.k_swizzle_rows == 2)
        assert ("_noz" in r.name) == (not r.stores_z and r.op == "gemm_act")  # gemm_dact and gemm_glu store no Z
        assert ("_s1" in r.name) == (r.store_stages == 1)
        assert ("_dact" in r.name) == (r.op == "gemm_dact")
        assert ("_glu" in r.name) == (r.op == "gemm_glu")
        assert ("_drop" in r.name) == (r.op == "gemm_dropout_add")
        # gemm_dropout_add's rows always take C through TMA; "_tmac" names gemm_act's twins.
        assert ("_tmac" in r.name) == (r.source == "tma" and r.op == "gemm_act")


def test_each_tmac_row_is_the_twin_of_its_gmem_row(table):
    rows = table.rows_with()
    twins = {r.name: table.tma_twin(r, rows) for r in rows}
    tmac = [r.name for r in rows if r.source == "tma" and r.op == "gemm_act"]
    assert tmac and sorted(t for r, t in twins.items() if t != r) == sorted(tmac)
    assert all(twins[name.removesuffix("_tmac")] == name for name in tmac)


def test_generation_is_stable_and_removes_stale_units(table, tmp_path):
    units = table.generate(str(tmp_path))
    mtimes = {u: os.path.getmtime(u) for u in units}
    stale = tmp_path / "cuda" / "sm90" / "kernels" / "sm90_gone_bf16_kmajor.cu"
    stale.write_text("// stale")
    assert table.generate(str(tmp_path)) == units
    assert not stale.exists()
    assert {u: os.path.getmtime(u) for u in units} == mtimes  # unchanged files not rewritten


def test_extra_rows_extend_the_table(table, tmp_path):
    base = table.CONFIGS[0]
    extra = table.Sm90Config(base.name + "_trial", base.schedule, base.tile, base.cluster, base.epilogue_tile,
                             (("bf16", "kmajor"),))
    more = {base.name: (("bf16", "kmajor"),)} if ("bf16", "kmajor") not in base.targets else {}
    units = table.generate(str(tmp_path), [extra], more)
    names = {os.path.basename(u) for u in units}
    assert f"sm90_{extra.name}_bf16_kmajor.cu" in names
    assert f"sm90_{base.name}_bf16_kmajor.cu" in names
    assert f"sm90_{extra.name}_bf16_kmajor.cu" not in {os.path.basename(u) for u in table.generate(str(tmp_path))}


def test_bad_rows_are_refused(table):
    dup = table.CONFIGS[0]
    with pytest.raises(ValueError, match="named twice"):
        table.rows_with([dup])
    bad = table.Sm90Config("pingpong_1x1_c1x1", "pingpong", (1, 1), (1, 1), (1, 1), (("f32", "nmajor"),))
    with pytest.raises(ValueError, match=r"no such target \(f32, nmajor\)"):
        table.rows_with([bad])
    base = next(r for r in table.CONFIGS if r.name == "cooperative_256x128_c2x1")
    wider = table.replace(base, name=base.name + "_tmac", source="tma", targets=(("f32", "kmajor"),))
    with pytest.raises(ValueError, match=r"a tmac twin has source 'tma', cooperative_256x128_c2x1's op"):
        table.rows_with([wider])


def test_sm80_table_generates_one_unit_per_target(tmp_path):
    sm80 = _load("csrc/cuda/sm80/sm80_kernels.py", "sm80_kernels")
    units = sm80.generate(str(tmp_path))
    expected = [(r.name, d, l) for r in sm80.CONFIGS for d, l in r.targets]
    assert len(units) == len(expected) == len(set(units))
    header = open(tmp_path / "cuda" / "sm80" / "sm80_kernel_table.h").read()
    assert re.findall(r"^  X\((\w+), (\w+), (\w+)\)", header, re.M) == [
        (name, sm80.DTYPES[d], sm80.LAYOUTS[l]) for name, d, l in expected]
    configs = re.findall(r"^  X\((\w+), (\d+), (\d+), (\d+), (\d+)\)", header, re.M)
    assert [c[0] for c in configs] == [r.name for r in sm80.CONFIGS]
    assert all(("_glu" in r.name) == (r.op == "gemm_glu") for r in sm80.CONFIGS)
    # Every (dtype, B layout) the family takes has a kernel.
    assert {(d, l) for _, d, l in expected} == {(d, l) for d in sm80.DTYPES for l in sm80.LAYOUTS}
    for name, d, l in expected:
        text = (tmp_path / "cuda" / "sm80" / "kernels" / f"sm80_{name}_{d}_{l}.cu").read_text()
        assert f"KernelConfig::{name}, Dtype::{sm80.DTYPES[d]}, BLayout::{sm80.LAYOUTS[l]}" in text
    # A unit whose row left the table is removed.
    stale = tmp_path / "cuda" / "sm80" / "kernels" / "sm80_gone_bf16_kmajor.cu"
    stale.write_text("")
    sm80.generate(str(tmp_path))
    assert not stale.exists()


def test_compile_check_builds_one_unit_per_operator_and_schedule(table, tmp_path):
    units = table.generate(str(tmp_path), compile_check=True)
    kinds = {(r.op, r.schedule) for r in table.CONFIGS}
    assert len(units) == len(kinds) < sum(len(r.targets) for r in table.CONFIGS)
    header = open(tmp_path / "cuda" / "sm90" / "sm90_kernel_table.h").read()
    listed = re.findall(r"^  X\((\w+), (\w+), (\w+)\)", header, re.M)
    by_name = {r.name: r for r in table.CONFIGS}
    assert {(by_name[name].op, by_name[name].schedule) for name, _, _ in listed} == kinds
    # Every row keeps its enumerator and spec: the entry's code names them all.
    for r in table.CONFIGS:
        assert f"struct ConfigSpec<KernelConfig::{r.name}>" in header
    # The whole table again removes the check's header and keeps all units.
    assert len(table.generate(str(tmp_path))) == sum(len(r.targets) for r in table.CONFIGS)
