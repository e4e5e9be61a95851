"""Query rewriting: a rule-based fast path, multi-hop splitting, and an optional Gemini rewrite."""

from __future__ import annotations

import json
import logging
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from lectern_common.events.retrieval import Turn
from lectern_common.text import resolve_follow_up

log = logging.getLogger(__name__)

# Colloquial forms and common student abbreviations -> what textbooks say. Expansions are
# appended next to the original word, so keyword search still matches either form.
ABBREVIATIONS: dict[str, str] = {
    "bio": "biology",
    "chem": "chemistry",
    "phys": "physics",
    "math": "mathematics",
    "maths": "mathematics",
    "calc": "calculus",
    "geo": "geography",
    "econ": "economics",
    "govt": "government",
    "gov": "government",
    "lit": "literature",
    "hist": "history",
    "eq": "equation",
    "eqn": "equation",
    "def": "definition",
    "defn": "definition",
    "diff": "difference",
    "info": "information",
    "temp": "temperature",
    "approx": "approximately",
    "avg": "average",
    "ww1": "world war i",
    "wwi": "world war i",
    "ww2": "world war ii",
    "wwii": "world war ii",
    "uk": "united kingdom",
    "photosynth": "photosynthesis",
}
# What a question's opening asks for, in the words material states it with ("How common
# is X?" is answered by "X affects 1 in 2,500 ..." or "the prevalence of X ...").
QUESTION_HINTS: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(rf"\b{phrase}\b", re.IGNORECASE), hint)
    for phrase, hint in (
        ("how common", "prevalence frequency"),
        ("how often", "frequency"),
        ("how long", "duration"),
        ("how many", "number"),
        ("how old", "age"),
        ("what percentage", "percent"),
    )
)
COLLOQUIAL: dict[str, str] = {
    "whats": "what is",
    "what's": "what is",
    "hows": "how is",
    "how's": "how is",
    "whys": "why is",
    "why's": "why is",
    "wheres": "where is",
    "whos": "who is",
    "who's": "who is",
    "dont": "do not",
    "doesnt": "does not",
    "isnt": "is not",
    "cant": "cannot",
    "u": "you",
    "ur": "your",
    "pls": "please",
    "plz": "please",
    "thx": "thanks",
    "b/c": "because",
    "bc": "because",
    "w/": "with",
    "w/o": "without",
    "vs": "versus",
    "vs.": "versus",
}
_TOKEN = re.compile(r"[\w'./]+|[^\w\s]", re.UNICODE)
_SPACE = re.compile(r"\s+")
_TRAIL = r"\s*[?.!]*\s*$"
_SPLITTERS: list[tuple[str, re.Pattern[str]]] = [
    ("comparison", re.compile(r"^(?:compare|contrast)\s+(.+?)\s+(?:and|with|to|versus)\s+(.+?)"
                              + _TRAIL, re.I)),
    ("comparison", re.compile(r"^(?:what\s+(?:is|are)\s+)?(?:the\s+)?differences?\s+between\s+"
                              r"(.+?)\s+and\s+(.+?)" + _TRAIL, re.I)),
    ("comparison", re.compile(r"^(?:how\s+(?:does|do|is|are)\s+)?(.+?)\s+(?:differ\s+from|"
                              r"compare\s+(?:to|with))\s+(.+?)" + _TRAIL, re.I)),
    ("comparison", re.compile(r"^(.+?)\s+(?:versus|vs\.?)\s+(.+?)" + _TRAIL, re.I)),
    ("cause", re.compile(r"^(?:how|why)\s+(?:did|does|do|can|could|would|might)\s+(.+?)\s+"
                         r"(?:lead\s+to|cause|result\s+in|contribute\s+to|bring\s+about)\s+(.+?)"
                         + _TRAIL, re.I)),
    ("cause", re.compile(r"^what\s+(?:is|was|are|were)\s+the\s+(?:effects?|impacts?|"
                         r"influence)\s+of\s+(.+?)\s+on\s+(.+?)" + _TRAIL, re.I)),
]  # fmt: skip


@dataclass(frozen=True)
class RewriteContext:
    """What the request tells about the question besides its text."""

    subject: str | None = None
    module_tag: str | None = None
    topic_tags: Sequence[str] = ()


@dataclass
class Rewritten:
    """The queries to run: the main one first, then sub-queries of a multi-hop question."""

    main: str
    sub_queries: list[str] = field(default_factory=list)
    kind: str = "simple"
    by: str = "rules"

    @property
    def all(self) -> list[str]:
        """Every query, the main one first, without duplicates."""
        seen: list[str] = []
        for q in [self.main, *self.sub_queries]:
            if q and q.casefold() not in {s.casefold() for s in seen}:
                seen.append(q)
        return seen


def normalise(text: str) -> str:
    """Unicode NFKC, straight quotes, collapsed whitespace."""
    text = unicodedata.normalize("NFKC", text)
    text = text.replace("\u2019", "'").replace("\u2018", "'").replace("\u201c", '"')
    text = text.replace("\u201d", '"')
    return _SPACE.sub(" ", text).strip()


