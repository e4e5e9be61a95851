"""The fixed wording of each confidence band, so an answer's copy always follows its band.

Which band a turn is in is decided in ``chat.decision``; this module only words it.
"""

from __future__ import annotations

from lectern_common.events.chat import ConfidenceBand
from lectern_gateway.chat.decision import ORDER

MEDIUM_PREAMBLE = "Based on the available materials, here is what I can tell you.\n\n"
LOW_PREAMBLE = (
    "Note: the course material on this is limited, so please check this answer with your "
    "teacher.\n\n"
)
#: said after the answer when checking it lowered its band below the one it opened with
MEDIUM_CAVEAT = (
    "\n\nBased on the available materials, parts of this answer could not be fully checked "
    "against the sources."
)
LOW_CAVEAT = (
    "\n\nNote: the course material on this is limited, so please check this answer with your "
    "teacher."
)


def preamble(band: ConfidenceBand) -> str:
    """The fixed opening of an answer in this band ('' for high)."""
    if band == "medium":
        return MEDIUM_PREAMBLE
    if band == "low":
        return LOW_PREAMBLE
    return ""


def caveat(opened: ConfidenceBand, final: ConfidenceBand) -> str:
    """The closing wording when the final band is below the one the answer opened with.

    The opening (``preamble``) is streamed before the answer is checked; when the check lowers
    the band, this says what that band's opening would have said, so the copy follows the
    band the answer ends in ('' when the band held).
    """
    if ORDER.index(final) >= ORDER.index(opened):
        return ""
    if final == "medium":
        return MEDIUM_CAVEAT
    if final == "low":
        return LOW_CAVEAT
    return ""
