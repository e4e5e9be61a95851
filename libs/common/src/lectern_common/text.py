"""Text utilities two or more services share: follow-up questions without a model.

A follow-up ("What are its side effects?", "And how long does it last?") names its topic
only through a pronoun or by ellipsis. Without a language model to rewrite it, the topic is
carried over from the conversation: the content words of the earlier question(s) it follows
are added to it, so retrieval and the offline answerer look for the right thing.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

_WORD = re.compile(r"[^\W_]+(?:['’-][^\W_]+)*", re.UNICODE)
#: words that point back at something named earlier (English and German)
ANAPHORS = frozenset(
    """it its itself they them their theirs themselves he him his she her hers this these
    those es sein seine seiner seinen seinem ihr ihre ihrer ihren ihrem dies diese dieser
    dieses diesen davon dazu darin deren dessen""".split()
)
_ELLIPSIS = re.compile(
    r"^\s*(?:and|also|what about|how about|what else|und|was ist mit|und was)\b", re.IGNORECASE
)
_QUESTION_WORDS = frozenset(
    """what which who whom whose when where why how does do did is are was were can could
    should would will explain describe tell me please give list name define mean meaning
    the a an of in on at to for from by with about and or as be been being has have had
    there some any many much more most other such than that this these those it its they
    them their you your i we our my was wie wer wo warum welche welcher welches ist sind
    der die das ein eine und oder mit von zu im in den dem des common often frequent
    frequently usually typically long""".split()
)
MAX_CARRIED_WORDS = 8


def words(text: str) -> list[str]:
    """The words of ``text``, in order."""
    return _WORD.findall(text)


def is_follow_up(question: str) -> bool:
    """Whether a question refers back to the conversation (a pronoun, or "and ...?")."""
    if _ELLIPSIS.match(question):
        return True
    return any(w.casefold() in ANAPHORS for w in words(question))


def topic_words(text: str) -> list[str]:
    """Content words of a question (question words, pronouns and function words removed)."""
    seen: dict[str, str] = {}
    for word in words(text):
        key = word.casefold()
        if key in _QUESTION_WORDS or key in ANAPHORS or len(key) < 2 or key in seen:
            continue
        seen[key] = word
    return list(seen.values())


def resolve_follow_up(question: str, earlier_questions: Sequence[str]) -> str:
    """``question`` with the topic of the questions it follows appended, when it is a
    follow-up; unchanged otherwise. ``earlier_questions`` are the user's, oldest first."""
    if not earlier_questions or not is_follow_up(question):
        return question
    previous = resolve_follow_up(earlier_questions[-1], earlier_questions[:-1])
    present = {w.casefold() for w in words(question)}
    carried = [w for w in topic_words(previous) if w.casefold() not in present]
    if not carried:
        return question
    return f"{question.rstrip()} ({' '.join(carried[:MAX_CARRIED_WORDS])})"


#: a chunk with fewer words than this is embedded without its document's title
TITLE_OUTWEIGHS_WORDS = 30


def embedding_text(text: str, prefix: str | None, title: str | None) -> str:
    """What is embedded for a chunk (ingest) and scored against a question (re-ranker): its
    contextual prefix ("Title > Section > ...") and its text.

    A short chunk (a journal header, a copyright line) is embedded without the title: every
    chunk of the document shares it, and in a few words it would outweigh the text and make
    the chunk look like the document's best answer to any question about its topic. The
    title stays in every chunk's BM25 terms either way."""
    if prefix and title and len(text.split()) < TITLE_OUTWEIGHS_WORDS:
        key = title.strip().casefold()
        prefix = " > ".join(p for p in prefix.split(" > ") if p.strip().casefold() != key)
    return f"{prefix}\n{text}" if prefix else text
