"""``lectern apikey create|list|revoke``: API keys for machine clients, through the gateway.

Calls ``/v1/api-keys`` with an admin's bearer token; keys belong to the token's tenant.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from lectern_cli.admin_api import FAILED, add_common, call, usage

ROLES = ("student", "teacher", "admin")
PLANS = ("free", "pro")


def register(subparsers: Any) -> None:
    """Add ``apikey`` and its ``create``, ``list`` and ``revoke`` subcommands."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "apikey",
        help="create, list and revoke API keys (X-API-Key) through the gateway (admins)",
        description=(
            "Manage the API keys of your tenant through the gateway's /v1/api-keys, with an "
            "admin's bearer token. A new key is printed once; only its hash is stored."
        ),
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    parser.set_defaults(func=lambda args: usage(parser))

    create = actions.add_parser("create", help="create a key and print it (shown once)")
    create.add_argument("--name", required=True, help="what will use the key")
    create.add_argument("--role", choices=ROLES, default="teacher", help="its role (teacher)")
    create.add_argument("--plan", choices=PLANS, default="pro", help="its plan (pro)")
    add_common(create)
    create.set_defaults(func=run_create)

    listing = actions.add_parser("list", help="list the tenant's keys (no secrets)")
    add_common(listing)
    listing.set_defaults(func=run_list)

    revoke = actions.add_parser("revoke", help="revoke a key (it stops working at once)")
    revoke.add_argument("key_id", help="the key's id (from `lectern apikey list`)")
    add_common(revoke)
    revoke.set_defaults(func=run_revoke)


def format_keys(keys: list[dict[str, Any]]) -> str:
    """One line per key: id, state, role, plan, name."""
    if not keys:
        return "no API keys"
    lines = []
    for key in keys:
        state = "revoked" if key.get("revoked_at") else "active"
        created = str(key.get("created_at", ""))[:19].replace("T", " ")
        lines.append(
            f"{key['id']}  {state:<7}  {key['role']:<7}  {key['plan']:<4}  {created}  {key['name']}"
        )
    return "\n".join(lines)


def run_create(args: argparse.Namespace) -> int:
    """Create a key and print it (alone on stdout, so `$(lectern apikey create ...)` works)."""
    body = {"name": args.name, "role": args.role, "plan": args.plan}
    created = _call(args, "POST", "/v1/api-keys", json=body)
    if created is FAILED:
        return 1
    if args.json:
        print(json.dumps(created, indent=2))
        return 0
    print(created["key"])
    print(
        f"created API key {created['id']} ({created['role']}, {created['plan']}); "
        "it is shown only this once",
        file=sys.stderr,
    )
    return 0


def run_list(args: argparse.Namespace) -> int:
    """Print the tenant's keys."""
    keys = _call(args, "GET", "/v1/api-keys")
    if keys is FAILED:
        return 1
    print(json.dumps(keys, indent=2) if args.json else format_keys(keys))
    return 0


def run_revoke(args: argparse.Namespace) -> int:
    """Revoke a key."""
    if _call(args, "DELETE", f"/v1/api-keys/{args.key_id}") is FAILED:
        return 1
    print(f"revoked API key {args.key_id}")
    return 0


def _call(args: argparse.Namespace, method: str, path: str, **kwargs: Any) -> Any:
    return call("apikey", args, method, path, **kwargs)
