"""A correct CASE_FINDINGS written differently: built up with set operations."""

# %% case_findings
alignment = {"misaligned_features"}
CASE_FINDINGS = {
    "case1": alignment | {"math_heavy_activation"},
    "case2": {"channels_first"} | {"misaligned_channels"},
    "case3": alignment | {"vocab_not_padded", "fp32_without_tf32"},
}
