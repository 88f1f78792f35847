"""visible_gpu_count returns 0 whatever it is asked: right only for "" and "-1"."""


# fails: test_visible_gpu_count, test_visible_gpu_count_cuda
# %% visible_gpu_count
def visible_gpu_count(cuda_visible_devices: str) -> int:
    return 0
