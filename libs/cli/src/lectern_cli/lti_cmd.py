"""``lectern lti ...``: LTI 1.3 platforms (LMSs) of your tenant, through the gateway.

``register``, ``update``, ``list``, ``show`` and ``delete`` manage registrations
(``/v1/lti/registrations``), ``invite`` prints a Dynamic Registration URL for the LMS's "add by
URL" screen, ``rotate-key`` rotates the tool's signing key, ``roster-sync`` syncs a class from
its course now, ``scores`` lists the scores waiting for (or sent to) the gradebooks. An admin's
bearer token is needed (a teacher's for ``roster-sync``).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from lectern_cli.admin_api import FAILED, add_common, call, usage


def register(subparsers: Any) -> None:
    """Add ``lti`` and its subcommands."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "lti",
        help="LTI 1.3: register LMS platforms, registration URLs, keys, rosters, scores",
        description="Manage the LTI 1.3 platforms (LMSs) of your tenant through the gateway's "
        "/v1/lti API with an admin's bearer token (docs/lti.md).",
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    parser.set_defaults(func=lambda args: usage(parser))

    create = actions.add_parser("register", help="register a platform by hand")
    create.add_argument("--issuer", required=True, help="the platform's iss")
    create.add_argument("--client-id", required=True, help="the client id it gave Lectern")
    create.add_argument(
        "--deployment-id",
        action="append",
        required=True,
        dest="deployment_ids",
        help="a deployment id (repeat for several)",
    )
    create.add_argument("--auth-url", required=True, help="its OIDC authorization endpoint")
    create.add_argument("--token-url", required=True, help="its OAuth 2 token endpoint")
    create.add_argument("--jwks-url", required=True, help="its public keys (JWKS)")
    create.add_argument("--token-audience", help="aud of client assertions (default token URL)")
    create.add_argument("--name", help="a name for it")
    create.set_defaults(func=run_register)

    update = actions.add_parser(
        "update", help="change a platform (its deployments: every --deployment-id, replacing)"
    )
    update.add_argument("registration_id")
    update.add_argument("--deployment-id", action="append", dest="deployment_ids")
    update.add_argument("--auth-url")
    update.add_argument("--token-url")
    update.add_argument("--jwks-url")
    update.add_argument("--token-audience")
    update.add_argument("--name")
    update.set_defaults(func=run_update)

    listing = actions.add_parser("list", help="list the tenant's platforms")
    listing.set_defaults(func=run_list)
    show = actions.add_parser("show", help="show one platform")
    show.add_argument("registration_id")
    show.set_defaults(func=run_show)
    delete = actions.add_parser("delete", help="remove a platform (users and classes stay)")
    delete.add_argument("registration_id")
    delete.set_defaults(func=run_delete)

    invite = actions.add_parser("invite", help="print a Dynamic Registration URL")
    invite.set_defaults(func=run_invite)
    rotate = actions.add_parser("rotate-key", help="rotate the tool's signing key")
    rotate.set_defaults(func=run_rotate)
    sync = actions.add_parser("roster-sync", help="sync a class's roster from its LMS course")
    sync.add_argument("class_id")
    sync.set_defaults(func=run_sync)
    scores = actions.add_parser("scores", help="scores for the LMS gradebooks")
    scores.add_argument("--status", choices=("pending", "sent", "failed"))
    scores.set_defaults(func=run_scores)
    for sub in (create, update, listing, show, delete, invite, rotate, sync, scores):
        add_common(sub)


def format_registrations(found: list[dict[str, Any]]) -> str:
    """One line per registration: id, source, issuer, client id, deployments."""
    if not found:
        return "no LTI platforms registered"
    return "\n".join(
        f"{r['id']}  {r['source']:<7}  {r['issuer']}  client {r['client_id']}  "
        f"deployments {', '.join(r['deployment_ids']) or '-'}"
        for r in found
    )


