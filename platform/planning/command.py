"""`vigil plan`: ask a running gateway's admin API for a plan (POST /api/admin/plan) and
print it as a short table. The gateway computes it, from the step costs its workers
report, so the CLI and the API always give the same answer. The command exits 1 when no
number of workers meets the target (a script can tell), 2 when it could not plan."""

from __future__ import annotations

import json
import math
from typing import Any

import httpx

PLAN_TIMEOUT_S = 60.0


class PlanCommandError(Exception):
    """What to tell the user; the command exits 2."""


def length_spec(text: str) -> int | list[int] | dict[str, float]:
    """A length as the API takes it, from the CLI's spelling: `200`, `40,200,1000`, or
    `mean=200,p99=800`. The gateway checks the values; this only reads the syntax."""
    try:
        if "=" in text:
            fields = dict(part.split("=", 1) for part in text.split(","))
            return {k.strip(): float(v) for k, v in fields.items()}
        if "," in text:
            return [int(v) for v in text.split(",")]
        return int(text)
    except ValueError:
        raise PlanCommandError(
            f"{text!r}: give tokens as 200, as a list 40,200,1000, or as mean=200,p99=800"
        ) from None


def request_plan(gateway: str, username: str, password: str, body: dict[str, Any]) -> Any:
    url = gateway.rstrip("/") + "/api/admin/plan"
    try:
        resp = httpx.post(url, json=body, auth=(username, password), timeout=PLAN_TIMEOUT_S)
    except httpx.HTTPError as exc:
        raise PlanCommandError(f"could not reach {url}: {exc}") from None
    if resp.status_code != 200:
        try:
            message = resp.json()["error"]["message"]
        except (ValueError, KeyError, TypeError):
            message = resp.text[:500]
        raise PlanCommandError(f"{resp.status_code} from {url}: {message}")
    return resp.json()


def _num(x: float | None, fmt: str = ".3g") -> str:
    return "-" if x is None or not math.isfinite(x) else format(x, fmt)


def table(plan: dict[str, Any]) -> str:
    """The plan in a few lines: what it is for, what it says, why."""
    slo, pred, rates = plan["slo"], plan["predicted"], plan["rates"]
    prompt, output = plan["prompt_tokens"], plan["output_tokens"]
    decode = ", ".join(
        f"{p['batch_size']:.3g}: {p['step_s'] * 1000:.1f} ms" for p in rates["decode"]
    )
    rows = [
        ("deployment", f"{plan['deployment']} ({plan['version']})"),
        (
            "measured",
            f"{plan['num_workers_measured']} of {plan['num_workers']} workers: prefill "
            f"{rates['token_s'] * 1000:.2f} ms a token; decode step by batch {decode}; "
            f"KV {rates['kv_capacity_tokens']} tokens ({rates['kv_blocks']} x "
            f"{rates['block_size']}, {rates['kv_bytes_per_token']} B/token); "
            f"{rates['max_num_seqs']} batch slots",
        ),
        (
            "load",
            f"{plan['rps']:g} requests/s; prompt mean {prompt['mean']:.0f} p99 "
            f"{prompt['p99']:.0f}; output mean {output['mean']:.0f} p99 {output['p99']:.0f} tokens",
        ),
        (
            "slo",
            f"TTFT p99 <= {slo['ttft_p99_s']:g} s; >= {slo['min_tokens_per_s']:g} tokens/s "
            "per stream (p99)",
        ),
        ("max per worker", f"{_num(plan['max_rps_per_worker'])} requests/s"),
        ("workers needed", str(plan["workers_needed"] or "none suffices")),
    ]
    if pred is not None:
        rows += [
            (
                "predicted TTFT",
                f"p99 {_num(pred['ttft_p99_s'])} s, p50 {_num(pred['ttft_p50_s'])} s",
            ),
            (
                "predicted tokens/s",
                f"per stream p50 {_num(pred['stream_tokens_per_s_p50'])}, 99% of streams >= "
                f"{_num(pred['stream_tokens_per_s_p1'])}",
            ),
            (
                "per worker",
                f"{_num(pred['rps_per_worker'])} requests/s, mean batch "
                f"{pred['mean_batch_size']:.1f}, peak KV {pred['peak_kv_usage']:.0%}",
            ),
        ]
    rows.append(("binding", f"{plan['binding']}: {plan['binding_why']}"))
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def run(
    gateway: str, username: str, password: str, body: dict[str, Any], as_json: bool
) -> tuple[str, bool]:
    """The plan as printed, and whether some number of workers meets the target."""
    plan = request_plan(gateway, username, password, body)
    text = json.dumps(plan, indent=2) if as_json else table(plan)
    return text, plan["workers_needed"] is not None
