"""The API fuzzed from its own OpenAPI schema (schemathesis): whatever a client sends, valid
or not, the server answers without a 5xx, with a status code the schema documents for the
operation, and with headers and a body (JSON, or each event of an SSE stream) that match
what the schema says for that status; and a body the schema calls invalid is refused.

The server under test caps every generation at 8 tokens and prompts at 256 (a deployments
file), so that a fuzzed request costs at most a short prefill and a few decode steps.

The schema comes from the running server, so it cannot be loaded at import; and
schemathesis's entry point for a schema from a fixture (`schemathesis.pytest.from_fixture`)
fails under pytest 9.2 (it reads `Function._nodeid`, which pytest no longer has). So each
operation gets a plain Hypothesis test of `APIOperation.as_strategy` cases, valid and
invalid, through the same checks.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import (
    content_type_conformance,
    negative_data_rejection,
    not_a_server_error,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

pytestmark = pytest.mark.slow

LLM = "smollm2-135m-instruct"
EMBEDDER = "all-minilm-l6-v2"
MAX_TOKENS = 8
MAX_EXAMPLES = 25  # per operation, valid and invalid cases together
CONFIG = f"""
[[deployments]]
name = "{LLM}"
max_tokens = {MAX_TOKENS}
max_prompt_tokens = 256
slo = {{ ttft_p99_s = 60, min_tokens_per_s = 0.1 }}
"""
OPERATIONS = [
    "POST /v1/chat/completions",
    "POST /v1/completions",
    "POST /v1/embeddings",
    "GET /v1/models",
    "GET /v1/models/{model_id}",
    "GET /healthz",
    "GET /readyz",
    "GET /metrics",
]
ADMIN_READS = [
    "GET /api/admin/models",
    "GET /api/admin/models/{name}",
    "GET /api/admin/models/{name}/versions",
    "GET /api/admin/deployments",
    "GET /api/admin/deployments/{name}",
    "GET /api/admin/deployments/{name}/slo",
    "GET /api/admin/deployments/{name}/history",
    "GET /api/admin/webhooks",
    "GET /api/admin/audit",
    "GET /api/admin/replicas",
    "GET /api/admin/replicas/scrape-targets",
    "GET /api/admin/traces",
    "GET /api/admin/traces/{trace_id}",
    "GET /api/admin/slo",
    "GET /api/admin/slo/{name}",
    "GET /api/admin/alerts",
    "GET /api/admin/decisions",
    "GET /api/admin/webhooks/{name}/deliveries",
    "GET /api/admin/keys",
    "GET /api/admin/users",
]
ADMIN_WRITES = [
    "POST /api/admin/models",
    "POST /api/admin/models/{name}/versions",
    "POST /api/admin/models/{name}/versions/{version}/retire",
    "POST /api/admin/deployments",
    "PATCH /api/admin/deployments/{name}",
    "PUT /api/admin/deployments/{name}/slo",
    "POST /api/admin/deployments/{name}/canary",
    "PUT /api/admin/deployments/{name}/shadow",
    "DELETE /api/admin/deployments/{name}/shadow",
    "POST /api/admin/deployments/{name}/promote",
    "POST /api/admin/deployments/{name}/rollback",
    "POST /api/admin/webhooks",
    "PATCH /api/admin/webhooks/{name}",
    "DELETE /api/admin/webhooks/{name}",
    "POST /api/admin/webhooks/{name}/test",
    "POST /api/admin/keys",
    "POST /api/admin/keys/{name}/revoke",
    "POST /api/admin/users",
    "PATCH /api/admin/users/{username}",
    "POST /api/admin/users/{username}/sign-out",
    "POST /api/admin/plan",
]
ADMIN = ("fuzz-admin", "fuzz-password-1")
OPERATOR = ("fuzz-operator", "fuzz-password-2")
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    negative_data_rejection,
]


@pytest.fixture(scope="module")
def fuzz_server(tmp_path_factory, launch_vigil, create_user) -> Iterator[Any]:  # type: ignore[no-untyped-def]
    data_dir = tmp_path_factory.mktemp("fuzz")
    (data_dir / "vigil.toml").write_text(CONFIG)
    create_user(data_dir, *ADMIN, role="admin")
    create_user(data_dir, *OPERATOR, role="operator")
    with launch_vigil(data_dir, "--config", str(data_dir / "vigil.toml")) as server:
        yield server


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _int(value: Any) -> bool:
    """A JSON Schema integer: 3, or 3.0 (msgspec takes both as an int)."""
    if isinstance(value, float):
        return value.is_integer()
    return isinstance(value, int) and not isinstance(value, bool)


def _servable(body: dict[str, Any], model: str) -> dict[str, Any]:
    """The body with a served model and, where a field holds a value the schema allows
    but this server refuses (penalties) or caps (max_tokens, n), one it accepts.
    Only valid values are replaced, by valid ones: a body made invalid on purpose (a
    negative case) stays invalid."""
    steered = {**body, "model": model}
    if _int(steered.get("n")) and steered["n"] > 2:
        steered["n"] = 2
    for penalty in ("presence_penalty", "frequency_penalty"):
        if _number(steered.get(penalty)):
            steered[penalty] = 0.0
    for field in ("max_tokens", "max_completion_tokens"):
        if _int(steered.get(field)) and steered[field] > MAX_TOKENS:
            steered[field] = MAX_TOKENS
    if _int(steered.get("min_tokens")) and steered["min_tokens"] > 2:
        steered["min_tokens"] = 2
    return steered


def _steer_body(context: Any, body: Any) -> Any:
    """Half the bodies made servable: a fuzzed `model` is almost never a served one, and
    generation and embedding would go untested behind the 404."""
    model = body.get("model") if isinstance(body, dict) else None
    if not isinstance(model, str) or not model:  # not a valid name: a negative case
        return st.just(body)
    served = EMBEDDER if context.operation.path == "/v1/embeddings" else LLM
    return st.sampled_from([_servable(body, served), body])


def _steer_path(context: Any, path_parameters: Any) -> Any:
    if not isinstance(path_parameters, dict) or "model_id" not in path_parameters:
        return st.just(path_parameters)
    return st.sampled_from([{**path_parameters, "model_id": LLM}, path_parameters])


@pytest.fixture(scope="module")
def api_schema(fuzz_server):  # type: ignore[no-untyped-def]
    schema = schemathesis.openapi.from_url(f"{fuzz_server.base_url}/schema/openapi.json")
    schema.config.update(base_url=fuzz_server.base_url, request_timeout=60)
    schema.hook("flatmap_body")(_steer_body)
    schema.hook("flatmap_path_parameters")(_steer_path)
    return schema


def test_every_api_operation_is_fuzzed(api_schema: Any) -> None:
    # A new operation gets fuzzed by being listed here. (The console is not in the schema.)
    # Admin reads go with an admin's credentials, writes with an operator's (they run
    # last: a fuzzed write may change the deployment the /v1 cases use).
    labels = {result.ok().label for result in api_schema.get_all_operations()}
    admin = {label for label in labels if " /api/admin/" in label}
    assert labels - admin == set(OPERATIONS)
    assert {label for label in admin if label.startswith("GET ")} == set(ADMIN_READS)
    assert {label for label in admin if not label.startswith("GET ")} == set(ADMIN_WRITES)


def test_schema_documents_openai_errors_and_event_streams(api_schema: Any) -> None:
    paths = api_schema.raw_schema["paths"]
    for path, item in paths.items():
        if not path.startswith("/v1/"):
            continue
        for operation in item.values():
            responses = operation["responses"]
            assert {"200", "400", "401", "429", "500"} <= set(responses), path
            for status, response in responses.items():
                assert response["headers"]["x-request-id"]["required"], (path, status)
                if status != "200":
                    body = response["content"]["application/json"]["schema"]
                    error = body["properties"]["error"]
                    assert error["required"] == ["message", "type", "param", "code"]
    # The admin API documents the same error body, 400 included on every operation
    # (a malformed request reaches any of them), never the framework's default one.
    for path, item in paths.items():
        if not path.startswith("/api/admin/"):
            continue
        for method, operation in item.items():
            responses = operation["responses"]
            assert {"400", "401", "403"} <= set(responses), (method, path)
            for status, response in responses.items():
                if status.startswith(("4", "5")):
                    body = response["content"]["application/json"]["schema"]
                    if "$ref" in body:  # "#/components/schemas/<name>"
                        body = api_schema.raw_schema["components"]["schemas"][
                            body["$ref"].rsplit("/", 1)[1]
                        ]
                    assert "error" in body["properties"], (method, path, status)
    for path in ("/v1/chat/completions", "/v1/completions"):
        ok = paths[path]["post"]["responses"]["200"]
        assert set(ok["content"]) == {"application/json", "text/event-stream"}
        assert ok["headers"]["x-vigil-served-by"]["required"]
    assert {"403", "404", "503"} <= set(paths["/v1/embeddings"]["post"]["responses"])


@pytest.mark.parametrize("label", OPERATIONS + ADMIN_READS + ADMIN_WRITES)
def test_fuzzed_requests_get_documented_answers(api_schema: Any, label: str) -> None:
    operation = api_schema.find_operation_by_label(label)
    user = ADMIN if label.startswith("GET ") else OPERATOR
    auth = "Basic " + base64.b64encode(":".join(user).encode()).decode()
    admin = "/api/admin/" in label
    headers = {"Authorization": auth} if admin else {}
    # Admin reads: the credentials are added to every case, so a case "without the
    # required Authorization header" still has one; and most admin reads take unknown
    # query parameters without complaint (the audit, decisions and traces lists refuse
    # them, tested with those lists). Rejection of negative data is checked on /v1 only.
    checks = [c for c in CHECKS if not (admin and c is negative_data_rejection)]
    valid = operation.as_strategy(GenerationMode.POSITIVE)
    invalid = operation.as_strategy(GenerationMode.NEGATIVE)

    @given(case=st.one_of(valid, invalid))
    # Drawing a case from these schemas is slow on a busy 2-core machine; that is not
    # what this test is about.
    @settings(
        max_examples=MAX_EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    def answered_as_documented(case: Any) -> None:
        case.call_and_validate(checks=checks, headers=headers)

    answered_as_documented()
