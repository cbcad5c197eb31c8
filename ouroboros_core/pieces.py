"""The decoded output cut into one exact piece of text per committed token."""

from __future__ import annotations


class TextPieces:
    """Splits the decoded output into one piece per committed token.

    A token that ends half-way through a multi-byte character gets "" and the token that completes
    it carries the whole character, so the pieces always concatenate to the decoded output.
    """

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.ids: list[int] = []
        # a few tokens of left context, so word-boundary spaces decode as in the full text
        self.prefix = 0
        self.read = 0
        self.emitted = 0  # characters handed out so far

    def _decode(self, ids) -> str:
        return self.tokenizer.decode(
            ids, skip_special_tokens=True, clean_up_tokenization_spaces=False
        )

    def push(self, token_id: int) -> str:
        self.ids.append(token_id)
        before = self._decode(self.ids[self.prefix : self.read])
        after = self._decode(self.ids[self.prefix :])
        if len(after) <= len(before) or after.endswith("\ufffd"):
            return ""
        self.prefix, self.read = self.read, len(self.ids)
        piece = after[len(before) :]
        self.emitted += len(piece)
        return piece

    def finish(self) -> str:
        """The full decoded text of every token pushed."""
        return self._decode(self.ids)

    def take_rest(self) -> str:
        """The end of the text that no piece carries yet (a character left unfinished), now handed
        out."""
        full = self.finish()
        rest = full[self.emitted :]
        self.emitted = len(full)
        return rest
