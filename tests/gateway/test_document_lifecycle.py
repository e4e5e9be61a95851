"""A teacher's changes to a document: archive (never cited), restore (cited again), metadata
edits copied to the chunks without re-embedding, each audited and announced through the
outbox; ingest (its real consumers, ``chunk_keeper``) applies them to the chunks it owns."""

from __future__ import annotations

import io
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from lectern_testing.chat import (
    Gateway,
    ask,
    new_session,
    offline_gateway,
    published,
    seed_document,
    settled,
)

from lectern_common.events import Subjects

pytestmark = pytest.mark.integration

QUESTION = "What does RuBisCO catalyse?"


@pytest.fixture(scope="module")
async def gateway(nats_url: str, database_url: str, db_pool: Any) -> AsyncIterator[Gateway]:
    async with offline_gateway(nats_url, database_url, db_pool, chunks=True) as running:
        yield running


def _cited(got: Any) -> set[uuid.UUID]:
    return {s.document_id for s in got.of("sources")[0].sources}


async def test_archive_restore_and_edit_reach_the_chunks_through_ingest(
    gateway: Gateway, db_pool: Any, tenant_id: str, jetstream: Any
) -> None:
    seeded = await seed_document(db_pool, tenant_id=tenant_id)
    doc = seeded.document_id
    teacher = gateway.token(tenant_id, "t-1", role="teacher")
    student = gateway.token(tenant_id, "stu-1")
    url = f"{gateway.url}/v1/documents/{doc}"
    embeddings_before = await db_pool.fetch(
        "SELECT id, embedding::text AS e FROM chunks WHERE document_id = $1 ORDER BY id", doc
    )
    async with httpx.AsyncClient(timeout=60) as client:
        session = await new_session(client, gateway, student)
        before = await ask(client, gateway, session["id"], QUESTION, student)
        assert _cited(before) == {doc}

        archived = await client.post(f"{url}/archive", headers=teacher)
        assert archived.status_code == 200 and archived.json()["status"] == "archived"
        await settled(db_pool, doc, active=False)
        gone = await ask(client, gateway, session["id"], QUESTION, student)
        assert doc not in _cited(gone) and gone.done.knowledge_gap
        assert (await client.post(f"{url}/archive", headers=teacher)).status_code == 200
        assert (await client.post(f"{url}/archive", headers=student)).status_code == 403

        restored = await client.post(f"{url}/restore", headers=teacher)
        assert restored.json()["status"] == "indexed"
        await settled(db_pool, doc, active=True)
        back = await ask(client, gateway, session["id"], QUESTION, student)
        assert _cited(back) == {doc}

        # a metadata edit: a tutor scoped to the new subject answers from it at once
        chem = await client.post(
            f"{gateway.url}/v1/personas",
            json={"slug": "chem", "display_name": "Chem", "scope": {"subjects": ["chemistry"]}},
            headers=teacher,
        )
        assert chem.json()["indexed_chunks"] == 0
        edited = await client.patch(
            url, json={"subject": "chemistry", "topic_tags": ["enzymes"], "title": "Enzymes"},
            headers=teacher,
        )  # fmt: skip
        assert edited.status_code == 200, edited.text
        assert edited.json()["subject"] == "chemistry" and edited.json()["title"] == "Enzymes"
        await settled(db_pool, doc, active=True, subject="chemistry")
        chemistry = await new_session(client, gateway, student, persona="chem")
        assert _cited(await ask(client, gateway, chemistry["id"], QUESTION, student)) == {doc}
        scope = (await client.get(f"{gateway.url}/v1/personas/chem", headers=teacher)).json()
        assert scope["indexed_chunks"] == len(seeded.chunk_ids)
        unchanged = await client.patch(url, json={"subject": "chemistry"}, headers=teacher)
        assert unchanged.status_code == 200
        bad = await client.patch(url, json={"collection": None}, headers=teacher)
        assert bad.status_code == 422
        audit = (await client.get(f"{url}/audit", headers=teacher)).json()
        unknown = await client.post(
            f"{gateway.url}/v1/documents/{uuid.uuid4()}/archive", headers=teacher
        )
    assert unknown.status_code == 404
    chunk_subjects = await db_pool.fetch(
        "SELECT DISTINCT subject, topic_tags FROM chunks WHERE document_id = $1", doc
    )
    assert [(r["subject"], r["topic_tags"]) for r in chunk_subjects] == [("chemistry", ["enzymes"])]
    embeddings_after = await db_pool.fetch(
        "SELECT id, embedding::text AS e FROM chunks WHERE document_id = $1 ORDER BY id", doc
    )
    assert embeddings_after == embeddings_before, "metadata edits never re-embed"
    assert [(a["action"], a["actor"]) for a in audit] == [
        ("archived", "t-1"), ("restored", "t-1"), ("updated", "t-1")
    ]  # fmt: skip
    assert audit[2]["changes"]["subject"] == ["biology", "chemistry"]
    assert "collection" not in audit[2]["changes"]
    updated = await published(jetstream, Subjects.DOCUMENTS_UPDATED, tenant_id)
    assert [e["changes"]["title"] for e in updated] == [["Biology notes", "Enzymes"]]
    archived_events = await published(jetstream, Subjects.DOCUMENTS_ARCHIVED, tenant_id)
    restored_events = await published(jetstream, Subjects.DOCUMENTS_RESTORED, tenant_id)
    assert len(archived_events) == 1 and len(restored_events) == 1


