"""Every rule that chooses a road, a backend or a kernel configuration, by
name, with the numbers it draws its boundary with: the one table. Python's
policy (_policy.py) reads it; setup.py generates the C++ side's constants
and explain() texts from it (gemm_act_rules.h), so each number is declared
here once. What measured each: docs/MEASUREMENTS.md, under the rule's name.

Pure data, no imports: setup.py reads it before the package exists. A rule
is (where it runs, what it says, the numbers it declares); `says` may name
any rule's numbers in braces, spelled from them. Numbers are integers; in
C++ NAME_OF_IT is kNameOfIt."""

RULES = {
    # Python: which road a call takes, before the extension picks a kernel (_policy.py).
    "host_bound": ("python", "a fused module's layer below 2^{HOST_BOUND_MULTIPLY_ADDS_LOG2} multiply-adds on "
                             "CUDA, in eager mode, runs ATen's ops", {"HOST_BOUND_MULTIPLY_ADDS_LOG2": 30}),
    "own_node": ("python", "except, in training, a LinearAct whose activation is differentiated from Y: the "
                           "operator, its one node taking the weight", {}),
    "cpu_atens": ("python", "on the CPU the fused modules run ATen's ops, eager or compiled", {}),
    "compiles_as_eager": ("python", "under torch.compile, exact fp32/fp64 and relu-family training take eager's "
                                    "formula", {}),
    "compiles_to_glu": ("python", "under torch.compile, gemm_glu only in inference where its fused kernel runs "
                                  "(glu_rows)", {}),
    "fuses_residual": ("python", "a residual output fuse_linear_act fused takes gemm_dropout_add for its sum in "
                                 "eager mode with dropout on, unless host_bound or cpu_atens send its layer to "
                                 "ATen's ops; without dropout, and under torch.compile (where Inductor folds the "
                                 "add and the dropout into the next norm), the replaced forward's ops: the "
                                 "operator measured no faster there", {}),
    "links": ("python", "fuse_linear_act links a layer to the next Linear only where act' needs Z", {}),
    "chains": ("python", "a linked layer chains on CUDA where gemm_dact is the fused kernel (hopper_fused); on "
                         "the CPU always", {}),
    "ce_chunk": ("python", "linear_cross_entropy's chunked path takes the vocabulary in chunks of about "
                           "2^{CE_CHUNK_BYTES_LOG2} bytes of logits, or as many as hidden's gradient takes in "
                           "fp32 where that is more (each chunk adds into that sum: a wider chunk, fewer "
                           "passes over it)", {"CE_CHUNK_BYTES_LOG2": 25}),
    "ce_eager": ("python", "with a gradient wanted, linear_cross_entropy runs eager's ops (F.linear, "
                           "F.cross_entropy) where a row of logits is a whole number of 16-byte units and "
                           "the logits take below 2^{CE_EAGER_MAX_LOGITS_BYTES_LOG2} bytes, unless the "
                           "log-sum-exp is asked for: there cuBLAS's aligned GEMMs and ATen's softmax beat "
                           "both roads", {"CE_EAGER_MAX_LOGITS_BYTES_LOG2": 30}),
    "ce_rows": ("python", "in training with a mean or summed loss, linear_cross_entropy takes the tokens in "
                          "blocks of the whole vocabulary, its gradients in the forward (three GEMMs to the "
                          "chunks' four), where the blocks fit, beside the gradients summed in fp32, in what "
                          "compiled eager holds: the logits [tokens, vocab] (twice where a row of them is "
                          "not a whole number of 16-byte units) and the gradients in the inputs' dtype; as few and "
                          "as even as fit, and where there is more than one, a block's rows times hidden's "
                          "width reach 2^{CE_ROWS_MIN_PRODUCT_LOG2} (a narrower block's hidden-gradient GEMM "
                          "leaves the GPU idle); the vocabulary in chunks (ce_chunk) otherwise",
                {"CE_ROWS_MIN_PRODUCT_LOG2": 21}),
    "chain_pays": ("python", "a chained layer publishes Z in training, on plain tensors, where it is not "
                             "host_bound", {}),
    "tuned": ("python", "torch_gemm_act.tune() keeps a backend other than the rule's own for a problem where "
                        "it timed more than {TUNE_MARGIN_PERCENT}% faster, or faster at all where the rule's own "
                        "timed more than {TUNE_MARGIN_PERCENT}% slower than eager's ops",
              {"TUNE_MARGIN_PERCENT": 3}),
    # Both: where the tensor-core kernels run at all.
    "hopper_fused": ("both", "the sm90 family (gemm_glu's and gemm_dact's fused kernels among them) runs on "
                             "sm_{SM90_CAPABILITY} only, in fp16/bf16 (and TF32 for gemm_act)",
                     {"SM90_CAPABILITY": 90}),
    # C++: the sm90 entry leaves aligned operands to the library where it measured
    # faster (csrc/cuda/sm90/sm90_library_rules.h), tried in this order.
    "plain_gemm_is_eager": ("sm90", "no activation or C; fp32, or K > {MAX_PLAIN_SHORT_K} and N < "
                                    "{MIN_PLAIN_WIDE_N}: eager's own cuBLASLt call",
                            {"MAX_PLAIN_SHORT_K": 1024, "MIN_PLAIN_WIDE_N": 8192}),
    "long_k": ("sm90", "K > {MAX_DIRECT_K}", {"MAX_DIRECT_K": 4096}),
    "lt_epilogue": ("sm90", "cuBLASLt's GELU epilogue, without Z: M <= {MAX_SMALL_TILE_M}, K <= "
                            "{MAX_EPILOGUE_SHORT_K}, or K >= {MIN_EPILOGUE_LONG_K} with N <= {MAX_EPILOGUE_LONG_N}",
                    {"MAX_EPILOGUE_SHORT_K": 768, "MIN_EPILOGUE_LONG_K": 4096, "MAX_EPILOGUE_LONG_N": 4096}),
    "tall_long_k": ("sm90", "K >= {MIN_TALL_K}, N >= {MIN_TALL_N}, M >= N", {"MIN_TALL_K": 4096, "MIN_TALL_N": 8192}),
    "small": ("sm90", "below 2^{MIN_DIRECT_MULTIPLY_ADDS_LOG2} multiply-adds", {"MIN_DIRECT_MULTIPLY_ADDS_LOG2": 32}),
    "few_rows": ("sm90", "more than {MAX_SMALL_TILE_M} and at most {MAX_FEW_ROWS_M} rows", {"MAX_FEW_ROWS_M": 768}),
    # C++: gemm_glu's fused sm90 kernel (csrc/cuda/sm90/sm90_gemm_act.cpp).
    "glu_rows": ("sm90", "gemm_glu's fused kernel from {MIN_GLU_ROWS} rows", {"MIN_GLU_ROWS": 2048}),
    "glu_preact_k": ("sm90", "keeping H, the fused kernel only below K = {MIN_COMPOSED_PREACT_K}",
                     {"MIN_COMPOSED_PREACT_K": 4096}),
    "dropout_forced": ("sm90", "gemm_dropout_add's fused kernel runs only where the testing switch names it: "
                               "its forward measured slower than eager's branch; elsewhere the GEMM and "
                               "dropout's pass", {}),
    "dropout_bits": ("sm90", "gemm_dropout_add's fused kernel reads its mask as keep bits a kernel of their "
                             "own draws first, at full occupancy; drawn in the epilogue (by the one warpgroup "
                             "an epilogue runs on) the branch was slower than eager's", {}),
    "glu_pingpong": ("sm90", "the fused kernel runs ping-pong's 128 x 128 tile (one consumer's epilogue beside "
                             "the other's mainloop)", {}),
    # C++: unaligned operands copied into aligned buffers (sm90 staging, the backward's padding).
    "align": ("cuda", "operands not 16-byte aligned are copied aligned from 2^{MIN_MULTIPLY_ADDS_TO_ALIGN_LOG2} "
                      "multiply-adds", {"MIN_MULTIPLY_ADDS_TO_ALIGN_LOG2": 26}),
    # C++: the sm90 heuristic's configuration and tile order (csrc/cuda/sm90/sm90_heuristic.h).
    "small_m": ("sm90", "M <= {MAX_SMALL_M}: ping-pong, 64x128 tiles to M = {MAX_TINY_M}, 128x64 (one tile "
                        "row) to M = {MAX_SMALL_TILE_M}", {"MAX_SMALL_M": 256, "MAX_TINY_M": 64,
                                                          "MAX_SMALL_TILE_M": 128}),
    "wide_n": ("sm90", "N >= {MIN_WIDE_N} with K <= {MAX_WIDE_N_K}: ping-pong, but above 2^"
                       "{MAX_PINGPONG_MULTIPLY_ADDS_LOG2} multiply-adds on operands beyond the L2's "
                       "{L2_OPERAND_MIB} MiB", {"MIN_WIDE_N": 8192, "MAX_WIDE_N_K": 8192,
                                                "MAX_PINGPONG_MULTIPLY_ADDS_LOG2": 39, "L2_OPERAND_MIB": 48}),
    "short_k": ("sm90", "K <= {MAX_SHORT_K}: ping-pong", {"MAX_SHORT_K": 1024}),
    "tma_source": ("sm90", "C as contiguous rows aligned to 16 bytes: the chosen configuration's tmac twin, "
                           "where it has one (C's loads through TMA, behind the mainloop); ping-pong's up to K = "
                           "{MAX_TMA_SOURCE_PINGPONG_K}", {"MAX_TMA_SOURCE_PINGPONG_K": 3072}),
    "swizzle": ("sm90", "where the streamed operand exceeds {L2_OPERAND_MIB} MiB, bands of clusters span "
                        "at least {MIN_BAND_SPAN} rows or columns", {"MIN_BAND_SPAN": 512}),
}


