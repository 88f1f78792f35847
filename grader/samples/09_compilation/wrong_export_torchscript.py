"""export_model traces the model with TorchScript (torch.jit.trace, deprecated) and saves that:
not an ExportedProgram, so torch.export.load cannot read it."""

# fails: test_export_model, test_export_model_cuda
# %% export_model
import torch


def export_model(model, example_inputs, path) -> None:
    traced = torch.jit.trace(model.eval(), tuple(example_inputs))
    traced.save(path)
