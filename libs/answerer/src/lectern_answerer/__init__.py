"""The offline extractive answerer: answers a question from its sources alone, no model.

Every sentence, list item and table row of the sources is a unit (``units``). Each unit is
described by a few signals (``signals.SIGNALS``: term overlap by BM25, cosine similarity to
the question with the local embedding model, the rank and re-ranker score of its chunk,
whether it states a number for a number question, defines the subject of a definition
question, gives a cause for a why/how question, is a table row naming what is asked, follows
a matching heading, the similarity of its neighbours ...; the patterns they read are
``forms``'), and a logistic model fitted on the development split's labelled sentences
(``model``: ``answerer_model.json``, ``bench/fit_answerer.py``) combines them into the
probability that the unit states the answer. The answer (``compose``) is the best units
within a share of the best one (near-repeats dropped; another source is cited only when it
nearly ties and adds a term of the question the answer lacks), grouped by source in reading
order; the best sentence brings the next one of its paragraph (an answer is a passage), a
sentence goes on with the next when that one refers back to it, and a sentence a line break
cut is completed. A second fitted model decides whether the sources answer the question at
all (``signals.QUESTION_SIGNALS``: how well the best unit answers, how close anything comes,
the question's terms and names no source holds, the re-ranker's best score), under a floor:
no best unit further in meaning from the question than any answerable development question's
was. When they do not answer, the answer says so plainly (``answer``). ``offline`` streams it
as a generator the gateway's chain of models ends with. Deterministic, so everything runs and
is testable offline.

Words, stems and sentences are ``lectern_common.text``'s, the same for every service.
"""

from lectern_answerer.answer import NO_SUPPORT_TEXT, ExtractiveAnswer, ScoredSentence
from lectern_answerer.compose import MECHANISMS, extract_answer
from lectern_answerer.forms import QuestionForm, definiendum, question_form, states_number
from lectern_answerer.model import (
    MODEL_PATH,
    NO_READER_MODEL_PATH,
    READ_SPANS_MODEL_PATH,
    SPANS_MODEL_PATH,
    AnswerModel,
    Logistic,
    answer_model,
    below_floors,
    has_signal,
)
from lectern_answerer.offline import (
    READ_AT_MOST,
    READ_ENOUGH_LOGIT,
    READ_FIRST,
    OfflineAnswerer,
    SentenceReader,
    SpanReader,
)
from lectern_answerer.signals import (
    QUESTION_SIGNALS,
    READER_CLIP,
    SIGNALS,
    SPAN_SIGNALS,
    best_margin,
    question_signals,
    unit_signals,
)
from lectern_answerer.units import (
    SourceUnit,
    UnitReadings,
    answer_holders,
    candidate_sentences,
    has_answer_spans,
    reader_texts,
    source_units,
)

__all__ = [
    "MECHANISMS", "MODEL_PATH", "NO_READER_MODEL_PATH", "NO_SUPPORT_TEXT", "QUESTION_SIGNALS",
    "READER_CLIP", "READ_AT_MOST", "READ_ENOUGH_LOGIT", "READ_FIRST", "READ_SPANS_MODEL_PATH",
    "SIGNALS", "SPANS_MODEL_PATH", "SPAN_SIGNALS", "AnswerModel",
    "ExtractiveAnswer", "Logistic", "OfflineAnswerer", "QuestionForm", "ScoredSentence",
    "SentenceReader", "SourceUnit", "SpanReader", "UnitReadings", "answer_holders",
    "answer_model", "below_floors",
    "best_margin", "candidate_sentences", "definiendum", "extract_answer", "has_answer_spans",
    "has_signal", "question_form", "question_signals", "reader_texts", "source_units",
    "states_number", "unit_signals",
]  # fmt: skip
