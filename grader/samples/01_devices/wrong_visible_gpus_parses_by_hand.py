"""visible_gpus reads the value itself instead of asking a fresh process: it lists this process's
GPUs in PCI bus order (or fastest first) and picks the indices it parses, keeping those in range.
Wrong where CUDA's rules differ: -1 ends the list, a repeated index hides every GPU, and entries may
be UUIDs."""

# fails: test_visible_gpus, test_visible_gpus_cuda
# %% visible_gpus
import torch


def visible_gpus(cuda_visible_devices, device_order="PCI_BUS_ID"):
    props = [torch.cuda.get_device_properties(i) for i in range(torch.cuda.device_count())]
    if device_order == "PCI_BUS_ID":
        props.sort(key=lambda p: (p.pci_domain_id, p.pci_bus_id, p.pci_device_id))
    else:
        props.sort(key=lambda p: (-p.major, -p.minor, p.pci_bus_id))
    picked = []
    for part in cuda_visible_devices.split(","):
        if part.strip():
            index = int(part)
            if 0 <= index < len(props):
                picked.append(str(props[index].uuid))
    return picked