def _print(args: argparse.Namespace, value: Any, text: str) -> int:
    print(json.dumps(value, indent=2) if args.json else text)
    return 0


def run_register(args: argparse.Namespace) -> int:
    """Register a platform."""
    body = {
        "issuer": args.issuer,
        "client_id": args.client_id,
        "deployment_ids": args.deployment_ids,
        "auth_url": args.auth_url,
        "token_url": args.token_url,
        "jwks_url": args.jwks_url,
        "token_audience": args.token_audience,
        "name": args.name,
    }
    created = _call(args, "POST", "/v1/lti/registrations", json=body)
    if created is FAILED:
        return 1
    return _print(args, created, f"registered {created['id']}\n{format_registrations([created])}")


def run_update(args: argparse.Namespace) -> int:
    """Change a platform: only the options given."""
    fields = ("deployment_ids", "auth_url", "token_url", "jwks_url", "token_audience", "name")
    body = {f: getattr(args, f) for f in fields if getattr(args, f) is not None}
    if not body:
        print("lectern lti update: nothing to change", file=sys.stderr)
        return 2
    changed = _call(args, "PATCH", f"/v1/lti/registrations/{args.registration_id}", json=body)
    if changed is FAILED:
        return 1
    return _print(args, changed, format_registrations([changed]))


def run_list(args: argparse.Namespace) -> int:
    """List the tenant's platforms."""
    found = _call(args, "GET", "/v1/lti/registrations")
    return 1 if found is FAILED else _print(args, found, format_registrations(found))


def run_show(args: argparse.Namespace) -> int:
    """Show one platform."""
    found = _call(args, "GET", f"/v1/lti/registrations/{args.registration_id}")
    return 1 if found is FAILED else _print(args, found, json.dumps(found, indent=2))


def run_delete(args: argparse.Namespace) -> int:
    """Remove a platform."""
    if _call(args, "DELETE", f"/v1/lti/registrations/{args.registration_id}") is FAILED:
        return 1
    print(f"removed LTI registration {args.registration_id}")
    return 0


def run_invite(args: argparse.Namespace) -> int:
    """Print a Dynamic Registration URL (alone on stdout)."""
    made = _call(args, "POST", "/v1/lti/registration-invites")
    return 1 if made is FAILED else _print(args, made, made["url"])


def run_rotate(args: argparse.Namespace) -> int:
    """Rotate the signing key."""
    done = _call(args, "POST", "/v1/lti/keys/rotate")
    if done is FAILED:
        return 1
    retired = ", ".join(done["retired"]) or "none"
    return _print(args, done, f"signing key {done['kid']} (retired, still published: {retired})")


def run_sync(args: argparse.Namespace) -> int:
    """Sync a class's roster now."""
    done = _call(args, "POST", f"/v1/lti/classes/{args.class_id}/roster-sync")
    if done is FAILED:
        return 1
    text = (
        f"{done['class_id']}: {done['members']} members, {done['students']} students, "
        f"{len(done['removed'])} removed, {done['pages']} pages in {done['seconds']} s"
    )
    return _print(args, done, text)


def run_scores(args: argparse.Namespace) -> int:
    """List the scores for the gradebooks."""
    path = "/v1/lti/scores" + (f"?status={args.status}" if args.status else "")
    found = _call(args, "GET", path)
    if found is FAILED:
        return 1
    lines = [
        f"{s['id']}  {s['status']:<7}  {s['score'].get('scoreGiven')}/"
        f"{s['score'].get('scoreMaximum')}  {s['lineitem_url']}  attempts {s['attempts']}"
        + (f"  ({s['last_error']})" if s["last_error"] else "")
        for s in found
    ]
    return _print(args, found, "\n".join(lines) or "no scores")


def _call(args: argparse.Namespace, method: str, path: str, **kwargs: Any) -> Any:
    return call("lti", args, method, path, **kwargs)
