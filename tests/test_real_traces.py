"""The trace reader on real GPU traces (``traces/``, recorded by others on A100 and MI250 GPUs).

Every number asserted here was first read from the raw events (see ``traces/README.md``): which
events are host waits, which calls launch kernels (through the runtime, the driver as Triton
does, or HIP on ROCm), which kernels an operator launched, and NCCL's kernels beside compute.
"""

from __future__ import annotations

import collections

import pytest

from grader.runtime import course, trace


@pytest.fixture(scope="module")
def traces() -> dict[str, trace.Trace]:
    names = [p.name.removesuffix(".json.gz") for p in sorted(course.TRACES.glob("*.json.gz"))]
    return {n: trace.real(n) for n in names}


def test_the_traces_travel_with_their_licence():
    assert (course.TRACES / "LICENSE-HolisticTraceAnalysis").read_text().startswith("MIT License")
    assert len(list(course.TRACES.glob("*.json.gz"))) == 7


def test_each_host_wait_counts_once(traces):
    """A100: the runtime call and its ``cuda_sync`` record with the same correlation id are one
    wait (the reader counted 42 for 21 before); a ``Stream Wait Event`` is no host wait."""
    simple = traces["a100_simple_add"]
    names = collections.Counter(e.name for e in simple.syncs)
    assert names == {"cudaStreamSynchronize": 16, "cudaDeviceSynchronize": 5}
    assert (
        len(simple.of("cuda_sync")) == 41
    )  # 16 Stream Sync + 5 Context Sync + 20 Stream Wait Event


def test_an_event_query_is_no_wait_and_an_event_synchronize_is(traces):
    waits = [e.name for e in traces["a100_event_sync"].syncs]
    assert waits == ["cudaStreamSynchronize", "cudaEventSynchronize", "cudaDeviceSynchronize"]
    multi = traces["a100_event_sync_multi_stream"]
    assert [e.name for e in multi.syncs] == ["cudaDeviceSynchronize"]
    assert [e.name for e in multi.of("cuda_sync")].count("Event Sync") == 3  # cudaEventQuery's


def test_launches_through_the_runtime_the_driver_and_hip_are_counted(traces):
    assert traces["a100_simple_add"].launch_count == len(traces["a100_simple_add"].kernels) == 79
    triton = traces["triton_example"]
    assert [e.name for e in triton.launches] == ["cuLaunchKernel"]
    assert [k.name for k in triton.kernels] == ["triton_poi_fused_add_cos_sin_0"]
    rocm = traces["mi250_rocm_train"]
    assert collections.Counter(e.name for e in rocm.launches) == {
        "hipLaunchKernel": 12,
        "hipExtModuleLaunchKernel": 2,
    }
    assert rocm.launch_count == len(rocm.kernels) == 14
    assert [e.name for e in rocm.syncs] == ["hipDeviceSynchronize"]


def test_an_unknown_launch_call_is_refused_never_counted_as_zero():
    events = [
        {"ph": "X", "cat": "cuda_runtime", "name": "xyzLaunchKernel", "ts": 0, "dur": 5},
        {"ph": "X", "cat": "kernel", "name": "k", "ts": 10, "dur": 5, "args": {"stream": 7}},
    ]
    with pytest.raises(ValueError, match="none of its host calls is a launch"):
        _ = trace.parse(events).launch_count


def test_kernels_are_found_through_their_operator_not_their_name(traces):
    """cuBLAS's GEMM kernels are ``ampere_sgemm_*`` on an A100 and ``nvjet_*`` on an H100: the
    operator's launches (by correlation id) find them either way."""
    multi = traces["a100_event_sync_multi_stream"]
    assert [k.name for k in multi.kernels_of("aten::mm")] == ["ampere_sgemm_128x64_nn"] * 3
    assert len(traces["a100_alexnet"].kernels_of("aten::cudnn_convolution")) == 30
    hopper = [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 0, "dur": 20, "tid": 1},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 5, "dur": 3,
         "tid": 1, "args": {"correlation": 9}},
        {"ph": "X", "cat": "kernel", "name": "nvjet_tst_128x64_64x4_1x2_h_bz_TNN", "ts": 30,
         "dur": 40, "args": {"stream": 7, "correlation": 9}},
    ]  # fmt: skip
    h100 = trace.parse(hopper)
    assert h100.kernel_time_us("gemm") == 0  # the old way: matching a name fragment misses it
    assert h100.kernel_time_us(op="aten::mm") == 40
    # the roofline reads the operator's kernels too: 2 GFLOP in 40 us = 50 TFLOP/s, of a
    # compute-bound roofline (intensity 2e9 / 1e6 = 2000 FLOP/byte) capped at 100 TFLOP/s
    assert h100.roofline_fraction("", 2e9, 1e6, 100.0, 3350.0, op="aten::mm") == pytest.approx(0.5)
    with pytest.raises(ValueError, match="named like 'gemm'"):
        h100.roofline_fraction("gemm", 2e9, 1e6, 100.0, 3350.0)
    with pytest.raises(ValueError, match="launched by 'aten::addmm'"):
        h100.roofline_fraction("", 2e9, 1e6, 100.0, 3350.0, op="aten::addmm")
    a100 = multi.kernels_of("aten::mm")
    fraction = multi.roofline_fraction("", 1.0, 1.0, 1e-12, 1e-9, op="aten::mm")  # 1 FLOP/s peak
    assert fraction == pytest.approx(1 / (sum(k.dur for k in a100) * 1e-6))


def test_nccl_kernels_beside_backward_and_how_much_of_them_was_hidden(traces):
    ddp = traces["a100_ddp_nccl_2ranks"]
    comm = ddp.communication_kernels
    kinds = collections.Counter(k.name.split("(")[0] for k in comm)
    assert kinds == {
        "ncclKernel_AllReduce_RING_LL_Sum_float": 15,
        "ncclKernel_Broadcast_RING_LL_Sum_int8_t": 6,
    }
    assert {k.stream for k in comm} == {40}
    assert {k.stream for k in ddp.kernels if k not in comm} == {7}
    assert 0.10 < ddp.communication_overlap_fraction() < 0.20


def test_a_missing_trace_names_those_there_are():
    with pytest.raises(FileNotFoundError, match="a100_simple_add"):
        trace.real("h100_nothing")