def expand(text: str) -> str:
    """Replace colloquial forms and append expansions of abbreviations (original kept)."""
    out: list[str] = []
    for token in _TOKEN.findall(text):
        key = token.casefold()
        if key in COLLOQUIAL:
            out.append(COLLOQUIAL[key])
        elif key in ABBREVIATIONS and ABBREVIATIONS[key] not in text.casefold():
            out.append(f"{token} ({ABBREVIATIONS[key]})")
        else:
            out.append(token)
    joined = " ".join(out)
    joined = re.sub(r"\s+([?.!,;:)])", r"\1", joined).replace("( ", "(")
    hints = [hint for pattern, hint in QUESTION_HINTS if pattern.search(text)]
    return f"{joined} ({' '.join(hints)})" if hints else joined


def context_keywords(text: str, context: RewriteContext) -> list[str]:
    """Subject, module and topic words of the request that the question does not mention."""
    lowered = text.casefold()
    words: list[str] = []
    for value in (context.subject, context.module_tag, *context.topic_tags):
        if value:
            phrase = value.replace("_", " ").replace("-", " ").strip()
            if phrase and phrase.casefold() not in lowered and phrase not in words:
                words.append(phrase)
    return words


def split_multi_hop(text: str) -> tuple[str, list[str]]:
    """('comparison'|'cause', [X, Y]) for multi-hop questions, ('simple', []) otherwise."""
    stripped = text.strip()
    for kind, pattern in _SPLITTERS:
        match = pattern.match(stripped)
        if match:
            parts = [p.strip(" ,;") for p in match.groups()]
            if all(len(p) >= 2 for p in parts) and parts[0].casefold() != parts[1].casefold():
                return kind, parts
    return "simple", []


def rule_rewrite(
    query: str,
    *,
    context: RewriteContext = RewriteContext(),
    multi_hop: bool = True,
    earlier_questions: Sequence[str] = (),
) -> Rewritten:
    """The fast path: normalise, carry the topic into a follow-up, expand, add context
    keywords, split multi-hop questions."""
    base = resolve_follow_up(normalise(query), [normalise(q) for q in earlier_questions])
    expanded = expand(base)
    extra = context_keywords(expanded, context)
    main = f"{expanded} {' '.join(extra)}".strip() if extra else expanded
    if not multi_hop:
        return Rewritten(main=main)
    kind, parts = split_multi_hop(base)
    if kind == "simple":
        return Rewritten(main=main)
    suffix = f" {' '.join(extra)}" if extra else ""
    return Rewritten(main=main, sub_queries=[expand(p) + suffix for p in parts], kind=kind)


REWRITE_PROMPT = """You rewrite a student's question for a search engine over course material.
Resolve pronouns and references ("it", "that", "they") using the conversation. Return JSON:
{{"queries": ["...", "..."], "kind": "simple" | "comparison" | "cause"}} with 2 or 3 short,
self-contained search queries; the first restates the whole question. For comparison or
cause-effect questions, the others are one sub-question per side.

Conversation (oldest first):
{history}

Question: {question}"""


def build_rewrite_prompt(query: str, history: Sequence[Turn]) -> str:
    """The prompt for the LLM rewrite (the last turns give pronouns their referents)."""
    lines = [f"{t.role}: {t.text[:500]}" for t in history[-6:]] or ["(none)"]
    return REWRITE_PROMPT.format(history="\n".join(lines), question=query)


def parse_llm_rewrite(raw: str, *, fallback: Rewritten) -> Rewritten:
    """Rewritten queries from the model's JSON; the fallback when it is unusable."""
    try:
        data: Any = json.loads(raw)
    except (TypeError, ValueError):
        return fallback
    queries = data.get("queries") if isinstance(data, dict) else None
    if not isinstance(queries, list):
        return fallback
    cleaned = [normalise(q)[:500] for q in queries if isinstance(q, str) and q.strip()][:3]
    if not cleaned:
        return fallback
    kind = data.get("kind") if data.get("kind") in ("simple", "comparison", "cause") else "simple"
    return Rewritten(main=cleaned[0], sub_queries=cleaned[1:], kind=str(kind), by="llm")


async def llm_rewrite(
    client: Any,
    *,
    model: str,
    query: str,
    history: Sequence[Turn],
    fallback: Rewritten,
) -> Rewritten:
    """Gemini rewrite into 2-3 queries (JSON mode); the fallback on any failure."""
    from google.genai import types

    config = types.GenerateContentConfig(
        response_mime_type="application/json",
        temperature=0.0,
        max_output_tokens=256,
        thinking_config=types.ThinkingConfig(thinking_budget=0),
    )
    try:
        response = await client.aio.models.generate_content(
            model=model, contents=build_rewrite_prompt(query, history), config=config
        )
    except Exception as exc:
        log.warning("LLM query rewrite failed, using the rule-based rewrite: %s", exc)
        return fallback
    return parse_llm_rewrite(response.text or "", fallback=fallback)
