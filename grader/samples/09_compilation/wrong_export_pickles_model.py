"""export_model saves the whole model with torch.save: a pickle that names the model's class,
which a fresh process cannot import."""

# fails: test_export_model, test_export_model_cuda
# %% export_model
import torch


def export_model(model, example_inputs, path) -> None:
    model.eval()
    torch.save(model, path)
