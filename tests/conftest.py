"""Session-wide fixtures: one thread for torch, each bundled model loaded once."""

from __future__ import annotations

import os

import pytest
import torch

# Two intra-op threads stall badly on a 2-core machine when anything else runs.
torch.set_num_threads(1)
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def smollm2():  # type: ignore[no-untyped-def]
    from vigil.engine.bundled import SMOLLM2, bundled_source
    from vigil.engine.loaders.llm import load_language_model

    return load_language_model(bundled_source(SMOLLM2), torch.device("cpu"), torch.float32)
