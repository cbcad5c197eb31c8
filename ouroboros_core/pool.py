"""The phrase pool: key token -> up to G phrases, most recent first, with a global bound."""

from __future__ import annotations

from collections import OrderedDict

from .events import Source

Phrase = tuple[int, ...]


class PhrasePool:
    """Phrases that followed a key token somewhere: in the draft's lookahead window, a target
    verdict, the prompt or the text so far. Belongs to one request, or to one visitor's session when
    kept warm."""

    def __init__(self, per_key: int = 8, max_phrases: int = 50_000):
        assert per_key >= 1 and max_phrases >= 1
        self.per_key = per_key
        self.max_phrases = max_phrases
        self._by_key: dict[int, OrderedDict[Phrase, Source]] = {}
        # oldest first, over all keys
        self._age: OrderedDict[tuple[int, Phrase], None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._age)

    def add(self, key: int, phrase: Phrase, source: Source) -> None:
        if not phrase:
            return
        phrases = self._by_key.setdefault(key, OrderedDict())
        if phrase in phrases:
            # A re-inserted phrase moves to the front but keeps the source it was first credited to.
            phrases.move_to_end(phrase)
            self._age.move_to_end((key, phrase))
            return
        phrases[phrase] = source
        self._age[(key, phrase)] = None
        if len(phrases) > self.per_key:
            self._forget(key, next(iter(phrases)))
        if len(self._age) > self.max_phrases:
            self._forget(*next(iter(self._age)))

    def add_ngrams(self, tokens: list[int], n: int, source: Source, start: int = 0) -> None:
        """Pool every phrase of n-1 tokens in `tokens` keyed on the token before it, from index
        `start`."""
        for i in range(start, len(tokens) - n + 1):
            self.add(tokens[i], tuple(tokens[i + 1 : i + n]), source)

    def lookup(self, key: int, k: int) -> list[tuple[Phrase, Source]]:
        """Up to k phrases after `key`, newest first."""
        phrases = self._by_key.get(key)
        if not phrases or k <= 0:
            return []
        out = []
        for phrase in reversed(phrases):
            out.append((phrase, phrases[phrase]))
            if len(out) == k:
                break
        return out

    def _forget(self, key: int, phrase: Phrase) -> None:
        phrases = self._by_key[key]
        del phrases[phrase]
        if not phrases:
            del self._by_key[key]
        del self._age[(key, phrase)]
