"""06_amp: the checks accept the reference and written-differently answers and reject every
listed mistake (on the CPU with float16/bfloat16 autocast and the CPU GradScaler); the CIFAR-10
loader works on a real CIFAR-format archive and falls back to FakeData with a notice."""

import functools
import http.server
import inspect
import pickle
import tarfile
import threading

import numpy as np
import pytest
import torch
import torchvision

from grader.checks import ch06_amp as checks
from grader.checks.common import CheckFailed
from grader.runtime import datasets

from .helpers import (
    assert_sample_scores_as_declared,
    exercise_params,
    reference_fn,
    run_every_check,
    sample_params,
)

A = "06_amp"


@pytest.mark.parametrize(
    "name, signature",
    [
        (
            "amp_train_step",
            "(model, inputs, targets, loss_fn, optimizer, scaler, *, device_type: str, "
            "dtype=torch.float16, max_grad_norm: float | None = None) -> torch.Tensor",
        ),
        (
            "train_amp",
            "(model, loader, epochs, lr, device, dtype, val_loader=None) -> list[float]",
        ),
    ],
)
def test_reference_has_the_curriculum_signature(name, signature):
    assert str(inspect.signature(reference_fn(A, name))) == signature


@pytest.mark.parametrize(
    "name", exercise_params(A, ["autocast_dtypes", "amp_train_step", "train_amp"])
)
def test_reference_passes_every_check(name, capsys):
    value = reference_fn(A, "AUTOCAST_DTYPES" if name == "autocast_dtypes" else name)
    run_every_check(checks, name, value)
    assert "OK:" in capsys.readouterr().out


def test_module_is_judged_in_the_grading_process():
    assert checks.JUDGED_IN_GRADER is True


@pytest.mark.parametrize("sample", sample_params(A))
def test_sample_scores_as_declared(sample):
    assert_sample_scores_as_declared(sample)


def test_reference_autocast_dtypes_match_the_documented_cuda_policy():
    ref = reference_fn(A, "AUTOCAST_DTYPES")
    assert {k: ref[f"cuda/{k}"] for k in checks.AUTOCAST_CASES} == checks.DOCUMENTED_CUDA_FLOAT16


