"""export_model exports without dynamic_shapes: the program accepts only the example's batch
size."""

# fails: test_export_model, test_export_model_cuda
# %% export_model
import torch


def export_model(model, example_inputs, path) -> None:
    program = torch.export.export(model.eval(), tuple(example_inputs))
    torch.export.save(program, path)
