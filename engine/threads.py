"""How many CPU threads a step's kernels run on, chosen by the step's size.

On a machine whose cores the engine shares (with the gateway, the worker's event loop
and, on one machine, the clients), one more thread pays only on steps long enough to
absorb its costs. A step of a few rows (decodes) is about 150 short kernels, each a
parallel region: a second thread halves them only when its core is free at that very
moment, and when the gateway holds that core each region waits for it, while the
thread spinning between regions takes the core from the gateway. A step of many rows
(a prompt's prefill, a large decode batch) is matmuls of milliseconds each, which a
second thread nearly halves whatever runs beside it.

Measured on 2 cores (AMD EPYC, AVX-512), `vigil serve` under peer_bench's closed
loop, int4: 16 streams 128 tok/s on one thread for every step, 126 on two, 163 with
two for steps of more than SMALL_STEP_ROWS rows and one for the rest; time to first token at one
stream 288, 282 and 230 ms. float32: 16 streams 64 -> 99 tok/s, first token 529 ->
241 ms.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

SMALL_STEP_ROWS = 8  # a step of up to this many rows (new tokens) is small


@dataclass(frozen=True, slots=True)
class StepThreads:
    small: int  # threads for a step of up to SMALL_STEP_ROWS rows
    large: int  # threads for a larger one

    def __post_init__(self) -> None:
        if self.small < 1 or self.large < 1:
            raise ValueError(f"step threads must be at least 1, got {self.small}, {self.large}")

    def for_rows(self, rows: int) -> int:
        return self.small if rows <= SMALL_STEP_ROWS else self.large


def use_threads(count: int) -> None:
    """Set this thread's kernel thread count; a no-op when it is already that."""
    if torch.get_num_threads() != count:
        torch.set_num_threads(count)
