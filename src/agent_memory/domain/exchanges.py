"""Which conversation exchanges are worth storing, and when two are the same.

Both rules read an exchange (the user's side and the reply) through one
normalisation, `words`:

1. NFKC, case fold, NFKC again (so full-width, ligature and case variants of a
   word are the same word);
2. split into words: a word is a run of letters, digits and combining marks
   (Unicode categories L, N, M); everything else (punctuation, symbols, emoji,
   whitespace, control characters) only separates words. A run of Han,
   Hiragana or Katakana characters (scripts written without spaces) is one
   word for matching, but weighs one content word per character.

An exchange is *trivial* (`is_trivial`) when either

- the user's side has no word outside `FILLER_WORDS` (a small stop list of
  acknowledgements, thanks, greetings and farewells; so "ok", "Thanks!!",
  "👍" and an empty side are trivial, whatever the reply says), or
- the words of both sides outside `FILLER_WORDS` weigh fewer than
  `min_content_words` together.

Two exchanges are the same (`exchange_key`) when their sides have the same
words in the same order: they differ only in case, width, punctuation,
symbols, emoji or spacing.
"""

from __future__ import annotations

import hashlib
import json
import unicodedata
from collections.abc import Iterable

__all__ = [
    "FILLER_WORDS",
    "content_weight",
    "exchange_key",
    "exchange_record_id",
    "is_trivial",
    "words",
]

#: Acknowledgement, thanks, greeting and farewell words (already normalised).
#: Kept short on purpose: a word here never counts as content, so only words
#: that carry nothing alone belong in it.
FILLER_WORDS: frozenset[str] = frozenset(
    {
        # acknowledgements (not answers: "yes", "no", "sure" do count as content)
        "ok", "okay", "okey", "k", "kk", "alright", "got", "it", "noted", "understood",
        "cool", "nice", "great", "awesome", "lol", "haha", "hmm", "hm", "ah", "oh", "wow",
        # thanks
        "thanks", "thank", "you", "u", "thx", "ty", "tysm", "so", "much", "very", "cheers",
        "merci", "danke", "gracias", "grazie", "obrigado", "obrigada", "谢谢", "ありがとう",
        "감사합니다",
        # greetings and farewells
        "hi", "hello", "hey", "yo", "bye", "goodbye", "see", "later", "good", "morning",
        "evening", "night", "hola", "bonjour", "salut", "ciao", "你好", "こんにちは",
        "안녕하세요",
    }
)  # fmt: skip

#: Han, Hiragana and Katakana: scripts written without spaces between words.
_SPACELESS = (
    (0x3040, 0x30FF),  # Hiragana, Katakana
    (0x31F0, 0x31FF),  # Katakana phonetic extensions
    (0x3400, 0x4DBF),  # CJK extension A
    (0x4E00, 0x9FFF),  # CJK unified ideographs
    (0xF900, 0xFAFF),  # CJK compatibility ideographs
    (0xFF66, 0xFF9F),  # half-width Katakana
    (0x20000, 0x3134F),  # CJK extensions B-G
)


def _spaceless(char: str) -> bool:
    code = ord(char)
    return any(lo <= code <= hi for lo, hi in _SPACELESS)


def _normalise(text: str) -> str:
    return unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", text).casefold())


def words(text: str) -> tuple[str, ...]:
    """The normalised words of `text` (see the module docstring)."""
    out: list[str] = []
    run: list[str] = []
    run_spaceless = False
    for char in _normalise(text):
        category = unicodedata.category(char)[0]
        if category == "M" and run:  # a combining mark stays with its base
            run.append(char)
            continue
        if category not in "LN":
            if run:
                out.append("".join(run))
                run = []
            continue
        spaceless = _spaceless(char)
        if run and spaceless != run_spaceless:
            out.append("".join(run))
            run = []
        run.append(char)
        run_spaceless = spaceless
    if run:
        out.append("".join(run))
    return tuple(out)


def _weight(word: str) -> int:
    if _spaceless(word[0]):
        return sum(unicodedata.category(c)[0] != "M" for c in word)
    return 1


def content_weight(found: Iterable[str]) -> int:
    """How many content words `found` (from `words`) carries: words outside
    `FILLER_WORDS`, a Han/Kana run counting one per character."""
    return sum(_weight(w) for w in found if w not in FILLER_WORDS)


def is_trivial(user_text: str, reply_text: str, min_content_words: int) -> bool:
    """Whether the exchange carries nothing worth remembering (module docstring)."""
    user = words(user_text)
    if all(w in FILLER_WORDS for w in user):
        return True
    return content_weight(user) + content_weight(words(reply_text)) < min_content_words


def exchange_key(user_text: str, reply_text: str) -> str:
    """The normalised exchange: equal for two exchanges that differ only in case,
    width, punctuation, symbols, emoji or spacing."""
    return " ".join(words(user_text)) + "\n" + " ".join(words(reply_text))


def exchange_record_id(owner: str, scope: Iterable[str], key: str) -> str:
    """A deterministic record id for an exchange `key` of `owner` in `scope`
    (route, namespace, kind, ...): 32 hex digits of a SHA-256, so storing the
    same exchange twice is a duplicate id the store itself rejects."""
    payload = json.dumps([owner, *scope, key], ensure_ascii=False)
    return hashlib.sha256(payload.encode("utf-8", "surrogatepass")).hexdigest()[:32]
