"""Each token's piece of the text: a character split over byte tokens lands on the token that completes it."""

from __future__ import annotations

from mismatchscope.view.text import Decoder, load_decoder
from tests.helpers import REPO

BUNDLED = REPO / "sample_data" / "tiny-qwen3"


def test_pieces_rebuild_the_text_and_place_a_split_character_on_its_last_byte():
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(BUNDLED / "tokenizer.json"))
    text = " then add 7: 4+7=11 \u20ac 12"  # the euro sign is three bytes, three byte tokens here
    ids = tok.encode(text, add_special_tokens=False).ids
    d = load_decoder(BUNDLED, "test")
    pieces = d.pieces(ids)
    assert "".join(pieces) == text == d.decode(ids)
    euro = [i for i, p in enumerate(pieces) if "\u20ac" in p]
    assert len(euro) == 1 and pieces[euro[0] - 2 : euro[0]] == ["", ""]  # its first two bytes show nothing
    assert pieces[:3] == [" then", " add", " 7"]


def test_a_stream_that_ends_inside_a_character_keeps_its_bytes():
    d = Decoder(lambda ids: bytes(ids).decode("utf-8", errors="replace"), 256)
    assert d.pieces(list("a\u20ac".encode())) == ["a", "", "", "\u20ac"]
    assert d.pieces(list("a\u20ac".encode())[:3]) == ["a", "", "\ufffd"]  # cut: the last token shows what it holds
