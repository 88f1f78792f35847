"""A correct export_model written differently: Dim.AUTO lets export find the dynamic dimensions
(the batch among them), and the model's mode is put back by hand, module by module."""

# %% export_model
import torch
from torch.export import Dim


def export_model(model, example_inputs, path) -> None:
    modes = {m: m.training for m in model.modules()}
    model.eval()
    shapes = [{0: Dim.AUTO} for _ in example_inputs]
    try:
        program = torch.export.export(model, (*example_inputs,), dynamic_shapes=shapes)
    finally:
        for module, training in modes.items():
            module.training = training
    torch.export.save(program, path)
