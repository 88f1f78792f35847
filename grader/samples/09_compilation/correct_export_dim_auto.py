"""A correct export_model written differently: Dim.AUTO lets export find the dynamic dimensions
(the batch among them), and the model is left in eval mode."""

# %% export_model
import torch
from torch.export import Dim


def export_model(model, example_inputs, path) -> None:
    model.eval()
    shapes = [{0: Dim.AUTO} for _ in example_inputs]
    torch.export.save(torch.export.export(model, (*example_inputs,), dynamic_shapes=shapes), path)
