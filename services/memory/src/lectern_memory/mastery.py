"""Mastery across sessions: what a student answered tutor checks on right in two chat
sessions running.

A check's topic is the student's question's topic, and two questions on one subject are
named differently from one session to the next ("blacklist a fragment", then "backoff counter
used for in blacklisting"; "low level mosaicism", then "turner syndrome"). A run of right
answers kept per topic name (``memory_quiz_topics``) therefore hardly ever reached two: the
memory benchmark's mastered recall was 0.11 while every scripted right reply was judged right.

So a check counts towards a *unit* of what it tests (``memory_check_runs``): the section of
the material its statement comes from (the document's heading path, the most specific one
the gateway knows), or, where the material has no headings below its title, each word of its
topic, lightly stemmed. A unit keeps the last session a check on it was answered in, whether
every check on it in that session was right, and for how many sessions running that has
held; :data:`MASTERY_SESSIONS` make it mastered. The memory is named by one of its checks'
topics, whole (the latest sharing a word with the earlier sessions' topics, never by a word of
the document's title: :meth:`Mastered.name`), and its text lists the topics checked.

A wrong or partial answer on a unit ends its run and withdraws the mastery it made (a teacher
writes "mastered" only with no later wrong answer on it); a skipped check ends the run and
withdraws nothing. Several right checks in one session count once: one session's right
answers are not mastery.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, field
from datetime import datetime

from lectern_common.db.types import Queryable
from lectern_common.text import STOPWORDS, stem, words
from lectern_common.topics import NOT_TOPICAL
from lectern_memory import repository as repo

#: sessions running, each with every check on a unit answered right, that make it mastered
MASTERY_SESSIONS = 2
#: a word this short is no subject ("set", "use" pass; "x", "of" do not)
_MIN_LETTERS = 3
#: topics a run keeps for the memory's text
_KEPT_TOPICS = 8
#: a heading's numbering ("4.2", "CHAPTER IV", "Part I", "3.")
_NUMBERING = re.compile(
    r"^(?:(?:chapter|part|section|unit|lesson)\s+(?:[0-9]+|[ivxlc]+)\.?"
    r"|[0-9]+(?:\.[0-9]+)*\.?|[ivxlc]+\.)\s+",
    re.I,
)


def topic_words(topic: str) -> list[str]:
    """The stems of ``topic``'s content words, in order, each once."""
    return list(dict.fromkeys(stem(w) for w in _content(topic)))


def _content(topic: str) -> list[str]:
    return [
        w
        for w in (w.casefold() for w in words(topic, joined_by="'’", digits=False))
        if len(w) >= _MIN_LETTERS and w not in STOPWORDS and w not in NOT_TOPICAL
    ]


def heading(section: str) -> str:
    """A section path's last heading without its numbering ("3. Trace Trees > 3.3
    Blacklisting" -> "blacklisting")."""
    last = section.rsplit(">", 1)[-1].strip()
    return (_NUMBERING.sub("", last) or last).casefold()


def subject_words(title: str | None, section: str | None) -> set[str]:
    """The words that name the whole document, not anything in it a student masters: its
    title's, and the heading its sections hang from ("Turner syndrome: issues to consider >
    Background")."""
    named = set(topic_words(title or ""))
    if section and ">" in section:
        named |= set(topic_words(section.split(">", 1)[0]))
    return named


def units_of(
    topic: str, *, section: str | None, document_id: uuid.UUID | None, title: str | None = None
) -> list[str]:
    """What a check counts towards: its section, else each word of its topic that does not
    name the whole document."""
    if section and document_id is not None:
        return [f"s:{document_id}:{section}"]
    subject = subject_words(title, section)
    return [f"w:{w}" for w in topic_words(topic) if w not in subject]


