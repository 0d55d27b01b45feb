"""Native CPU kernels, compiled on first use with the machine's C++ compiler.

Optional: when the compiler or ninja is missing, or the build fails, the engine
runs the pure PyTorch path and says so once in the log. The build is cached in
TORCH_EXTENSIONS_DIR (default ~/.cache/torch_extensions)/vigil, so only the first
start on a machine pays for it (about half a minute).

Each build runs in a folder of its own and its library is moved into the cache when
done, so a start stopped mid-build (Ctrl-C, a killed pod) leaves no lock that would
make every later start wait forever, and two starts at once each build and finish.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import logging
import os
import platform
import tempfile
from pathlib import Path
from types import ModuleType

log = logging.getLogger(__name__)

_HERE = Path(__file__).parent
# -fopenmp: at::parallel_for is OpenMP pragmas in a header, which without it run on one
# thread; the library then uses the OpenMP runtime torch loaded (libgomp.so.1).
CFLAGS = ["-O3", "-march=native", "-ffast-math", "-fopenmp"]


@functools.cache
def paged_attention_ext() -> ModuleType | None:
    """Decode attention read in place from the paged KV cache."""
    return _native("paged_attention")


@functools.cache
def int4_decode_ext() -> ModuleType | None:
    """Every decoder layer of an all-decode int4 step in one call."""
    return _native("int4_decode")


@functools.cache
def packed_matmul_ext() -> ModuleType | None:
    """int4 and int8 weight-only matmuls: packed_matmul.h's for CPUs with AVX2 and no
    AVX-512, vnni_matmul.h's for CPUs with AVX-512 VNNI (has_vnni)."""
    return _native("packed_matmul")


def _native(stem: str) -> ModuleType | None:
    source = _HERE / f"{stem}.cpp"
    try:
        # -march=native: the build is only valid on this kind of CPU, so the cached
        # build is named for it, and for its sources: checkouts of different sources
        # on one machine each keep their own build.
        sources = [source, *sorted(_HERE.glob("*.h"))]  # and the headers it may include
        digest = hashlib.sha1(f"{cpu_identity()} | {' '.join(CFLAGS)}".encode())
        for path in sources:
            digest.update(path.read_bytes())
        key = digest.hexdigest()[:8]
        return cached_or_built(f"vigil_{stem}_{key}", source, cache_dir())
    except Exception as exc:  # no compiler, no ninja, a failed build: use PyTorch
        log.warning("native %s unavailable (%s); using the PyTorch path", stem, exc)
        return None


def cache_dir() -> Path:
    root = os.environ.get("TORCH_EXTENSIONS_DIR") or Path.home() / ".cache" / "torch_extensions"
    return Path(root) / "vigil"


def cached_or_built(name: str, source: Path, cache: Path) -> ModuleType:
    library = cache / f"{name}.so"
    if library.exists():
        return _import(name, library)
    from torch.utils.cpp_extension import load

    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache, prefix=f"{name}.build-") as build:
        module = load(
            name=name,
            sources=[str(source)],
            build_directory=build,
            extra_cflags=CFLAGS,
            extra_ldflags=["-fopenmp"],
            verbose=False,
        )
        os.replace(Path(build) / f"{name}.so", library)  # atomic: whole or absent
    return module


def _import(name: str, library: Path) -> ModuleType:
    import torch  # noqa: F401  (the library links against torch's, loaded first)

    spec = importlib.util.spec_from_file_location(name, library)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {library}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def cpu_identity() -> str:
    """The CPU's model name and its instruction-set flags. The name alone is not
    enough: a cloud's "AMD EPYC" is one name for CPUs with and without AVX-512, and a
    build for the one stops the other with an illegal instruction."""
    try:
        fields: dict[str, str] = {}
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            fields.setdefault(key.strip(), value.strip())
        if "flags" in fields or "model name" in fields:
            return f"{fields.get('model name', '')} | {fields.get('flags', '')}"
    except OSError:
        pass
    return platform.machine()