async def test_the_cli_edits_archives_restores_and_reads_the_audit(
    gateway: Gateway, db_pool: Any, tenant_id: str
) -> None:
    from lectern_cli.docs_cmd import docs, parse_sets

    seeded = await seed_document(db_pool, tenant_id=tenant_id)
    doc = str(seeded.document_id)
    token = gateway.token(tenant_id, "t-1", role="teacher")["Authorization"].split()[1]
    changes = parse_sets(["grade_level=9", "topic_tags=plants, light", "module_tag="])
    assert changes == {"grade_level": 9, "topic_tags": ["plants", "light"], "module_tag": None}
    out = io.StringIO()
    assert await docs(url=gateway.url, token=token, out=out, action="edit", document=doc,
                      changes=changes) == 0  # fmt: skip
    assert "grade 9" in out.getvalue()
    for action in ("archive", "restore", "archive"):
        assert await docs(url=gateway.url, token=token, out=out, action=action, document=doc) == 0
    out = io.StringIO()
    assert await docs(url=gateway.url, token=token, out=out, status="archived") == 0
    assert out.getvalue().startswith(f"{doc}  archived")
    out = io.StringIO()
    assert await docs(url=gateway.url, token=token, out=out, action="audit", document=doc) == 0
    actions = [line.split()[2] for line in out.getvalue().splitlines()]
    assert actions == ["updated", "archived", "restored", "archived"]
    assert "grade_level: None -> 9" in out.getvalue()
    student = gateway.token(tenant_id, "stu-1")["Authorization"].split()[1]
    assert await docs(url=gateway.url, token=student, out=out, action="archive", document=doc) == 1


async def test_a_superseded_document_leaves_retrieval_for_its_replacement(
    gateway: Gateway, db_pool: Any, tenant_id: str
) -> None:
    old = await seed_document(db_pool, tenant_id=tenant_id, title="Old notes")
    new = await seed_document(db_pool, tenant_id=tenant_id, title="New notes")
    teacher = gateway.token(tenant_id, "t-1", role="teacher")
    student = gateway.token(tenant_id, "stu-1")
    url = f"{gateway.url}/v1/documents/{old.document_id}"
    async with httpx.AsyncClient(timeout=60) as client:
        session = await new_session(client, gateway, student)
        assert _cited(await ask(client, gateway, session["id"], QUESTION, student)) == {
            old.document_id, new.document_id
        }  # fmt: skip
        itself = await client.post(
            f"{url}/supersede", json={"by": str(old.document_id)}, headers=teacher
        )
        assert itself.status_code == 422
        done = await client.post(
            f"{url}/supersede", json={"by": str(new.document_id)}, headers=teacher
        )
        assert done.status_code == 200 and done.json()["status"] == "superseded"
        await settled(db_pool, old.document_id, active=False)
        assert _cited(await ask(client, gateway, session["id"], QUESTION, student)) == {
            new.document_id
        }  # fmt: skip
        again = await client.post(
            f"{url}/supersede", json={"by": str(new.document_id)}, headers=teacher
        )
        assert again.status_code == 409
        back = await client.post(f"{url}/restore", headers=teacher)
        assert back.json()["status"] == "indexed"
        audit = (await client.get(f"{url}/audit", headers=teacher)).json()
    assert [a["action"] for a in audit] == ["superseded", "restored"]
    assert audit[0]["changes"]["superseded_by"] == [None, str(new.document_id)]
