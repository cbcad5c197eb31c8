"""TextPieces with a byte tokenizer written here: one piece per token that always adds up to the
decoded text, word-boundary spaces kept, a character split over tokens handed out whole by the token
that completes it, and the unfinished end handed out once by take_rest."""

from __future__ import annotations

from ouroboros_core.decode import TextPieces

EOS = 0
SPLIT_CJK = "中".encode()  # three bytes
SPLIT_EMOJI = "😀".encode()  # four bytes
VOCAB = {
    EOS: b"</s>",
    1: b"Hello",
    2: b" world",
    3: b" again",
    4: b"!",
    5: b" ,",
    6: SPLIT_CJK[:1],
    7: SPLIT_CJK[1:],
    8: SPLIT_EMOJI[:1],
    9: SPLIT_EMOJI[1:3],
    10: SPLIT_EMOJI[3:],
}


class ByteTokenizer:
    """Decodes ids to their bytes as UTF-8, a broken character as U+FFFD. Like a SentencePiece
    tokenizer, it drops the leading space of the first token it decodes; it skips the special EOS
    and tidies " ," into "," only when asked to."""

    def __init__(self):
        self.calls = []

    def decode(self, ids, skip_special_tokens=False, clean_up_tokenization_spaces=True):
        self.calls.append((skip_special_tokens, clean_up_tokenization_spaces))
        ids = [i for i in ids if not (skip_special_tokens and i == EOS)]
        text = b"".join(VOCAB[i] for i in ids).decode("utf-8", errors="replace")
        text = text.removeprefix(" ")
        return text.replace(" ,", ",") if clean_up_tokenization_spaces else text


def pushed(ids) -> tuple[TextPieces, list[str]]:
    pieces = TextPieces(ByteTokenizer())
    return pieces, [pieces.push(i) for i in ids]


def test_the_stub_drops_a_leading_space_as_the_pieces_must_not():
    assert ByteTokenizer().decode([3]) == "again"  # alone, " again" loses its space
    assert ByteTokenizer().decode([1, 3]) == "Hello again"


def test_each_token_gets_its_own_text_with_the_space_before_a_word_kept():
    pieces, out = pushed([1, 2, 3, 2, 4])
    assert out == ["Hello", " world", " again", " world", "!"]
    assert "".join(out) == pieces.finish() == "Hello world again world!"
    assert pieces.emitted == len("Hello world again world!")


def test_a_character_split_over_tokens_goes_whole_to_the_token_that_completes_it():
    pieces, out = pushed([1, 6, 7, 4])
    assert out == ["Hello", "", "中", "!"]
    assert "".join(out) == pieces.finish() == "Hello中!"
    pieces, out = pushed([8, 9, 10, 2])  # an emoji over three tokens, then a word
    assert out == ["", "", "😀", " world"]
    assert "".join(out) == pieces.finish() == "😀 world"
    assert all("\ufffd" not in piece for piece in out)


def test_a_special_token_gets_an_empty_piece_and_tokenization_spaces_stay_as_written():
    pieces, out = pushed([1, EOS, 5, 2])
    assert out == ["Hello", "", " ,", " world"]
    assert "".join(out) == pieces.finish() == "Hello , world"
    # every decode skips special tokens and leaves the spaces alone
    assert set(pieces.tokenizer.calls) == {(True, False)}


def test_finish_decodes_every_token_pushed_whatever_the_pieces_handed_out():
    pieces = TextPieces(ByteTokenizer())
    assert pieces.finish() == ""
    pieces.push(1)
    pieces.push(6)  # half a character: no piece yet
    assert pieces.finish() == "Hello\ufffd"
    assert pieces.emitted == len("Hello")


def test_take_rest_hands_out_the_unfinished_end_once():
    pieces, out = pushed([1, 2, 8, 9])  # ends half-way through the emoji
    assert out == ["Hello", " world", "", ""]
    assert pieces.take_rest() == "\ufffd"  # the broken character, as the decoded text has it
    assert "".join(out) + "\ufffd" == pieces.finish()
    assert pieces.take_rest() == ""  # handed out already
    assert pieces.emitted == len(pieces.finish())


def test_take_rest_is_empty_when_every_character_went_out_in_a_piece():
    pieces, out = pushed([1, 6, 7])
    assert out == ["Hello", "", "中"]
    assert pieces.take_rest() == ""
    assert pieces.emitted == len("Hello中")
