"""export_model marks the batch dimension dynamic for the first input only: a model with a second
input (a mask) is exported for the example's batch size of that input. Its named Dim("batch") has
no range either: on CUDA, where batch norm limits the batch to 65535, export refuses it."""

# fails: test_export_model
# fails-on-gpu: test_export_model_cuda
# %% export_model
import torch


def export_model(model, example_inputs, path) -> None:
    batch = torch.export.Dim("batch")
    shapes = [{0: batch}] + [None] * (len(example_inputs) - 1)
    model.eval()
    program = torch.export.export(model, tuple(example_inputs), dynamic_shapes=shapes)
    torch.export.save(program, path)
