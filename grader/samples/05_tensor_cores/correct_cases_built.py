"""A correct CASE_FINDINGS written differently: built up with set operations, one case a frozenset."""

# %% case_findings
alignment = {"misaligned_features"}
data = {"drop_last_discards_data", "model_called_on_loader", "feature_mismatch"}
CASE_FINDINGS = {
    "case1": alignment | {"unfused_elementwise"} | (data & {"drop_last_discards_data"}),
    "case2": frozenset({"channels_first", "misaligned_channels", "model_called_on_loader"}),
    "case3": alignment | {"vocab_not_padded", "fp32_without_tf32", "feature_mismatch"},
}
