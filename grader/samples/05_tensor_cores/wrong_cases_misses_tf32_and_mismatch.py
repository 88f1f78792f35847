"""CASE_FINDINGS sees only Case 3's sizes: it takes "highest" precision for plain float32 (not a
problem) and misses that 15 features go into a layer that expects 128 (partial credit)."""

# fails: test_case_findings
# %% case_findings
CASE_FINDINGS = {
    "case1": {"misaligned_features", "unfused_elementwise", "drop_last_discards_data"},
    "case2": {"misaligned_channels", "channels_first", "model_called_on_loader"},
    "case3": {"vocab_not_padded", "misaligned_features"},
}
