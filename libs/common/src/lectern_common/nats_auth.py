"""Who may publish and subscribe to what on NATS: one user per service, least privilege.

Without authentication anyone who reaches the NATS port can send a retrieve request for any
tenant, recall any student's memories or read any stored file. The embedded stack and the
Kubernetes manifests therefore give every service its own NATS user whose permissions name
only the subjects that service needs (``SERVICE_PERMISSIONS``); requests and events are
otherwise refused by the server ("Permissions Violation").

Every service declares Lectern's streams at start (``ensure_streams``), so each may create,
update and look up streams; only the gateway (stores uploads, serves and deletes them) and
ingest (reads them) may touch the object store's stream ``OBJ_<bucket>``; a service can
create and read consumers only on the streams it consumes. Replies to requests a service
answers are allowed by ``allow_responses`` (no blanket publish on ``_INBOX.>``).
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field
from typing import Any

from lectern_common.broker import DOCUMENTS_BUCKET
from lectern_common.events import Subjects

OBJECT_STREAM = f"OBJ_{DOCUMENTS_BUCKET}"

#: every service: declare and inspect streams, dead-letter, replies to its own requests
_COMMON_PUBLISH = [
    "$JS.API.INFO",
    "$JS.API.STREAM.INFO.*",
    "$JS.API.STREAM.CREATE.*",
    "$JS.API.STREAM.UPDATE.*",
    "$JS.API.STREAM.NAMES",
    Subjects.DEAD_LETTER,
]
_COMMON_SUBSCRIBE = ["_INBOX.>"]


def consume(stream: str) -> list[str]:
    """Subjects a client publishes to create, inspect, fetch from and ack a consumer on
    ``stream`` (the JetStream API, acks and flow control)."""
    return [
        f"$JS.API.CONSUMER.*.{stream}",
        f"$JS.API.CONSUMER.*.{stream}.>",
        f"$JS.API.CONSUMER.DURABLE.CREATE.{stream}.>",
        f"$JS.API.CONSUMER.MSG.NEXT.{stream}.>",
        f"$JS.ACK.{stream}.>",
        f"$JS.FC.{stream}.>",
    ]


def object_store() -> list[str]:
    """Subjects for putting, getting and deleting objects in the documents bucket."""
    return [
        f"$O.{DOCUMENTS_BUCKET}.>",
        f"$JS.API.STREAM.MSG.GET.{OBJECT_STREAM}",
        f"$JS.API.STREAM.PURGE.{OBJECT_STREAM}",
        f"$JS.API.DIRECT.GET.{OBJECT_STREAM}",
        f"$JS.API.DIRECT.GET.{OBJECT_STREAM}.>",
        *consume(OBJECT_STREAM),
    ]


@dataclass(frozen=True)
class Permissions:
    """Subjects one NATS user may publish to and subscribe to (beyond the common ones)."""

    publish: list[str] = field(default_factory=list)
    subscribe: list[str] = field(default_factory=list)
    answers_requests: bool = False

    def as_config(self) -> dict[str, Any]:
        """The ``permissions`` object of a nats-server user."""
        config: dict[str, Any] = {
            "publish": {"allow": [*_COMMON_PUBLISH, *self.publish]},
            "subscribe": {"allow": [*_COMMON_SUBSCRIBE, *self.subscribe]},
        }
        if self.answers_requests:
            config["allow_responses"] = True
        return config


#: the NATS user of each service, by the service's short name
SERVICE_PERMISSIONS: dict[str, Permissions] = {
    "gateway": Permissions(
        publish=[
            Subjects.DOCUMENTS_UPLOADED,
            Subjects.DOCUMENTS_DELETED,
            Subjects.DOCUMENTS_UPDATED,
            Subjects.DOCUMENTS_ARCHIVED,
            Subjects.DOCUMENTS_RESTORED,
            Subjects.CHAT_TURN_COMPLETED,
            Subjects.CHAT_SESSION_ENDED,
            Subjects.CHAT_SESSIONS_EXPIRED,
            Subjects.FEEDBACK_FLAGGED,
            Subjects.KNOWLEDGE_GAP_DETECTED,
            Subjects.QUIZ_ATTEMPTED,
            Subjects.USERS_ERASED,
            Subjects.RETRIEVE,
            Subjects.INDEX_CHUNKS,
            Subjects.INDEX_TOPICS,
            Subjects.INDEX_COUNT,
            Subjects.INDEX_MATERIAL,
            Subjects.INDEX_OUTLINE,
            Subjects.RERANK,
            Subjects.MEMORY_RECALL,
            Subjects.MEMORY_LIST,
            Subjects.MEMORY_FORGET,
            Subjects.MEMORY_TOPICS,
            Subjects.MEMORY_EXPORT,
            Subjects.CHUNKS_CURRICULUM,
            *object_store(),
            # webhooks: the tenant events, delivered to the endpoints that asked for them;
            # the conflicting sources ingest found, for the review queue
            *consume("LECTERN_DOCUMENT_EVENTS"),
            # a document ingest is working on shows `processing` in the gateway's row
            *consume("LECTERN_DOCUMENT_PROGRESS"),
            *consume("LECTERN_CHAT"),
            *consume("LECTERN_MEMORY"),
            *consume("LECTERN_FEEDBACK"),
            *consume("LECTERN_STUDY"),
            *consume("LECTERN_USERS"),
        ],
        # a document's status stream follows its progress and outcome
        subscribe=[
            Subjects.DOCUMENTS_PROGRESS,
            Subjects.DOCUMENTS_INDEXED,
            Subjects.DOCUMENTS_FAILED,
            Subjects.DOCUMENTS_DELETED,
        ],
    ),
    "ingest": Permissions(
        publish=[
            Subjects.DOCUMENTS_PROGRESS,
            Subjects.DOCUMENTS_INDEXED,
            Subjects.DOCUMENTS_FAILED,
            # the review queue's conflicting sources, for the gateway to record
            Subjects.DOCUMENTS_CONFLICTS,
            *consume("LECTERN_DOCUMENTS"),
            # a teacher's changes of a document, applied to the chunks it owns
            *consume("LECTERN_DOCUMENT_EVENTS"),
            *object_store(),
        ],
        # curriculum tags reach the chunks it owns through it
        subscribe=[Subjects.CHUNKS_CURRICULUM],
        answers_requests=True,
    ),
    "retriever": Permissions(
        subscribe=[
            Subjects.RETRIEVE,
            Subjects.INDEX_CHUNKS,
            Subjects.INDEX_TOPICS,
            Subjects.INDEX_COUNT,
            Subjects.INDEX_MATERIAL,
            Subjects.INDEX_OUTLINE,
            Subjects.INDEX_VECTORS,
        ],
        answers_requests=True,
    ),
    # the index's stored vectors of the candidates, for the bi-encoder
    "reranker": Permissions(
        publish=[Subjects.INDEX_VECTORS], subscribe=[Subjects.RERANK], answers_requests=True
    ),
    "memory": Permissions(
        publish=[
            Subjects.MEMORY_DISTILLED,
            *consume("LECTERN_CHAT"),
            *consume("LECTERN_STUDY"),
            *consume("LECTERN_USERS"),
            # feedback.flagged: the flags on answers, recorded in its own table
            *consume("LECTERN_FEEDBACK"),
        ],
        subscribe=[
            Subjects.MEMORY_RECALL,
            Subjects.MEMORY_LIST,
            Subjects.MEMORY_FORGET,
            Subjects.MEMORY_TOPICS,
            Subjects.MEMORY_EXPORT,
        ],
        answers_requests=True,
    ),
}

#: the operator's user (``lectern status``, evaluation against a running stack): everything
ADMIN_USER = "lectern-admin"


def nats_user(service: str) -> str:
    """The NATS user name of a service (``gateway`` -> ``lectern-gateway``)."""
    return f"lectern-{service}"


def new_credentials(services: list[str]) -> dict[str, str]:
    """A fresh random password for each service's user and the admin user."""
    users = [nats_user(s) for s in services if s in SERVICE_PERMISSIONS] + [ADMIN_USER]
    return {user: secrets.token_urlsafe(24) for user in users}


