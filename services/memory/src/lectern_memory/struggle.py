"""What a student's message says about them: confusion, a learning preference, or neither.

A small fitted classifier, not a list of phrases: a multinomial logistic regression over the
local MiniLM embedding of the message and hashed character n-grams of it (3 to 5 letters
within words, so that "comprends", "versteh" and "confus" carry across phrasings and the
languages the project indexes). It is fitted on labelled student messages
(``bench/memory/messages/fit.jsonl``) by ``bench/fit_struggle.py`` and checked on a set
written apart (``check.jsonl``); the fitted weights ship as ``struggle_model.json``.

Labels: ``confusion`` (the student says they do not follow: "I don't get ...", "still
confusing", "I'm lost", "can you explain again"), ``preference`` (how they like to learn),
``question`` (a plain question, "What is the difference between X and Y?") and ``other``.
"""

from __future__ import annotations

import functools
import json
import zlib
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

import numpy as np
from numpy.typing import NDArray

from lectern_common.text import SentenceRules, sentences, words

LABELS = ("confusion", "preference", "question", "other")
#: hashed character n-gram buckets
BUCKETS = 1024
_NGRAMS = (3, 4, 5)
#: a chat message's sentences: a stop (or "…") and white space end one whatever follows, since
#: students write in lower case; a line break alone does not
MESSAGE = SentenceRules(stop=r"[.!?…]+", start="", lines=False)

#: texts -> unit-length embedding rows (the local MiniLM model)
Encode = Callable[[Sequence[str]], Awaitable[NDArray[np.float32]]]


def char_ngrams(text: str) -> NDArray[np.float64]:
    """Hashed character n-grams of the lower-cased words of ``text``, unit length."""
    out = np.zeros(BUCKETS, dtype=np.float64)
    for word in words(text.casefold(), joined_by="'’", digits=False):
        padded = f"<{word}>"
        for n in _NGRAMS:
            for i in range(len(padded) - n + 1):
                out[zlib.crc32(padded[i : i + n].encode("utf-8")) % BUCKETS] += 1.0
    norm = float(np.linalg.norm(out))
    return out / norm if norm else out


def features(embeddings: NDArray[Any], texts: Sequence[str]) -> NDArray[np.float64]:
    """One row per text: its embedding, then its n-grams."""
    grams = np.stack([char_ngrams(t) for t in texts]) if texts else np.zeros((0, BUCKETS))
    return np.hstack([np.asarray(embeddings, dtype=np.float64), grams])


@dataclass(frozen=True)
class StruggleModel:
    """Weights (features x labels) and biases of the fitted classifier."""

    weights: NDArray[np.float64]
    bias: NDArray[np.float64]
    confusion_threshold: float = 0.5
    preference_threshold: float = 0.5

    def probabilities(self, rows: NDArray[np.float64]) -> NDArray[np.float64]:
        """Label probabilities of each feature row (columns in ``LABELS`` order)."""
        logits = rows @ self.weights + self.bias
        logits -= logits.max(axis=1, keepdims=True)
        odds = np.exp(logits)
        return np.asarray(odds / odds.sum(axis=1, keepdims=True), dtype=np.float64)

    def to_json(self, **figures: Any) -> dict[str, Any]:
        """The stored form, with the figures it was fitted to."""
        return {
            "labels": list(LABELS), "buckets": BUCKETS,
            "weights": np.round(self.weights, 5).tolist(), "bias": self.bias.round(5).tolist(),
            "confusion_threshold": self.confusion_threshold,
            "preference_threshold": self.preference_threshold, **figures,
        }  # fmt: skip


@functools.cache
def packaged_model() -> StruggleModel:
    """The fitted model shipped with the service."""
    data = json.loads(
        resources.files("lectern_memory").joinpath("struggle_model.json").read_text("utf-8")
    )
    if tuple(data["labels"]) != LABELS or data["buckets"] != BUCKETS:
        raise ValueError("struggle_model.json does not match this code's labels or features")
    return StruggleModel(
        weights=np.asarray(data["weights"], dtype=np.float64),
        bias=np.asarray(data["bias"], dtype=np.float64),
        confusion_threshold=float(data["confusion_threshold"]),
        preference_threshold=float(data["preference_threshold"]),
    )


@dataclass(frozen=True)
class Reading:
    """What one message says about the student."""

    confusion: float
    preference: float
    #: the whole message's probability of being a plain question on the material
    question: float
    #: the sentence that says it most (where the topic of a confusion is looked for)
    confused_sentence: str
    preference_sentence: str

    def confused(self, model: StruggleModel) -> bool:
        return self.confusion >= model.confusion_threshold

    def prefers(self, model: StruggleModel) -> bool:
        return not self.confused(model) and self.preference >= model.preference_threshold

    def asks(self) -> bool:
        """Whether the message is a question on the material (rather than thanks, an
        answer or a preference)."""
        return self.question >= max(self.preference, 1.0 - self.question - self.confusion)


async def read_messages(
    messages: Sequence[str], *, encode: Encode, model: StruggleModel | None = None
) -> list[Reading]:
    """Each message read: the whole message's probabilities, or a sentence's when higher."""
    model = model or packaged_model()
    parts = [sentences(m, rules=MESSAGE) or [m] for m in messages]
    texts = [t for m, p in zip(messages, parts, strict=True) for t in [m, *p]]
    if not texts:
        return []
    probs = model.probabilities(features(await encode(texts), texts))
    out: list[Reading] = []
    row = 0
    for message, pieces in zip(messages, parts, strict=True):
        block = probs[row : row + 1 + len(pieces)]
        row += 1 + len(pieces)
        candidates = [message, *pieces]
        c, p, q = (LABELS.index(label) for label in ("confusion", "preference", "question"))
        out.append(
            Reading(
                confusion=float(block[:, c].max()),
                preference=float(block[:, p].max()),
                question=float(block[0, q]),
                confused_sentence=candidates[int(block[1:, c].argmax()) + 1],
                preference_sentence=candidates[int(block[1:, p].argmax()) + 1],
            )
        )
    return out
