"""An extractive answer: the units chosen, each scored and cited, and its text."""

from __future__ import annotations

import re
from dataclasses import dataclass

from lectern_answerer.forms import QuestionForm, without_footnote_mark

NO_SUPPORT_TEXT = "I could not find anything in the provided material that answers this question."


@dataclass(frozen=True)
class ScoredSentence:
    """A unit of a source, with its position there and its scores."""

    label: str
    source_index: int
    position: int
    text: str
    lexical: float
    semantic: float | None
    score: float
    item: bool = False
    #: for a definition question: the unit states what the subject is ("X is ...", "X says
    #: that ...", "X is called ... if ...")
    defines: bool = False


@dataclass(frozen=True)
class ExtractiveAnswer:
    """The units chosen to answer, in reading order; empty when nothing supports one."""

    sentences: list[ScoredSentence]
    form: QuestionForm = "general"

    @property
    def supported(self) -> bool:
        """Whether any unit was found."""
        return bool(self.sentences)

    @property
    def cited(self) -> list[str]:
        """Distinct labels cited, in order."""
        return list(dict.fromkeys(s.label for s in self.sentences))

    def render(self) -> str:
        """The answer text: sentences each followed by its citation, list items as a list."""
        return "".join(self.parts())

    def parts(self) -> list[str]:
        """The answer text a sentence (or list item) at a time, each with its citation; joined
        they are ``render()``."""
        if not self.sentences:
            return [NO_SUPPORT_TEXT]
        out: list[str] = []
        for s, following in zip(self.sentences, [*self.sentences[1:], None], strict=True):
            text = s.text
            if following is not None and following.item and not s.item:
                # "you should be able to . . ." before its items
                text = _TRAILING_ELLIPSIS.sub(":", text)
            cited = _cite(text, s.label)
            if s.item:
                out.append(f"\n- {cited}")
            else:
                out.append(("\n" if out and out[-1].startswith("\n- ") else " ") + cited)
        out[0] = out[0].lstrip()
        out[-1] = out[-1].rstrip()
        return [part for part in out if part]


_TRAILING_ELLIPSIS = re.compile(r"\s*(?:\.\s*){3}$|\s*…$")


def _cite(sentence: str, label: str) -> str:
    """The sentence with its citation before its final stop (one is added where it has none,
    so that the next sentence is a sentence of its own; an introduction keeps its colon)."""
    sentence = without_footnote_mark(sentence.rstrip())
    if sentence[-1:] in ".!?":
        return f"{sentence[:-1]} [{label}]{sentence[-1]}"
    if sentence[-1:] == ":":
        return f"{sentence[:-1]} [{label}]:"
    return f"{sentence} [{label}]."
