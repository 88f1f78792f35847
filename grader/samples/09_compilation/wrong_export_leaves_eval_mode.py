"""export_model exports in eval mode, as asked, but leaves the model there: whoever trains it
afterwards trains without dropout and with frozen batch-norm statistics, unaware."""

# fails: test_export_model
# %% export_model
import torch


def export_model(model, example_inputs, path) -> None:
    model.eval()
    shapes = tuple({0: torch.export.Dim.DYNAMIC} for _ in example_inputs)
    torch.export.save(
        torch.export.export(model, tuple(example_inputs), dynamic_shapes=shapes), path
    )
