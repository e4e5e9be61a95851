"""The demo corpus: a few short lessons ``lectern up`` uploads on a data directory's first start.

They go through the real API (``POST /v1/documents`` as the demo teacher of the ``demo``
tenant) and so through ingest like any upload. Loading runs in a background thread once the
stack is ready, so it never delays readiness, and reports when the lessons are indexed.
``DATA_DIR/demo.json`` records that the corpus was handed over, so later starts skip it;
repeating an upload is harmless anyway (the gateway answers identical bytes with the existing
document).
"""

from __future__ import annotations

import json
import threading
import time
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from lectern_common.errors import ConfigurationError

if TYPE_CHECKING:
    from lectern_cli.runtime.supervisor import Supervisor

DEMO_TENANT = "demo"
DEMO_TEACHER = "demo-teacher"
MANIFEST = "corpus.toml"
MARKER = "demo.json"
#: document statuses after which ingest has nothing left to do
FINAL_STATUSES = frozenset({"indexed", "duplicate", "failed", "superseded", "deleted"})
FORM_FIELDS = ("title", "subject", "grade_level", "module_tag", "class_id", "content_type",
               "language", "collection", "topic_tags", "curriculum_standards")  # fmt: skip

Reporter = Callable[[str], None]


@dataclass(frozen=True)
class DemoDocument:
    """One lesson of the corpus and the metadata fields it is uploaded with."""

    path: Path
    fields: list[tuple[str, str]] = field(default_factory=list)


def default_demo_dir() -> Path | None:
    """The repository's ``demo/`` folder (this package installed from the checkout), if any."""
    for candidate in (Path(__file__).resolve().parents[4] / "demo", Path.cwd() / "demo"):
        if (candidate / MANIFEST).is_file():
            return candidate
    return None


def read_corpus(directory: Path) -> list[DemoDocument]:
    """The documents ``directory/corpus.toml`` lists; ``ConfigurationError`` when it is wrong."""
    manifest = directory / MANIFEST
    try:
        entries = tomllib.loads(manifest.read_text(encoding="utf-8")).get("document", [])
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigurationError(f"cannot read the demo corpus manifest {manifest}: {exc}") from exc
    documents = []
    for entry in entries:
        path = directory / str(entry.get("file", ""))
        if not entry.get("file") or not path.is_file():
            raise ConfigurationError(f"{manifest}: no file {entry.get('file')!r} in {directory}")
        unknown = set(entry) - {"file", *FORM_FIELDS}
        if unknown:
            raise ConfigurationError(f"{manifest}: unknown fields {sorted(unknown)}")
        fields: list[tuple[str, str]] = []
        for name in FORM_FIELDS:
            value = entry.get(name)
            values = value if isinstance(value, list) else [] if value is None else [value]
            fields.extend((name, str(v)) for v in values)
        documents.append(DemoDocument(path=path, fields=fields))
    if not documents:
        raise ConfigurationError(f"{manifest} lists no [[document]]")
    return documents


def demo_token(secret: str, *, ttl_s: int = 3600) -> str:
    """A bearer token of the demo teacher (HS256, the gateway's secret)."""
    import jwt

    now = int(time.time())
    claims = {"tenant": DEMO_TENANT, "sub": DEMO_TEACHER, "role": "teacher", "plan": "pro",
              "iat": now, "exp": now + ttl_s}  # fmt: skip
    return jwt.encode(claims, secret, algorithm="HS256")


