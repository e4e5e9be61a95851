"""Event and request/reply contracts, one module per producing domain.

Subjects are ``lectern.<domain>.<event>.v<N>``. Adding an optional field keeps the version;
a breaking change is a new class on a new ``.v{N+1}`` subject. Consumers ignore unknown fields.
"""

from lectern_common.events.base import (
    ALL_EVENTS,
    ALL_REQUESTS,
    Event,
    Reply,
    Request,
    Subjects,
)
from lectern_common.events.chat import ChatSessionEnded, ChatTurnCompleted, CitationRef
from lectern_common.events.deadletter import MAX_PARKED_PAYLOAD, MessageParked, parked_event_id
from lectern_common.events.documents import (
    DocumentArchived,
    DocumentDeleted,
    DocumentFailed,
    DocumentIndexed,
    DocumentMetadata,
    DocumentProgress,
    DocumentRestored,
    DocumentUpdated,
    DocumentUploaded,
    FailureReason,
    IngestStage,
    outcome_event_id,
)
from lectern_common.events.feedback import FeedbackFlagged, KnowledgeGapDetected
from lectern_common.events.memory import (
    MemoryDistilled,
    MemoryRecallReply,
    MemoryRecallRequest,
    RecalledMemory,
)
from lectern_common.events.retrieval import (
    Candidate,
    Confidence,
    RankedChunk,
    RerankReply,
    RerankRequest,
    RetrievalFilters,
    RetrieveReply,
    RetrieveRequest,
    StudentContext,
)
from lectern_common.events.study import QuizAnswerResult, QuizAttempted
from lectern_common.events.users import UserErased, erased_user_key

__all__ = [
    "ALL_EVENTS",
    "ALL_REQUESTS",
    "MAX_PARKED_PAYLOAD",
    "Candidate",
    "ChatSessionEnded",
    "ChatTurnCompleted",
    "CitationRef",
    "Confidence",
    "DocumentArchived",
    "DocumentDeleted",
    "DocumentFailed",
    "DocumentIndexed",
    "DocumentMetadata",
    "DocumentProgress",
    "DocumentRestored",
    "DocumentUpdated",
    "DocumentUploaded",
    "Event",
    "FailureReason",
    "FeedbackFlagged",
    "IngestStage",
    "KnowledgeGapDetected",
    "MemoryDistilled",
    "MemoryRecallReply",
    "MemoryRecallRequest",
    "MessageParked",
    "QuizAnswerResult",
    "QuizAttempted",
    "RankedChunk",
    "RecalledMemory",
    "Reply",
    "Request",
    "RerankReply",
    "RerankRequest",
    "RetrievalFilters",
    "RetrieveReply",
    "RetrieveRequest",
    "StudentContext",
    "Subjects",
    "UserErased",
    "erased_user_key",
    "outcome_event_id",
    "parked_event_id",
]
