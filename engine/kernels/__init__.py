"""Native CPU kernels, compiled on first use with the machine's C++ compiler.

Optional: when the compiler or ninja is missing, or the build fails, the engine
runs the pure PyTorch path and says so once in the log. The build is cached
(TORCH_EXTENSIONS_DIR, default ~/.cache/torch_extensions), so only the first
start on a machine pays for it (about half a minute).
"""

from __future__ import annotations

import functools
import hashlib
import logging
import platform
from pathlib import Path
from types import ModuleType

log = logging.getLogger(__name__)

_SOURCE = Path(__file__).with_name("paged_attention.cpp")


@functools.cache
def paged_attention_ext() -> ModuleType | None:
    try:
        from torch.utils.cpp_extension import load

        # -march=native: the build is only valid on this kind of CPU, so the cached
        # build is named for it, and for its source: checkouts of different sources
        # on one machine each keep their own build instead of rebuilding a shared one.
        key = hashlib.sha1(_cpu_model().encode() + _SOURCE.read_bytes()).hexdigest()[:8]
        return load(
            name=f"vigil_paged_attention_{key}",
            sources=[str(_SOURCE)],
            extra_cflags=["-O3", "-march=native", "-ffast-math"],
            verbose=False,
        )
    except Exception as exc:  # no compiler, no ninja, a failed build: use PyTorch
        log.warning("native paged attention unavailable (%s); using the PyTorch path", exc)
        return None


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.machine()
