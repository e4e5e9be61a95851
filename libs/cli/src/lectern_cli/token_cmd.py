"""``lectern token``: a development bearer token for the embedded stack."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from lectern_common.tokens import make_token, signing_secret

__all__ = ["make_token", "register", "run", "signing_secret"]

ROLES = ("student", "teacher", "admin")
PLANS = ("free", "pro")
DEFAULT_TTL_S = 12 * 3600


def register(subparsers: Any) -> None:
    """Add ``token``."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "token",
        help="print a development bearer token (HS256, LECTERN_JWT_SECRET)",
        description=(
            "Sign an HS256 JWT with the claims the gateway reads (tenant, sub, role, plan, iat, "
            "exp), using LECTERN_JWT_SECRET or, in development, the built-in development secret."
        ),
    )
    parser.add_argument("--tenant", required=True, help="tenant id")
    parser.add_argument("--user", required=True, help="user id (the `sub` claim)")
    parser.add_argument("--role", required=True, choices=ROLES)
    parser.add_argument("--plan", choices=PLANS, default="free")
    parser.add_argument("--ttl", type=_positive_int, default=DEFAULT_TTL_S, help="seconds (12 h)")
    parser.add_argument(
        "--class", dest="classes", action="append", default=[],
        help="a class the user belongs to (the `classes` claim; repeat)",
    )  # fmt: skip
    parser.set_defaults(func=run)


def _positive_int(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {value!r}") from None
    if number <= 0:
        raise argparse.ArgumentTypeError("must be a positive number of seconds")
    return number


def run(args: argparse.Namespace) -> int:
    """Print the token on stdout (nothing else, so `$(lectern token ...)` works)."""
    secret = signing_secret(os.environ)
    if secret is None:
        environment = os.environ.get("LECTERN_ENVIRONMENT", "")
        print(
            f"lectern token: refusing: LECTERN_ENVIRONMENT={environment} and LECTERN_JWT_SECRET "
            "is not set (the development secret is only ever used in development)",
            file=sys.stderr,
        )
        return 2
    print(
        make_token(
            secret=secret, tenant=args.tenant, user=args.user, role=args.role, plan=args.plan,
            ttl_s=args.ttl, classes=args.classes,
        )
    )  # fmt: skip
    return 0
