"""export_model saves the state_dict: only the weights, so loading needs the model's code."""

# fails: test_export_model, test_export_model_cuda
# %% export_model
import torch


def export_model(model, example_inputs, path) -> None:
    torch.save(model.eval().state_dict(), path)
