"""time_gpu stops the clock right after fn returns, without waiting for the GPU."""

# fails-on-cpu: test_time_gpu
# fails-on-gpu: test_time_gpu_cuda
# %% time_gpu
import statistics
import time


def time_gpu(fn, *args, warmup=3, repeat=10):
    for _ in range(warmup):
        fn(*args)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn(*args)
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)
