"""export_model puts the model back with model.train() whatever its mode was: a model handed over
in eval mode comes back in training mode."""

# fails: test_export_model
# %% export_model
import torch


def export_model(model, example_inputs, path) -> None:
    model.eval()
    shapes = tuple({0: torch.export.Dim.DYNAMIC} for _ in example_inputs)
    program = torch.export.export(model, tuple(example_inputs), dynamic_shapes=shapes)
    model.train()
    torch.export.save(program, path)
