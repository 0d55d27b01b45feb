"""Session-wide fixtures: one thread for torch, each bundled model loaded once."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import pathlib
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
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


@pytest.fixture(scope="session")
def smollm2_bf16():  # type: ignore[no-untyped-def]
    """The bundled SmolLM2 as `--dtype bfloat16` loads it (its parity bound's subject)."""
    from vigil.engine.bundled import SMOLLM2, bundled_source
    from vigil.engine.loaders.llm import load_language_model

    return load_language_model(bundled_source(SMOLLM2), torch.device("cpu"), torch.bfloat16)


@pytest.fixture(scope="session")
def smollm2_int4():  # type: ignore[no-untyped-def]
    """The bundled SmolLM2 as `--quantization int4` loads it (its parity bound's subject)."""
    from vigil.engine.bundled import SMOLLM2, bundled_source
    from vigil.engine.loaders.llm import load_language_model

    source = bundled_source(SMOLLM2)
    return load_language_model(source, torch.device("cpu"), torch.float32, "int4")


@pytest.fixture(scope="session")
def minilm():  # type: ignore[no-untyped-def]
    from vigil.engine.bundled import MINILM, bundled_source
    from vigil.engine.loaders.embedder import load_embedding_model

    return load_embedding_model(bundled_source(MINILM), torch.device("cpu"), torch.float32)


@pytest.fixture(scope="session")
def smollm2_tokenizer():  # type: ignore[no-untyped-def]
    """The bundled SmolLM2 tokenizer alone (reads the GGUF metadata, no weights)."""
    from vigil.engine.bundled import SMOLLM2, bundled_source
    from vigil.engine.loaders.gguf import GGUFFile

    return GGUFFile(bundled_source(SMOLLM2).path).tokenizer()


@pytest.fixture(scope="session")
def smollm2_hf():  # type: ignore[no-untyped-def]
    """transformers' own model and tokenizer from the bundled GGUF: the parity reference
    (needs accelerate; about 15 s)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from vigil.engine.bundled import SMOLLM2, bundled_source

    path = bundled_source(SMOLLM2).path
    model = AutoModelForCausalLM.from_pretrained(
        path.parent, gguf_file=path.name, dtype=torch.float32
    ).eval()
    tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    return model, tokenizer


def _assert_greedy_runs_agree(
    tokens_a: list[int],
    logits_a: list[torch.Tensor],
    tokens_b: list[int],
    logits_b: list[torch.Tensor],
    *,
    atol: float,
) -> int | None:
    """Two greedy runs of one model on one prompt agree token for token.

    Up to the first difference both runs saw the same context, so their logits must agree
    within atol at every step. They may part only at a near-tie: float rounding (another
    kernel, another batch shape) can flip two tokens whose logits are that close, and then
    both runs must see the two within 2 * atol. Nothing after that step is compared (the
    contexts differ from there). Returns the step where they parted, or None.
    """
    assert len(logits_a) == len(tokens_a) and len(logits_b) == len(tokens_b)
    steps = zip(tokens_a, tokens_b, logits_a, logits_b, strict=False)  # may part early
    for step, (ta, tb, la, lb) in enumerate(steps):
        diff = (la - lb).abs().max().item()
        assert diff <= atol, f"step {step}: logits differ by {diff:.3g} (atol {atol})"
        assert ta == int(la.argmax()) and tb == int(lb.argmax()), f"step {step}: not argmax"
        if ta != tb:
            gaps = (abs(la[ta] - la[tb]).item(), abs(lb[ta] - lb[tb]).item())
            assert max(gaps) <= 2 * atol, f"step {step}: {ta} vs {tb} is no near-tie ({gaps})"
            return step
    assert tokens_a == tokens_b, "one run stopped before the other without a near-tie"
    return None


@pytest.fixture
def assert_greedy_runs_agree():  # type: ignore[no-untyped-def]
    return _assert_greedy_runs_agree


# ---- a real `vigil serve` process, shared by the integration and browser tests ----


@dataclasses.dataclass(frozen=True)
class RunningServer:
    base_url: str
    data_dir: pathlib.Path
    log_path: pathlib.Path
    pid: int


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def running_vigil(data_dir: pathlib.Path, *args: str) -> Iterator[RunningServer]:
    """`vigil serve` on 127.0.0.1 with extra flags, started through its console script,
    ready to serve; stopped on exit."""
    log_path = data_dir / "server.log"
    port = _free_port()
    vigil = pathlib.Path(sys.executable).with_name("vigil")
    cmd = [
        str(vigil),
        "serve",
        "--port",
        str(port),
        "--data-dir",
        str(data_dir),
        "--torch-threads",
        "1",
        *args,
    ]
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    base_url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    try:
        while True:
            if proc.poll() is not None:
                pytest.fail(f"vigil serve exited with {proc.returncode}:\n{log_path.read_text()}")
            if time.monotonic() > deadline:
                pytest.fail(f"vigil serve not ready in 180 s:\n{log_path.read_text()}")
            try:
                if httpx.get(f"{base_url}/readyz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.3)
        yield RunningServer(base_url, data_dir, log_path, proc.pid)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _create_user(data_dir: pathlib.Path, username: str, password: str, role: str) -> None:
    """A control-plane user, made the way an operator makes one (`vigil admin create`)."""
    vigil = pathlib.Path(sys.executable).with_name("vigil")
    cmd = [str(vigil), "admin", "create", "--username", username, "--role", role]
    subprocess.run(
        [*cmd, "--password-stdin", "--data-dir", str(data_dir)],
        input=password,
        text=True,
        check=True,
        capture_output=True,
    )


@pytest.fixture(scope="session")
def create_user():  # type: ignore[no-untyped-def]
    """`_create_user`, for tests whose server needs a user before it starts."""
    return _create_user


@pytest.fixture(scope="session")
def launch_vigil():  # type: ignore[no-untyped-def]
    """`running_vigil` for tests that need a server of their own."""
    return running_vigil


@pytest.fixture(scope="session")
def vigil_server(tmp_path_factory):  # type: ignore[no-untyped-def]
    """The default `vigil serve`: bundled models, open auth on loopback."""
    with running_vigil(tmp_path_factory.mktemp("vigil-data"), "--sse-keepalive", "0.5") as s:
        yield s


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Browser tests run last: Playwright's sync API keeps an event loop running in the
    main thread for the rest of the session, which async tests after it cannot share."""
    items.sort(key=lambda item: item.get_closest_marker("browser") is not None)


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory):  # type: ignore[no-untyped-def]
    """A private `redis-server` for the session, on a port of its own."""
    from redis_server import PrivateRedis

    redis = PrivateRedis(tmp_path_factory.mktemp("redis"))
    redis.start()
    try:
        yield redis
    finally:
        redis.stop()
