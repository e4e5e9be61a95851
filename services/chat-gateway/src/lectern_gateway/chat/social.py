"""Small talk: "thanks!", "ok cool", "hello" are not questions about the material.

Asked of the material, a thank-you found the acknowledgements of a paper ("We thank Julian
Eisenschlos ...") and became a takeaway in the student's memory, and "ok cool" was recorded as
a knowledge gap. A message made only of words of courtesy, greeting, assent or parting (in the
languages the project indexes) gets a short reply of the same kind instead: no retrieval, no
knowledge gap, no memory of it (``answered_by = "social"``), yet stored and announced like
every turn. A message with any other word is a question as before, and so is one ending in a
question mark ("thanks, but why?"). The reply is a step of the turn (``chat.service``).
"""

from __future__ import annotations

from lectern_common.text import words as text_words

#: the words small talk is made of, by what they say (a message of these words only, a few)
_THANKS = frozenset(
    """thanks thank thx ty cheers appreciated appreciate danke dankeschön merci gracias grazie
    obrigado obrigada bedankt vielen dank beaucoup muchas mille""".split()
)
_GREETING = frozenset("hi hello hey hallo hola bonjour salut ciao moin servus".split())
_PARTING = frozenset("bye goodbye cya tschüss tschüs ciao adios adieu".split())
_ASSENT = frozenset(
    """ok okay k kk cool great nice awesome perfect good fine excellent brilliant super
    alright sure yes yeah yep yup got it understood clear makes sense that was this is very
    so much a lot you really helpful useful gut klar alles schön toll genial bien vale
    perfecto parfait bueno lol wow oh ah hmm morning evening afternoon day night see later
    soon for the help all again now i get me explanation answer""".split()
)
_SOCIAL = _THANKS | _GREETING | _PARTING | _ASSENT
#: more words than this is something to say, whatever the words
MOST_WORDS = 8

REPLIES = {
    "thanks": "You're welcome! Ask me your next question when you're ready.",
    "greeting": "Hello! Ask me anything about your course material.",
    "parting": "Goodbye! Come back whenever you have a question.",
    "assent": "Great. Ask me your next question when you're ready.",
}


def social_kind(text: str) -> str | None:
    """``thanks``, ``greeting``, ``parting`` or ``assent`` for a message of small talk only,
    else None (a question, or anything with a word of its own)."""
    stripped = text.strip()
    words = text_words(stripped.casefold(), digits=False)
    if not words or len(words) > MOST_WORDS or stripped.endswith("?"):
        return None
    if any(w not in _SOCIAL for w in words):
        return None
    said = set(words)
    if said & _THANKS:
        return "thanks"
    if said & _PARTING:
        return "parting"
    if said & _GREETING:
        return "greeting"
    return "assent"
