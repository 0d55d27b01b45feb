"""Which device and dtype the engine runs on, from the settings' strings."""

from __future__ import annotations

import contextlib
import ctypes
import functools
import gc
import os

import torch

from vigil.engine.config import DTYPES

_DTYPES = {name: getattr(torch, name) for name in DTYPES}


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


def free_memory_bytes(device: torch.device) -> int:
    """Memory the KV cache could take now: free device memory on CUDA, available RAM on CPU."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free)
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))


def return_freed_memory() -> None:
    """Hand the heap's free pages back to the OS (glibc's malloc_trim). Loading a model
    frees hundreds of MB of transients (dequantized copies, unfused projections) that
    glibc otherwise keeps resident for reuse: 200 MB of the bundled chat model's load.
    Elsewhere (another libc) a no-op."""
    gc.collect()  # modules replaced while loading may sit in reference cycles
    trim_heap()


def trim_heap() -> None:
    """glibc's malloc_trim(0) alone: the heap's free pages back to the OS, without a
    garbage collection first. Elsewhere (another libc) a no-op."""
    with contextlib.suppress(OSError, AttributeError):
        _libc().malloc_trim(0)


@functools.cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL("libc.so.6")
