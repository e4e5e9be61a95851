"""What a course's real material needs from retrieval: untagged uploads, apparatus chunks
kept out, questions stemmed in the material's language, and no starving per-document cap."""

from __future__ import annotations

from typing import Any

import pytest

from lectern_common.embeddings import Embedder
from lectern_common.events import RetrievalFilters, RetrieveRequest

pytestmark = pytest.mark.integration

PHOTO = "Photosynthesis turns light, water and carbon dioxide into glucose and oxygen."


def ask(tenant_id: str, query: str, **kw: Any) -> RetrieveRequest:
    return RetrieveRequest(tenant_id=tenant_id, query=query, **kw)


async def test_untagged_material_and_any_case_of_subject_match_a_session(
    db_pool: Any, retriever: Any, embedder: Embedder, tenant_id: str, add_doc: Any
) -> None:
    tagged = await add_doc(
        db_pool, tenant_id=tenant_id, texts=[PHOTO], embedder=embedder, subject="Biology",
        grade_level=9,
    )  # fmt: skip
    untagged = await add_doc(
        db_pool, tenant_id=tenant_id, texts=[PHOTO + " Leaves hold chlorophyll."],
        embedder=embedder,
    )  # fmt: skip
    other = await add_doc(
        db_pool, tenant_id=tenant_id, texts=[PHOTO + " In maths class."], embedder=embedder,
        subject="mathematics",
    )  # fmt: skip
    session = RetrievalFilters(subject="biology", grade_level=9, include_untagged=True)
    found = {c.document_id for c in (await retriever.retrieve(
        ask(tenant_id, "how does photosynthesis work", filters=session))).candidates}  # fmt: skip
    assert found == {tagged, untagged}
    strict = RetrievalFilters(subject="BIOLOGY")
    found = {c.document_id for c in (await retriever.retrieve(
        ask(tenant_id, "how does photosynthesis work", filters=strict))).candidates}  # fmt: skip
    assert found == {tagged} and other not in found


async def test_reference_lists_do_not_compete_with_content_unless_asked_for(
    db_pool: Any, retriever: Any, embedder: Embedder, tenant_id: str, add_doc: Any
) -> None:
    content = await add_doc(
        db_pool, tenant_id=tenant_id, embedder=embedder,
        texts=["The risk of gonadoblastoma with Y chromosome material is estimated at 30%."],
    )  # fmt: skip
    references = await add_doc(
        db_pool, tenant_id=tenant_id, embedder=embedder, kind="references",
        texts=["7. Wolff DJ, et al. Gonadoblastoma risk and Y chromosome material in Turner "
               "syndrome. Genet Med 2010;12:52-5. 8. Gonadoblastoma risk, Y chromosome. "
               "J Pediatr 2011;3:4-9."],
    )  # fmt: skip
    question = "what is the risk of gonadoblastoma with Y chromosome material"
    reply = await retriever.retrieve(ask(tenant_id, question))
    assert [c.document_id for c in reply.candidates] == [content]
    asked = RetrievalFilters(kinds=["references"])
    reply = await retriever.retrieve(ask(tenant_id, question, filters=asked))
    assert [c.document_id for c in reply.candidates] == [references]
    assert reply.candidates[0].kind == "references"


async def test_a_german_question_is_stemmed_as_the_german_material_is(
    db_pool: Any, retriever: Any, embedder: Embedder, tenant_id: str, add_doc: Any
) -> None:
    text = "Ein topologischer Raum ist eine Menge zusammen mit einer Topologie offener Mengen."
    document = await add_doc(
        db_pool, tenant_id=tenant_id, texts=[text], embedder=embedder, ts_config="german"
    )
    # the German stemmer makes "topologischen Räume" and "topologischer Raum" one lexeme
    # each; the English one does not, so without the tenant's language BM25 finds nothing
    question = "Was sind topologische Räume?"
    reply = await retriever.retrieve(ask(tenant_id, question, methods=["sparse"]))
    assert [c.document_id for c in reply.candidates] == [document]
    english = RetrievalFilters(language="en")
    reply = await retriever.retrieve(ask(tenant_id, question, methods=["sparse"], filters=english))
    assert reply.candidates == []


async def test_a_few_misdetected_documents_do_not_stem_every_question(
    db_pool: Any, retriever: Any, embedder: Embedder, tenant_id: str, add_doc: Any
) -> None:
    """One document in twelve indexed "simple" (a language detector's miss) must not add the
    question's stop words as rare, heavy terms that pull that document to the top."""
    for i in range(11):
        await add_doc(
            db_pool, tenant_id=tenant_id, embedder=embedder, ts_config="english",
            texts=[f"Chlorophyll absorbs light for photosynthesis in leaf cell {i}."],
        )  # fmt: skip
    noise = await add_doc(
        db_pool, tenant_id=tenant_id, embedder=embedder, ts_config="simple",
        texts=["What is the thing that is in the box and what is it for?"],
    )  # fmt: skip
    question = "What is the role of chlorophyll in the leaf?"
    reply = await retriever.retrieve(ask(tenant_id, question, methods=["sparse"]))
    assert reply.candidates
    assert noise not in [c.document_id for c in reply.candidates]


async def test_one_textbook_is_not_capped_at_three_candidates(
    db_pool: Any, retriever: Any, embedder: Embedder, tenant_id: str, add_doc: Any
) -> None:
    texts = [f"{PHOTO} Part {i} of the chapter on leaves and light." for i in range(8)]
    await add_doc(db_pool, tenant_id=tenant_id, texts=texts, embedder=embedder)
    reply = await retriever.retrieve(ask(tenant_id, "photosynthesis light leaves", k=8))
    assert len(reply.candidates) == 8  # the default max_per_document=3 only spreads the top


async def test_a_reply_stays_under_the_nats_payload_limit_whatever_is_stored(
    db_pool: Any, retriever: Any, embedder: Embedder, tenant_id: str, add_doc: Any
) -> None:
    """Rows written before ingest cut long tokens (or by hand) must not make every search of
    the tenant fail with a reply larger than NATS's 1 MB maximum payload."""
    vectors = await embedder.embed_documents([PHOTO] * 30)
    huge = [PHOTO + " " + "z" * 300_000 for _ in range(30)]  # 9 MB of text in all
    await add_doc(db_pool, tenant_id=tenant_id, texts=huge, vectors=vectors)
    reply = await retriever.retrieve(ask(tenant_id, "how does photosynthesis work", k=30))
    assert reply.candidates
    assert len(reply.model_dump_json()) < 1024 * 1024
    assert all(len(c.text) <= 8000 for c in reply.candidates)
