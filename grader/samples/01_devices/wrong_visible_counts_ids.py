"""visible_gpu_count counts the ids in the string instead of asking CUDA ("-1" counts as one GPU)."""


# fails: test_visible_gpu_count, test_visible_gpu_count_cuda
# %% visible_gpu_count
def visible_gpu_count(cuda_visible_devices):
    return len([part for part in cuda_visible_devices.split(",") if part.strip()])
