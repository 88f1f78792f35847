"""CASE_FINDINGS misses Case 2's channels-first layout and Case 3's misaligned vocabulary layer
(partial credit: 2 of 3 cases' worth, not full marks)."""

# fails: test_case_findings
# %% case_findings
CASE_FINDINGS = {
    "case1": {"misaligned_features", "unfused_elementwise", "drop_last_discards_data"},
    "case2": {"misaligned_channels", "model_called_on_loader"},
    "case3": {"fp32_without_tf32", "vocab_not_padded", "feature_mismatch"},
}
