"""CASE_FINDINGS misses Case 2's channels-first layout and Case 3's misaligned vocabulary layer."""

# fails: test_case_findings
# %% case_findings
CASE_FINDINGS = {
    "case1": {"misaligned_features", "math_heavy_activation"},
    "case2": {"misaligned_channels"},
    "case3": {"fp32_without_tf32", "vocab_not_padded"},
}