NUMBERS = {key: value for _, _, numbers in RULES.values() for key, value in numbers.items()}
assert len(NUMBERS) == sum(len(numbers) for _, _, numbers in RULES.values()), "a number declared twice"


def says(name):
    """The rule's text with its numbers spelled in."""
    return RULES[name][1].format(**NUMBERS)


def cpp_name(key):
    """NAME_OF_IT as C++ spells a constant: kNameOfIt."""
    return "k" + "".join(part.capitalize() for part in key.split("_"))


def cpp_header():
    """gemm_act_rules.h: every rule's numbers as constants and its text, for
    the C++ side (setup.py writes it into the build's generated folder)."""
    lines = ["// Generated by setup.py from torch_gemm_act/_rules.py, the one table of",
             "// rules: edit the table, not this file.", "#pragma once", "", "#include <cstdint>", "",
             "namespace gemm_act {", "namespace rules {", ""]
    for name, (where, _, numbers) in RULES.items():
        if where == "python":
            continue
        lines.append(f"// {name}: {says(name)}")
        for key, value in numbers.items():
            lines.append(f"constexpr int64_t {cpp_name(key)} = {value};")
        lines.append(f'constexpr const char* {cpp_name(name)}Says = "{says(name)}";')
        lines.append("")
    lines += ["}  // namespace rules", "}  // namespace gemm_act", ""]
    return "\n".join(lines)
