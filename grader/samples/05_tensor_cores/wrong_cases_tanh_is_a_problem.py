"""CASE_FINDINGS sees only Tensor Core problems and calls Tanh one (the course's old answer key):
a math-heavy activation is not a Tensor Core problem, and the data-loading bugs are missed."""

# fails: test_case_findings
# %% case_findings
CASE_FINDINGS = {
    "case1": {"misaligned_features", "math_heavy_activation"},
    "case2": {"misaligned_channels", "channels_first"},
    "case3": {"fp32_without_tf32", "vocab_not_padded", "misaligned_features"},
}
