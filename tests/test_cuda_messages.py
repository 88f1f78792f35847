"""The CUDA error messages the notebooks quote beside a CPU stand-in's error: their text is
PyTorch's (checked against the installed torch's library), and the notebooks quote it right."""

import mmap
import re
from pathlib import Path

import pytest
import torch
from torch import nn

from grader.runtime import course
from grader.runtime.cuda_messages import MESSAGES, real_cuda_error


def _torch_cpu_library() -> Path | None:
    """The installed torch's ``libtorch_cpu`` (where both device checks are compiled)."""
    lib = Path(torch.__file__).parent / "lib"
    found = sorted(lib.glob("libtorch_cpu.*")) + sorted(lib.glob("torch_cpu.dll"))
    return found[0] if found else None


@pytest.mark.parametrize("name", sorted(MESSAGES))
def test_the_quoted_template_is_the_installed_torchs_text(name):
    path = _torch_cpu_library()
    if path is None:
        pytest.skip("no libtorch_cpu in this torch installation")
    literals = [text for text in MESSAGES[name].literals() if len(text) > 3]
    with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
        missing = [text for text in literals if data.find(text.encode()) < 0]
    assert not missing, f"torch {torch.__version__} ({path.name}) does not hold {missing}"


def test_the_standard_examples_read_as_pytorch_prints_them():
    assert MESSAGES["device_mismatch_argument"].render() == (
        "Expected all tensors to be on the same device, but got mat1 is on cpu, different from "
        "other tensors on cuda:0 (when checking argument in method wrapper_CUDA_addmm)"
    )
    assert MESSAGES["device_mismatch_elementwise"].render(device="cuda:1") == (
        "Expected all tensors to be on the same device, but found at least two devices, "
        "cuda:0 and cuda:1!"
    )
    for msg in MESSAGES.values():
        assert set(msg.fields()) == set(msg.example), msg.template
        assert msg.source.startswith("aten/src/ATen/") and ".cpp" in msg.source


def test_the_meta_stand_in_words_the_error_otherwise_so_01_prints_cudas():
    """Why 01's demo prints CUDA's text: on ``meta`` the same mistake reads differently."""
    model = nn.Linear(4, 2).to("meta")
    with pytest.raises(RuntimeError) as err:
        model(torch.randn(8, 4))
    assert not str(err.value).startswith("Expected all tensors to be on the same device")
    demo = next(
        c.source
        for c in course.read(course.source_path("01_devices")).cells
        if 'nn.Linear(4, 2).to("cuda:0"' in c.source
    )
    assert 'real_cuda_error("device_mismatch_argument")' in demo
    text = real_cuda_error("device_mismatch_argument")
    assert "RuntimeError: " + MESSAGES["device_mismatch_argument"].render() in text
    assert "adaption.cpp" in text and "2.14" in text


def test_07_quotes_the_real_messages_for_its_virtual_devices():
    md = "\n".join(c.source for c in course.read(course.source_path("07_multi_gpu")).cells)
    argument = MESSAGES["device_mismatch_argument"].render(device="cuda:0", common_device="cuda:1")
    elementwise = MESSAGES["device_mismatch_elementwise"].render(
        common_device="cuda:0", device="cuda:1"
    )
    for quoted in (argument, elementwise):
        assert re.search(re.escape(f"RuntimeError: {quoted}"), md), quoted
