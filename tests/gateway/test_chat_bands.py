"""One definition of the confidence bands (shared settings) for the re-ranker and the gateway,
the copy of each band, and the student context the gateway sends the re-ranker."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from pydantic import ValidationError

from lectern_common.education import BandThresholds, answered_band, band_for
from lectern_common.events import Confidence
from lectern_common.events.chat import ConfidenceBand
from lectern_gateway.auth import Principal
from lectern_gateway.chat.confidence import (
    LOW_CAVEAT,
    LOW_PREAMBLE,
    MEDIUM_CAVEAT,
    MEDIUM_PREAMBLE,
    caveat,
    preamble,
)
from lectern_gateway.chat.context import (
    boost_tags_for,
    cited_documents,
    filters_for,
    student_context,
)
from lectern_gateway.chat.decision import final_confidence
from lectern_gateway.chat.turn_input import ChatSession, HistoryRow
from lectern_gateway.config import Settings as GatewaySettings

BAND_ENV = ("LECTERN_BAND_HIGH", "LECTERN_BAND_MEDIUM", "LECTERN_BAND_LOW")


@pytest.fixture(autouse=True)
def _no_band_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in BAND_ENV:
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize(
    ("score", "band"),
    [
        (1.0, "high"),
        (0.80, "high"),
        (0.799, "medium"),
        (0.60, "medium"),
        (0.599, "low"),
        (0.40, "low"),
        (0.399, "gap"),
        (0.0, "gap"),
    ],
)
def test_band_boundaries_are_the_documented_ones(score: float, band: ConfidenceBand) -> None:
    assert band_for(score, 1.0, BandThresholds()) == band
    # an answered question is low at worst: gap is decided before generation
    assert answered_band(score, BandThresholds()) == ("low" if band == "gap" else band)


@pytest.mark.parametrize(
    ("score", "band"),
    [(0.80, "high"), (0.799, "medium"), (0.60, "medium"), (0.599, "low"), (0.30, "low")],
)
def test_gateway_final_band_uses_the_shared_cut_offs(score: float, band: ConfidenceBand) -> None:
    prior = Confidence(score=score, band="high", retrieval=0.9, source_quality=0.8, grounding=0.5)
    # grounding equal to the prior leaves the score as it was: only the band is recomputed
    final = final_confidence(
        prior, grounding=0.5, weight=0.3, thresholds=GatewaySettings().band_thresholds()
    )
    assert final.score == pytest.approx(score) and final.band == band


def test_gateway_and_reranker_read_the_same_configured_thresholds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reranker_config = pytest.importorskip("lectern_reranker.config")
    defaults = GatewaySettings().band_thresholds()
    assert (defaults.high, defaults.medium, defaults.low) == (0.80, 0.60, 0.40)
    monkeypatch.setenv("LECTERN_BAND_HIGH", "0.9")
    monkeypatch.setenv("LECTERN_BAND_MEDIUM", "0.7")
    monkeypatch.setenv("LECTERN_BAND_LOW", "0.5")
    gateway = GatewaySettings().band_thresholds()
    reranker = reranker_config.Settings().rerank_config().bands
    assert (gateway.high, gateway.medium, gateway.low) == (0.9, 0.7, 0.5)
    assert (reranker.high, reranker.medium, reranker.low) == (0.9, 0.7, 0.5)
    prior = Confidence(score=0.85, band="high", retrieval=0.9, source_quality=0.8, grounding=0.5)
    assert final_confidence(prior, grounding=0.5, weight=0.3, thresholds=gateway).band == "medium"


def test_thresholds_out_of_order_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LECTERN_BAND_MEDIUM", "0.9")
    with pytest.raises(ValidationError, match="low <= medium <= high"):
        GatewaySettings()


def test_measured_grounding_lowers_but_never_raises_the_band() -> None:
    thresholds = BandThresholds()
    medium = Confidence(score=0.7, band="medium", retrieval=0.8, source_quality=0.6, grounding=0.5)
    assert final_confidence(medium, grounding=1.0, weight=0.3, thresholds=thresholds).band == (
        "medium"
    )  # 0.85 would be high: not promoted past the band it was answered in
    lowered = final_confidence(medium, grounding=0.0, weight=0.3, thresholds=thresholds)
    assert lowered.score == 0.55 and lowered.band == "low"


def test_the_copy_follows_the_band() -> None:
    assert preamble("high") == ""
    assert preamble("medium") == MEDIUM_PREAMBLE
    assert MEDIUM_PREAMBLE.startswith("Based on the available materials")
    assert preamble("low") == LOW_PREAMBLE
    assert "limited" in LOW_PREAMBLE and "check this answer with your teacher" in LOW_PREAMBLE
    # a band lowered after the answer streamed ends with the lower band's words
    assert caveat("high", "high") == "" and caveat("medium", "medium") == ""
    assert caveat("high", "medium") == MEDIUM_CAVEAT
    assert "Based on the available materials" in MEDIUM_CAVEAT
    assert caveat("high", "low") == caveat("medium", "low") == LOW_CAVEAT
    assert "check this answer with your teacher" in LOW_CAVEAT
    assert caveat("low", "low") == ""  # the low opening already said it


STUDENT = Principal(tenant_id="t", user_id="stu-1", role="student")


def _session(**values: Any) -> ChatSession:
    base: dict[str, Any] = {
        "id": uuid.uuid4(),
        "mode": "chat",
        "subject": "biology",
        "grade_level": 7,
        "module_tag": "cells",
        "class_id": "7B",
        "learning_style": "visual",
        "curriculum_standards": ["NGSS-LS1-1"],
    }
    base.update(values)
    return ChatSession.of_row(base)


def test_student_context_carries_class_teachers_standards_and_content_types() -> None:
    student = student_context(STUDENT, _session(), teacher_ids=["t-7b"])
    assert student.class_id == "7B" and student.teacher_ids == ["t-7b"]
    assert student.curriculum_standards == ["NGSS-LS1-1"]
    assert student.learning_style == "visual"
    assert {"diagram", "slides", "video"} <= set(student.preferred_content_types)
    bare = student_context(
        STUDENT, _session(learning_style=None, curriculum_standards=None), teacher_ids=[]
    )
    assert bare.preferred_content_types == [] and bare.curriculum_standards == []


def test_class_sessions_retrieve_their_class_and_unassigned_material() -> None:
    filters = filters_for(_session())
    assert filters.class_id == "7B" and filters.include_unassigned
    assert not filters_for(_session(class_id=None)).include_unassigned
    assert boost_tags_for(_session()) == ["cells"]
    assert boost_tags_for(_session(module_tag=None)) == []


def test_a_sessions_curriculum_standards_filter_chat_untagged_material_included() -> None:
    filters = filters_for(_session())
    assert filters.curriculum_standards == ["NGSS-LS1-1"] and filters.include_untagged
    assert filters_for(_session(curriculum_standards=None)).curriculum_standards is None


def test_cited_documents_of_the_last_answers_most_recent_first() -> None:
    d1, d2, d3, d4 = (uuid.uuid4() for _ in range(4))

    def answer(*documents: uuid.UUID | None) -> HistoryRow:
        citations = [{"label": "T1", "document_id": str(d) if d else None} for d in documents]
        citations.append({"label": "W1", "url": "https://example.org"})
        return HistoryRow.of_row(
            {"id": uuid.uuid4(), "role": "assistant", "content": "", "citations": citations}
        )

    question = HistoryRow(id=uuid.uuid4(), role="user", content="?")
    rows = [
        answer(d4),  # older than the last three answers: not boosted
        question,
        answer(d1),
        answer(d2, None),
        question,
        answer(d3, d1),
    ]
    assert cited_documents(rows) == [d3, d1, d2]
    assert cited_documents([]) == []