def user_entries() -> list[tuple[str, str, dict[str, Any]]]:
    """(key, user, entry) of every NATS user: one per service with its permissions (key: the
    service), then the unrestricted admin (key ``admin``); ``entry`` lacks the password."""
    entries = [
        (service, nats_user(service), {"permissions": permissions.as_config()})
        for service, permissions in SERVICE_PERMISSIONS.items()
    ]
    return [*entries, ("admin", ADMIN_USER, {})]


def authorization_config(passwords: dict[str, str]) -> str:
    """The ``authorization`` block of a nats-server configuration file for the users that
    have a password in ``passwords``. JSON is valid NATS config."""
    users = [
        {"user": user, "password": passwords[user], **entry}
        for _, user, entry in user_entries()
        if user in passwords
    ]
    return "authorization: " + json.dumps({"users": users}, indent=2) + "\n"


#: the Kubernetes Secret holding each service's NATS password (one key per service, and
#: ``admin``), in Lectern's namespace for the services and in the NATS namespace for the server
K8S_SECRET = "lectern-nats-users"  # noqa: S105 - a Secret's name, not a password


def password_variable(user: str) -> str:
    """The NATS server container's environment variable holding ``user``'s password."""
    return user.upper().replace("-", "_") + "_NATS_PASSWORD"


def helm_values() -> dict[str, Any]:
    """Values for the NATS Helm chart: the users and permissions of ``SERVICE_PERMISSIONS``,
    each password read from the ``K8S_SECRET`` Secret into the server's environment (the
    chart writes ``<< $VAR >>`` unquoted, so nats-server expands it at start)."""
    users: list[dict[str, Any]] = []
    env: dict[str, Any] = {}
    for key, user, entry in user_entries():
        variable = password_variable(user)
        users.append({"user": user, "password": f"<< ${variable} >>", **entry})
        env[variable] = {"valueFrom": {"secretKeyRef": {"name": K8S_SECRET, "key": key}}}
    return {"config": {"merge": {"authorization": {"users": users}}}, "container": {"env": env}}


HELM_VALUES_HEADER = """\
# GENERATED by `python -m lectern_common.nats_auth > deploy/k8s/infra/nats-auth-values.yaml`
# from lectern_common.nats_auth.SERVICE_PERMISSIONS; tests/deploy checks it is current.
# NATS users for Lectern, one per service with only the subjects it needs, for the official
# NATS Helm chart, beside nats-values.yaml:
#   helm upgrade --install nats nats/nats -n nats --create-namespace \\
#     -f deploy/k8s/infra/nats-values.yaml -f deploy/k8s/infra/nats-auth-values.yaml
# The passwords come from the Secret lectern-nats-users in the nats namespace (keys gateway,
# ingest, retriever, reranker, memory, admin); the services read the same Secret in the
# lectern namespace (docs/deploy.md).
"""


def render_helm_values() -> str:
    """The text of deploy/k8s/infra/nats-auth-values.yaml."""
    import yaml

    return HELM_VALUES_HEADER + yaml.safe_dump(helm_values(), sort_keys=False, width=100)


if __name__ == "__main__":
    print(render_helm_values(), end="")