class DemoLoader:
    """Uploads the corpus through the gateway and waits for ingest to finish it."""

    def __init__(
        self,
        *,
        directory: Path,
        data_dir: Path,
        report: Reporter,
        stop: threading.Event | None = None,
        timeout_s: float = 600.0,
        poll_s: float = 1.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.directory = directory
        self.marker = data_dir / MARKER
        self.stop = stop or threading.Event()
        self.timeout_s = timeout_s
        self.poll_s = poll_s
        self.transport = transport
        self._report = report

    def report(self, message: str) -> None:
        """Say something, unless the stack is stopping (nobody is waiting for the demo then)."""
        if not self.stop.is_set():
            self._report(message)

    def loaded(self) -> bool:
        """Whether an earlier start already handed the corpus over."""
        return self.marker.exists()

    def start(self, *, gateway_url: str, secret: str) -> threading.Thread | None:
        """Load in a background thread (None when this data directory already has the demo)."""
        if self.loaded():
            self.report(f"demo corpus: loaded on an earlier start (see {self.marker})")
            return None
        thread = threading.Thread(
            target=self.run, kwargs={"gateway_url": gateway_url, "secret": secret},
            name="lectern-demo", daemon=True,
        )  # fmt: skip
        thread.start()
        return thread

    def run(self, *, gateway_url: str, secret: str) -> bool:
        """Upload every lesson, then wait until ingest is done with them; whether all indexed."""
        try:
            documents = read_corpus(self.directory)
            with httpx.Client(
                base_url=gateway_url,
                headers={"Authorization": f"Bearer {demo_token(secret)}"},
                timeout=30.0,
                transport=self.transport,
            ) as client:
                ids = [self._upload(client, document) for document in documents]
                self._write_marker(documents, ids)
                self.report(
                    f"demo corpus: {len(ids)} lessons uploaded to tenant {DEMO_TENANT!r}; "
                    "indexing in the background"
                )
                return self._wait(client, documents, ids, gateway_url)
        except (httpx.HTTPError, ConfigurationError, _UploadRefused) as exc:
            self.report(
                f"demo corpus: not loaded ({exc}); it is tried again on the next start "
                "(skip it with --no-demo)"
            )
            return False

    def _upload(self, client: httpx.Client, document: DemoDocument) -> str:
        with open(document.path, "rb") as handle:
            response = client.post(
                "/v1/documents",
                files={"file": (document.path.name, handle, "text/markdown")},
                data=_form(document.fields),
            )
        if response.status_code not in (200, 202):
            raise _UploadRefused(
                f"{document.path.name}: HTTP {response.status_code} {_detail(response)}"
            )
        return str(response.json()["id"])

    def _write_marker(self, documents: list[DemoDocument], ids: list[str]) -> None:
        record = {
            "loaded_at": datetime.now(UTC).isoformat(),
            "tenant": DEMO_TENANT,
            "uploaded_by": DEMO_TEACHER,
            "documents": [
                {"file": d.path.name, "id": i} for d, i in zip(documents, ids, strict=True)
            ],
        }
        self.marker.write_text(json.dumps(record, indent=2))

    def _wait(
        self, client: httpx.Client, documents: list[DemoDocument], ids: list[str], url: str
    ) -> bool:
        deadline = time.monotonic() + self.timeout_s
        views: dict[str, dict[str, Any]] = {}
        while not self.stop.is_set():
            for document_id in ids:
                if views.get(document_id, {}).get("status") not in FINAL_STATUSES:
                    response = client.get(f"/v1/documents/{document_id}")
                    response.raise_for_status()
                    views[document_id] = response.json()
            if all(views[i]["status"] in FINAL_STATUSES for i in ids):
                break
            if time.monotonic() > deadline:
                waiting = [d.path.name for d, i in zip(documents, ids, strict=True)
                           if views[i]["status"] not in FINAL_STATUSES]  # fmt: skip
                self.report(
                    f"demo corpus: still not indexed after {self.timeout_s:.0f} s: "
                    f"{', '.join(waiting)} (see the ingest log)"
                )
                return False
            self.stop.wait(self.poll_s)
        if self.stop.is_set():
            return False
        problems = [
            f"{d.path.name} {views[i]['status']}: {(views[i].get('error') or {}).get('message')}"
            for d, i in zip(documents, ids, strict=True)
            if views[i]["status"] not in ("indexed", "duplicate")
        ]
        if problems:
            self.report(f"demo corpus: some lessons were not indexed: {'; '.join(problems)}")
            return False
        chunks = sum(int(v.get("chunk_count") or 0) for v in views.values())
        self.report(
            f"demo corpus indexed: {len(ids)} lessons, {chunks} chunks, tenant {DEMO_TENANT!r}. "
            f"Open {url.rstrip('/')}/ and sign in as the demo student or teacher"
        )
        return True


class _UploadRefused(Exception):
    """The gateway answered an upload with an error."""


def _form(fields: list[tuple[str, str]]) -> dict[str, list[str]]:
    form: dict[str, list[str]] = {}
    for name, value in fields:
        form.setdefault(name, []).append(value)
    return form


def _detail(response: httpx.Response) -> str:
    try:
        return str(response.json().get("detail", ""))
    except ValueError:
        return response.text[:200]


def on_stack_ready(loader: DemoLoader) -> Callable[[Supervisor], None]:
    """The supervisor hook that starts ``loader`` once every service is ready."""

    def start(supervisor: Supervisor) -> None:
        missing = {"gateway", "ingest"} - set(supervisor.children)
        if missing:
            supervisor.report(f"demo corpus: not loaded (needs {', '.join(sorted(missing))})")
            return
        loader.stop = supervisor.stop_requested
        loader.start(
            gateway_url=supervisor.children["gateway"].url,
            secret=supervisor.settings.effective_jwt_secret,
        )

    return start
