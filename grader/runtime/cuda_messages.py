"""The exact text of CUDA errors that the course's CPU stand-ins word differently.

Without a GPU, notebooks show a mistake on a stand-in (PyTorch's ``meta`` device, the course's
virtual devices), whose error is worded its own way. Beside it they print the message PyTorch
raises on a real GPU, quoted from PyTorch's source with where it comes from, for the releases
the course supports (torch 2.11 to 2.14). ``tests/test_cuda_messages.py`` checks every quoted
template against the installed torch: its literal text must be in ``libtorch_cpu``, the library
that holds these checks for CUDA too (a CPU cannot raise them: PyTorch's ``meta`` device words a
cross-device error its own way).
"""

from __future__ import annotations

import string
import textwrap
from dataclasses import dataclass, field


@dataclass(frozen=True)
class CudaMessage:
    """One error message of PyTorch on CUDA.

    Attributes:
        template: The message, with ``{name}`` for each part PyTorch fills in.
        source: The file and function of PyTorch's source that raises it.
        when: Which operations raise it.
        versions: Since when the text reads so, and which supported releases hold it.
        example: Values for the placeholders, for the course's standard example.
    """

    template: str
    source: str
    when: str
    versions: str
    example: dict[str, str] = field(default_factory=dict)

    def fields(self) -> list[str]:
        """The template's placeholders, in order."""
        return [name for _, name, _, _ in string.Formatter().parse(self.template) if name]

    def literals(self) -> list[str]:
        """The template's fixed text, the pieces between placeholders."""
        return [text for text, _, _, _ in string.Formatter().parse(self.template) if text]

    def render(self, **values: str) -> str:
        """The message as PyTorch prints it, with ``example`` for the values not given."""
        return self.template.format(**{**self.example, **values})


#: The messages, by name.
MESSAGES: dict[str, CudaMessage] = {
    "device_mismatch_argument": CudaMessage(
        template=(
            "Expected all tensors to be on the same device, but got {argument} is on "
            "{device}, different from other tensors on {common_device} "
            "(when checking argument in method {method})"
        ),
        source=(
            "aten/src/ATen/core/adaption.cpp, c10::impl::common_device_check_failure, called "
            "by the device check that PyTorch generates for each CUDA kernel (wrapper_CUDA_*)"
        ),
        when="an operator with a generated device check, e.g. addmm under nn.Linear, mm, index_select",
        versions=(
            "worded so since PyTorch pull request #155085 (opened June 2025), read in the "
            'libraries of torch 2.13 and 2.14; older releases said "...but found at least two '
            "devices, cuda:0 and cpu! (when checking argument for argument mat1 in method "
            'wrapper_CUDA_addmm)"'
        ),
        example={
            "argument": "mat1",
            "device": "cpu",
            "common_device": "cuda:0",
            "method": "wrapper_CUDA_addmm",
        },
    ),
    "device_mismatch_elementwise": CudaMessage(
        template=(
            "Expected all tensors to be on the same device, but found at least two devices, "
            "{common_device} and {device}!"
        ),
        source="aten/src/ATen/TensorIterator.cpp, TensorIteratorBase::compute_types",
        when="an elementwise operator (add, mul, where, ...) on tensors of two devices",
        versions=(
            "the same words in issue reports since 2022, read in the libraries of torch 2.13 "
            "and 2.14"
        ),
        example={"common_device": "cuda:0", "device": "cpu"},
    ),
}


def real_cuda_error(name: str, **values: str) -> str:
    """What a demo prints beside a stand-in's error: CUDA's own message and where it comes from.

    Args:
        name: A key of :data:`MESSAGES`.
        **values: Placeholder values; the message's ``example`` fills the others.
    """
    msg = MESSAGES[name]
    lines = [
        "On a CUDA GPU the same mistake raises:",
        f"  RuntimeError: {msg.render(**values)}",  # one line, as PyTorch prints it
        textwrap.fill(
            f"(PyTorch's source: {msg.source}; {msg.versions})",
            width=100,
            initial_indent="  ",
            subsequent_indent="   ",
            break_on_hyphens=False,
        ),
    ]
    return "\n".join(lines)