@dataclass(frozen=True)
class Mastered:
    """A unit whose run reached :data:`MASTERY_SESSIONS` with this check."""

    unit: str
    #: the right checks' topics in this session, and in the run's earlier sessions
    topics: list[str]
    earlier: list[str]

    def name(self, section: str | None, title: str | None = None) -> str:
        """The latest of this session's topics that shares a word with the earlier sessions';
        else the topic the run stood on when this session reached it (the earlier sessions'
        last), else this session's; else the section's heading. Always a whole topic, as
        every memory's is: a memory's topic is matched against later questions' topics (a
        mastered one makes the tutor brief), and a fragment such as "high" (of "high variance"
        and "high bias") would match unrelated questions. Words that name the whole document
        (``subject_words``) name no mastery: "turner syndrome" in a review of Turner syndrome
        says nothing of what a student showed they know about it."""
        subject = subject_words(title, section)
        shared = (
            set(topic_words(" ".join(self.earlier))) & set(topic_words(" ".join(self.topics)))
        ) - subject
        for topic in reversed(self.topics):
            if set(topic_words(topic)) & shared:
                return topic.casefold()
        for topic in [*reversed(self.earlier), *reversed(self.topics)]:
            if set(topic_words(topic)) - subject:
                return topic.casefold()
        return heading(section) if section else self.topics[-1].casefold()

    def text(self, name: str, what: str) -> str:
        checked = list(dict.fromkeys(t.casefold() for t in [*self.earlier, *self.topics]))
        return (
            f"Answered {what} on {name} right in {MASTERY_SESSIONS} sessions running "
            f"({'; '.join(checked)})"
        )


@dataclass
class Tally:
    """What one check did to its units."""

    reached: list[Mastered] = field(default_factory=list)
    #: 'mastered' memories a wrong or partial answer withdraws
    withdrawn: list[uuid.UUID] = field(default_factory=list)


async def tally_check(
    conn: Queryable,
    *,
    tenant_id: str,
    user_id: str,
    session_id: uuid.UUID,
    units: list[str],
    topic: str,
    said: str,
    answered_at: datetime,
) -> Tally:
    """Count one check's outcome (``right``, ``partly``, ``wrong`` or ``skipped``) on its
    units (call inside the attempt's transaction, the user locked). A check of another
    session answered before the unit's last one counted (a redelivery arriving late) counts
    for nothing there: the run is of sessions in the order they happened."""
    tally = Tally()
    if not units:
        return tally
    rows = await repo.check_runs(conn, tenant_id=tenant_id, user_id=user_id, units=units)
    right = said == "right"
    for unit in units:
        row = rows.get(unit)
        mastered = None if row is None else row["mastered_id"]
        running, topics, earlier = 0, [], []
        if row is not None and row["session_id"] != session_id and answered_at < row["answered_at"]:
            continue
        if row is not None and row["session_id"] == session_id:
            if not row["session_right"]:
                continue  # a session with a check not answered right stays failed
            if right:  # a session counts once; its topics are kept for the memory's text
                running, topics = row["sessions_running"], [*row["topics"], topic]
                earlier = list(row["earlier_topics"])
        elif right:
            held = row is not None and row["session_right"]
            running = (row["sessions_running"] if held and row is not None else 0) + 1
            topics = [topic]
            earlier = [*row["earlier_topics"], *row["topics"]] if held and row is not None else []
            if running >= MASTERY_SESSIONS and mastered is None:
                tally.reached.append(Mastered(unit, topics, earlier[-_KEPT_TOPICS:]))
        if said in ("wrong", "partly") and mastered is not None:
            tally.withdrawn.append(mastered)
            mastered = None
        await repo.put_check_run(
            conn, tenant_id=tenant_id, user_id=user_id, unit=unit, session_id=session_id,
            session_right=right, sessions_running=running, topics=topics[-_KEPT_TOPICS:],
            earlier_topics=earlier[-_KEPT_TOPICS:], mastered_id=mastered,
            answered_at=answered_at,
        )  # fmt: skip
    return tally
