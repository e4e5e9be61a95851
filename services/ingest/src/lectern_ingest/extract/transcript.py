"""WebVTT and SRT transcripts: cues grouped into timed units."""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from pathlib import Path

from lectern_ingest.cleaning import clean_inline
from lectern_ingest.extract.model import Block, Extraction, ListExtraction, Unit
from lectern_ingest.extract.text import read_text

_TIMING = re.compile(
    r"(?P<start>(?:\d+:)?\d{1,2}:\d{2}[.,]\d{1,3})\s*-->\s*(?P<end>(?:\d+:)?\d{1,2}:\d{2}[.,]\d{1,3})"
)
_TAG = re.compile(r"<[^>]+>")
_SPEAKER = re.compile(r"<v(?:\.[^ >]+)?\s+([^>]+)>")
UNIT_SECONDS = 60.0


@dataclass(frozen=True, slots=True)
class Cue:
    """One caption: start and end in seconds, and its text."""

    start: float
    end: float
    text: str


def parse_timestamp(value: str) -> float:
    """'01:02:03.500', '02:03,5' -> seconds."""
    parts = value.replace(",", ".").split(":")
    seconds = float(parts[-1])
    minutes = int(parts[-2]) if len(parts) >= 2 else 0
    hours = int(parts[-3]) if len(parts) >= 3 else 0
    return hours * 3600 + minutes * 60 + seconds


def parse_cues(text: str) -> list[Cue]:
    """Cues of a WebVTT or SRT file (NOTE/STYLE/REGION blocks and markup dropped)."""
    cues: list[Cue] = []
    for raw_block in re.split(r"\r?\n\s*\r?\n", text.replace("\ufeff", "")):
        lines = [ln for ln in raw_block.strip().splitlines() if ln.strip()]
        for i, line in enumerate(lines):
            timing = _TIMING.search(line)
            if timing is None:
                continue
            body = []
            for cue_line in lines[i + 1 :]:
                speaker = _SPEAKER.search(cue_line)
                plain = html.unescape(_TAG.sub("", cue_line))
                if speaker:
                    plain = f"{speaker.group(1).strip()}: {plain}"
                body.append(plain)
            content = clean_inline(" ".join(body))
            if content:
                cues.append(
                    Cue(
                        start=parse_timestamp(timing.group("start")),
                        end=parse_timestamp(timing.group("end")),
                        text=content,
                    )
                )
            break
    return cues


def group_cues(cues: list[Cue], *, seconds: float = UNIT_SECONDS) -> list[Unit]:
    """Consecutive cues grouped into units of about ``seconds`` each (repeats dropped)."""
    units: list[Unit] = []
    texts: list[str] = []
    start = end = 0.0
    for cue in cues:
        if texts and cue.text == texts[-1]:
            end = max(end, cue.end)
            continue
        if texts and cue.end - start > seconds:
            units.append(_unit(texts, start, end))
            texts = []
        if not texts:
            start = cue.start
        texts.append(cue.text)
        end = max(end, cue.end)
    if texts:
        units.append(_unit(texts, start, end))
    return units


def _unit(texts: list[str], start: float, end: float) -> Unit:
    return Unit(
        blocks=[Block(kind="paragraph", text=" ".join(texts))], time_start=start, time_end=end
    )


def open_transcript(path: Path, *, mime: str) -> Extraction:
    """WebVTT (text/vtt) or SRT (application/x-subrip)."""
    return ListExtraction(mime=mime, units=group_cues(parse_cues(read_text(path))))
