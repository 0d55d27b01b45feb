"""Which device and dtype the engine runs on, from the settings' strings."""

from __future__ import annotations

import torch

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {name!r} asked for, but this torch build sees no CUDA device")
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"device {name!r} is not supported (cpu, cuda, cuda:N or auto)")
    return device


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    if name == "auto":
        # float32 on CPU: half precision matmuls are slow there and less exact.
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    if name not in _DTYPES:
        raise ValueError(f"dtype {name!r} is not supported ({', '.join(_DTYPES)} or auto)")
    return _DTYPES[name]
