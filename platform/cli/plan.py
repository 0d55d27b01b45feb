"""`vigil plan`: the workers a deployment needs for a load, asked of a running gateway."""

from __future__ import annotations

import argparse
import sys

from vigil.platform.cli.flags import Subparsers, add_settings
from vigil.platform.cli.password import read_password
from vigil.platform.settings import plan_gateway
from vigil.platform.settings.table import Command


def add_parser(sub: Subparsers) -> None:
    plan = sub.add_parser(
        "plan",
        help="workers needed for a load, from a running gateway's measured step costs",
        description="Asks a running gateway (POST /api/admin/plan, as a Vigil user of any "
        "role) how many workers the deployment needs for the load, with the predicted TTFT "
        "p99 and tokens/s per stream and the resource that binds. Lengths: 200 (fixed), "
        "40,200,1000 (a list drawn from), or mean=200,p99=800 (log-normal). Exits 1 when "
        "no number of workers meets the target, 2 when no plan could be made.",
    )
    plan.add_argument("--deployment", required=True, help="the deployment (`model`) to plan")
    plan.add_argument("--rps", type=float, required=True, help="requests per second")
    plan.add_argument("--prompt-tokens", required=True, help="prompt lengths, in tokens")
    plan.add_argument("--output-tokens", required=True, help="output lengths, in tokens")
    plan.add_argument("--ttft-p99", type=float, help="TTFT p99 target, s (the deployment's SLO)")
    plan.add_argument(
        "--min-tokens-per-s", type=float, help="per-stream tokens/s target (the deployment's SLO)"
    )
    plan.add_argument("--user", required=True, help="a Vigil user (a viewer is enough)")
    plan.add_argument(
        "--password-stdin",
        action="store_true",
        help="read the password from the first line of standard input instead of a prompt",
    )
    plan.add_argument("--seed", type=int, default=0, help="the simulation's seed (0)")
    plan.add_argument("--json", action="store_true", help="print the admin API's answer")
    add_settings(plan, Command.PLAN)
    plan.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from vigil.platform.planning.command import PlanCommandError, length_spec, run

    gateway = plan_gateway(vars(args))  # before the password is asked for
    try:
        body = {
            "deployment": args.deployment,
            "rps": args.rps,
            "prompt_tokens": length_spec(args.prompt_tokens),
            "output_tokens": length_spec(args.output_tokens),
            "ttft_p99_s": args.ttft_p99,
            "min_tokens_per_s": args.min_tokens_per_s,
            "seed": args.seed,
        }
        password = read_password(args.password_stdin, confirm=False)
        text, met = run(gateway, args.user, password, body, args.json)
    except PlanCommandError as exc:
        print(f"vigil: {exc}", file=sys.stderr)
        return 2
    print(text)
    return 0 if met else 1
