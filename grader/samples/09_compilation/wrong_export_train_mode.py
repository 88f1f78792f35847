"""export_model exports the model in training mode: dropout stays random and batch norm uses the
statistics of each batch."""

# fails: test_export_model, test_export_model_cuda
# %% export_model
import torch


def export_model(model, example_inputs, path) -> None:
    batch = torch.export.Dim("batch")
    program = torch.export.export(
        model, tuple(example_inputs), dynamic_shapes=tuple({0: batch} for _ in example_inputs)
    )
    torch.export.save(program, path)
