"""What an engine is built with, fixed at start-up.

Torch-free on purpose: the gateway's settings (platform/settings) take the defaults of
the engine settings from these records, which are the one place they are written, and
the gateway process never imports torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from vigil.engine.threads import StepThreads

# The precisions weights, activations and the KV cache may run in (engine/device.py);
# "auto" picks one by device.
DTYPES = ("float32", "bfloat16", "float16")


@dataclass(frozen=True, slots=True)
class EngineConfig:
    block_size: int = 16
    kv_cache_memory_bytes: int = 1 << 30
    max_num_seqs: int = 32
    max_num_batched_tokens: int = 2048
    max_model_len: int | None = None  # None: the model's own context window
    enable_prefix_caching: bool = True
    # A batch-class request waiting this long is admitted ahead of interactive ones.
    batch_aging_s: float = 10.0
    # Decode attention with the native CPU kernel when it builds (engine/kernels).
    native_attention: bool = True
    # CPU threads by step size; None: whatever torch is set to.
    threads: StepThreads | None = None
    # Compiled grammars kept for reuse (least recently used dropped first).
    grammar_cache_size: int = 256

    def __post_init__(self) -> None:
        if self.max_num_batched_tokens < self.max_num_seqs:
            # Otherwise a full batch could not even feed each sequence its one decode token.
            raise ValueError(
                f"max_num_batched_tokens ({self.max_num_batched_tokens}) must be at least "
                f"max_num_seqs ({self.max_num_seqs})"
            )
        if self.block_size < 1 or self.max_num_seqs < 1:
            raise ValueError("block_size and max_num_seqs must be at least 1")
        if self.grammar_cache_size < 1:
            raise ValueError("grammar_cache_size must be at least 1")


@dataclass(frozen=True, slots=True)
class BatcherConfig:
    """The embedding batcher (embed_batcher.py): a batch goes when it has max_batch_size
    items or its first has waited max_wait_ms, whichever comes first."""

    max_batch_size: int = 32
    max_wait_ms: float = 5.0

    def __post_init__(self) -> None:
        if self.max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {self.max_batch_size}")
        if self.max_wait_ms < 0:
            raise ValueError(f"max_wait_ms must be >= 0, got {self.max_wait_ms}")