def test_documented_cuda_policy_is_what_torch_cuda_autocast_does():
    """DOCUMENTED_CUDA_FLOAT16 is what torch's CUDA autocast kernels give, run here without a GPU
    on fake CUDA tensors (FakeTensorMode) with CUDA autocast switched on below torch.autocast,
    which refuses "cuda" on a machine without one."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    real = checks.autocast_operands("cpu")
    before = torch.is_autocast_enabled("cuda"), torch.get_autocast_dtype("cuda")
    with FakeTensorMode():
        fake = {k: torch.empty(v.shape, dtype=v.dtype, device="cuda") for k, v in real.items()}
        torch.set_autocast_enabled("cuda", True)
        torch.set_autocast_dtype("cuda", torch.float16)
        torch.autocast_increment_nesting()
        try:
            got = {name: fn(fake).dtype for name, (_, fn) in checks.AUTOCAST_CASES.items()}
        finally:
            torch.autocast_decrement_nesting()
            torch.set_autocast_enabled("cuda", before[0])
            torch.set_autocast_dtype("cuda", before[1])
    assert got == checks.DOCUMENTED_CUDA_FLOAT16


def test_autocast_operands_follow_their_contract():
    t = checks.autocast_operands()
    shapes = {k: (tuple(v.shape), v.dtype) for k, v in t.items()}
    f32 = torch.float32
    assert shapes == {
        "x": ((4, 8), f32),
        "w": ((8, 8), f32),
        "images": ((1, 3, 8, 8), f32),
        "kernel": ((4, 3, 3, 3), f32),
        "target": ((4, 8), f32),
        "labels": ((4,), torch.int64),
    }
    assert 0 <= int(t["labels"].min()) and int(t["labels"].max()) < 8
    assert torch.equal(t["x"], checks.autocast_operands()["x"])


def _visible_failure(answers) -> str:
    from grader.checks.common import CheckFailed

    with pytest.raises(CheckFailed) as failure:
        checks.check_autocast_dtypes(answers)
    return str(failure.value)


@pytest.mark.parametrize(
    "value, says",
    [(None, "still None"), ("torch.float16", "a string is not a dtype"), (16, "torch.dtype")],
)
def test_visible_check_names_a_cuda_entry_that_is_not_a_dtype(value, says):
    answers = dict(reference_fn(A, "AUTOCAST_DTYPES"), **{"cuda/sum_of_linear": value})
    message = _visible_failure(answers)
    assert "cuda/sum_of_linear" in message and says in message
    assert "lower-precision list" not in message


def test_visible_check_compares_cuda_entries_with_the_documented_policy():
    answers = dict(reference_fn(A, "AUTOCAST_DTYPES"), **{"cuda/softmax_of_linear": torch.float16})
    message = _visible_failure(answers)
    assert "cuda/softmax_of_linear" in message and "documented CUDA policy" in message


def test_cpu_policy_differs_from_cuda_where_the_lesson_says():
    """softmax, sum and layer_norm keep float16 on the CPU (the lesson's point about policies)."""
    cpu = checks.observed_autocast_dtypes("cpu")
    differ = {k for k in cpu if cpu[k] != checks.DOCUMENTED_CUDA_FLOAT16[k]}
    assert differ == {"softmax_of_linear", "sum_of_linear", "layer_norm_of_linear"}


def _write_cifar_archive(folder, images_per_batch=10):
    """A CIFAR-10-format archive: the same pickled batches as the real one, tiny."""
    rng = np.random.default_rng(0)
    root = folder / "src" / "cifar-10-batches-py"
    root.mkdir(parents=True)
    names = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
    for name in names:
        batch = {
            "data": rng.integers(0, 256, (images_per_batch, 3072), dtype=np.uint8),
            "labels": rng.integers(0, 10, images_per_batch).tolist(),
        }
        (root / name).write_bytes(pickle.dumps(batch))
    meta = {"label_names": [f"class_{i}" for i in range(10)]}
    (root / "batches.meta").write_bytes(pickle.dumps(meta))
    archive = folder / "cifar-10-python.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(root, arcname="cifar-10-batches-py")
    return archive, names


@pytest.fixture
def http_folder(tmp_path):
    """Serve tmp_path over HTTP on a free loopback port; yields the base URL."""

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    class Server(http.server.ThreadingHTTPServer):
        def handle_error(self, request, client_address):
            pass  # a client closing early (torchvision's HEAD probe) is not an error here

    server = Server(("127.0.0.1", 0), functools.partial(Quiet, directory=str(tmp_path)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_cifar10_downloads_and_reads_a_cifar_format_archive(
    tmp_path, http_folder, monkeypatch, capsys
):
    """The real torchvision download-and-extract path, fed over HTTP from a local archive;
    only the checksums of the 163 MB original are switched off."""
    archive, names = _write_cifar_archive(tmp_path)
    cls = torchvision.datasets.CIFAR10
    monkeypatch.setattr(cls, "url", f"{http_folder}/{archive.name}")
    monkeypatch.setattr(cls, "tgz_md5", None)
    monkeypatch.setattr(cls, "train_list", [[n, None] for n in names[:5]])
    monkeypatch.setattr(cls, "test_list", [[names[5], None]])
    monkeypatch.setattr(cls, "meta", dict(cls.meta, md5=None))
    data_root = tmp_path / "data"
    train, name = datasets.cifar10(data_root, transform=torchvision.transforms.ToTensor())
    assert name == "CIFAR-10"
    assert len(train) == 50
    image, label = train[0]
    assert image.shape == (3, 32, 32) and image.dtype == torch.float32 and 0 <= label < 10
    test, _ = datasets.cifar10(data_root, train=False)
    assert len(test) == 10
    assert "NOTICE" not in capsys.readouterr().out


def test_cifar10_falls_back_to_fakedata_with_a_notice(tmp_path, monkeypatch, capsys):
    """Port 9 (discard) refuses the connection at once, as an offline machine does."""
    monkeypatch.setattr(torchvision.datasets.CIFAR10, "url", "http://127.0.0.1:9/absent.tar.gz")
    data, name = datasets.cifar10(tmp_path / "data", fake_size=12)
    assert name.startswith("FakeData")
    assert len(data) == 12
    image, label = data[0]
    assert image.size == (32, 32) and 0 <= label < 10
    out = capsys.readouterr().out
    assert "NOTICE: CIFAR-10 could not be loaded" in out and "accuracies mean nothing" in out


def test_resnet_demo_data_offline_with_gpu_sizes(tmp_path, monkeypatch, capsys):
    """Issue 13.5: on a GPU without internet the demo asked a 1024-image FakeData for 10,000
    images (IndexError on the first batch). The GPU sizes are cut to what the data set has."""
    monkeypatch.setattr(torchvision.datasets.CIFAR10, "url", "http://127.0.0.1:9/absent.tar.gz")
    data = checks.resnet_demo_data(on_gpu=True, root=tmp_path / "data")
    assert data["name"].startswith("FakeData") and data["dtype"] == torch.float16
    assert data["n_train"] == len(data["train"].dataset) == 1024
    assert data["n_val"] == len(data["val"].dataset) == 1024
    for loader in (data["train"], data["val"]):
        images, labels = next(iter(loader))
        assert images.shape == (128, 3, 32, 32) and labels.shape == (128,)
    assert sum(len(y) for _, y in data["train"]) == 1024  # every index exists
    assert "NOTICE" in capsys.readouterr().out


def test_resnet_demo_data_cpu_sizes(tmp_path, monkeypatch):
    monkeypatch.setattr(torchvision.datasets.CIFAR10, "url", "http://127.0.0.1:9/absent.tar.gz")
    data = checks.resnet_demo_data(on_gpu=False, root=tmp_path / "data")
    assert (data["n_train"], data["n_val"], data["dtype"]) == (128, 64, torch.bfloat16)


def test_autocast_answers_are_not_printed_by_the_notebook():
    """The notebook's demo measures other ops than the exercise's: the answers are derived."""
    from grader.runtime import course

    nb = course.read(course.source_path(A))
    text = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    assert "observed_autocast_dtypes" not in text and "format_autocast_table" not in text
    cell = next(c.source for c in nb.cells if "def output_dtypes" in c.source)
    demo = cell.split("demo_ops = {")[1].split("\n}")[0]
    for op in ("F.softmax", "layer_norm", "mse_loss", "cross_entropy", "F.conv2d", "F.relu"):
        assert op not in demo
    assert "loss.dtype" not in cell


def test_validation_check_catches_training_on_the_validation_set():
    """A 'validation' that steps the optimizer changes training: caught."""
    from grader.checks.common import CheckFailed

    ref = reference_fn(A, "train_amp")

    def trains_on_val(model, loader, epochs, lr, device, dtype, val_loader=None):
        losses = ref(model, loader, epochs, lr, device, dtype, val_loader)
        if val_loader is not None:
            ref(model, val_loader, 1, lr, device, dtype)
        return losses

    with pytest.raises(CheckFailed):
        checks.check_train_amp(trains_on_val)


def test_amp_step_check_explains_a_missing_update():
    from grader.checks.common import CheckFailed

    def no_update(model, x, y, loss_fn, opt, scaler, *, device_type, dtype, max_grad_norm=None):
        opt.zero_grad()
        with torch.autocast(device_type, dtype=dtype):
            loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        return loss.detach()

    with pytest.raises(CheckFailed, match=r"unscale_\(\) has already been called|update"):
        checks.check_amp_train_step(no_update)


def _never_zeroes_grads():
    from .helpers import answer_fn

    return answer_fn(A, "wrong_step_never_zeroes_grads", "amp_train_step")


def test_gradients_never_zeroed_hardly_show_at_a_large_scale():
    """Why the CUDA check of amp_train_step passed wrong_step_never_zeroes_grads on an H200: at
    the scaler's scale S, scaler.step leaves the gradients unscaled and the next step's unscale
    divides those leftovers by S again, so 4 steps at 4096 move the parameters by about 3e-6
    (the CUDA tolerance is 1e-4). Held at scale 1 they count in full."""
    ref = reference_fn(A, "amp_train_step")
    diffs = {}
    for name, spec in (("large", {"steps": 4}), ("one", {"steps": 4, **checks._SCALE_ONE})):
        wrong = checks._run_steps(_never_zeroes_grads(), **spec)
        diffs[name] = checks._max_state_diff(
            wrong["state"], checks._run_steps(ref, **spec)["state"]
        )
    assert diffs["large"] < 1e-5 and diffs["one"] > 1e-2, diffs


@pytest.mark.skipif(torch.cuda.is_available(), reason="plays a GPU on a CPU-only machine")
@pytest.mark.parametrize(
    "name, passes",
    [
        ("reference", True),
        ("correct_step_model_zero_grad", True),
        ("wrong_step_never_zeroes_grads", False),
        ("wrong_step_clips_before_unscale", False),
    ],
)
def test_amp_train_step_cuda_check_logic_on_the_cpu(monkeypatch, name, passes):
    """The CUDA check's runs and comparisons, played on the CPU (its device moved to "cpu")."""
    from grader.checks.common import CheckFailed

    from .helpers import answer_fn

    run = checks._run_steps
    monkeypatch.setattr(
        checks, "_run_steps", lambda step_fn, **spec: run(step_fn, **{**spec, "device": "cpu"})
    )
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    fn = answer_fn(A, name, "amp_train_step")
    if passes:
        checks.check_amp_train_step_cuda(fn)
    else:
        with pytest.raises(CheckFailed, match="CUDA parameters and scale"):
            checks.check_amp_train_step_cuda(fn)


@pytest.mark.parametrize(
    "printed, ok",
    [
        (
            "epoch 1/2: train loss 0.9000 | val loss 0.6512, val accuracy 71.4%\n"
            "epoch 2/2: train loss 0.7000 | val loss 0.5001, val accuracy 80.0%",
            True,
        ),
        ("[0] accuracy=0.7143 loss=0.651\n[1] accuracy=0.8000 loss=0.500", True),
        ("loss 0.65 acc 71\nloss 0.50 acc 80", True),  # fewer digits, a bare percentage
        ("val loss 0.6512, val accuracy 72.9%\nval loss 0.5001, val accuracy 80.0%", False),
        ("val loss 0.6605, val accuracy 71.4%\nval loss 0.5001, val accuracy 80.0%", False),
        ("val loss 0.6512, val accuracy 71.4%", False),  # the second epoch missing
        ("val loss 0.5001, val accuracy 80.0%\nval loss 0.6512, val accuracy 71.4%", False),
        (" ".join(f"{i / 1000:.3f}" for i in range(1000)) + "\n" * 2, False),  # every number
    ],
)
def test_printed_validation_figures_are_read_in_any_format(printed, ok):
    expected = [(0.6512, 0.714), (0.5001, 0.8)]
    if ok:
        checks._check_printed_validation(printed, expected)
    else:
        with pytest.raises(CheckFailed, match="validation loss and accuracy"):
            checks._check_printed_validation(printed, expected)
