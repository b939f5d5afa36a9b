"""``benchmarks/loop_stop.py``: where each loop detector would stop a stored answer, and what
the stop would cost in ratings. A word-level tokenizer stands in for the model's, so every
number is known."""

from __future__ import annotations

from _scripts import load_script

ls = load_script("loop_stop")


class Words:
    """Tokens are word numbers: ``tokens`` numbers each distinct word, ``text`` joins them."""

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}
        self.words: list[str] = []

    def tokens(self, text: str) -> tuple[int, ...]:
        out = []
        for w in text.split():
            if w not in self.ids:
                self.ids[w] = len(self.words)
                self.words.append(w)
            out.append(self.ids[w])
        return tuple(out)

    def text(self, tokens: object) -> str:
        return " ".join(self.words[t] for t in tokens)  # type: ignore[attr-defined]


def test_the_span_detector_stops_at_the_third_writing_of_a_span() -> None:
    stop = ls.span_detector(2, 3)
    assert stop([1, 2, 3, 1, 2, 4, 1, 2, 5]) == 8  # (1, 2) for the third time ends at 8
    assert stop([1, 2, 3, 1, 2, 4]) is None
    assert ls.span_detector(3, 2)([9, 1, 2, 3, 1, 2, 3]) == 7


def test_the_tandem_detector_needs_the_block_in_a_row() -> None:
    stop = ls.tandem_detector(3, 6)
    loop = [7, 1, 2, 1, 2, 1, 2]  # block (1, 2) three times, but 6 tokens only from t=7
    assert stop(loop) == 7
    assert stop([1, 2, 9, 1, 2, 9]) is None  # (1, 2, 9) twice, not three times
    # a phrase shared by list items, not in a row, is no loop
    assert stop([1, 2, 3, 5, 1, 2, 3, 6, 1, 2, 3, 7]) is None
    assert ls.tandem_detector(3, 9)([4, *[1, 2, 3] * 3, 8]) == 10


def test_measure_counts_stops_saved_tokens_and_ratings_a_stop_changes() -> None:
    looping = "the summary is fine " * 6  # no rating: nothing to lose
    listed = "item one is fine. item two is fine. item three is fine. Rating: [[4]]"
    rated = "short and clear. Rating: [[5]]"
    pairs = {"p": [(looping, (1, 5)), (listed, (1, 5)), (rated, (1, 5))]}
    detectors = {"span": ls.span_detector(2, 3), "tandem": ls.tandem_detector(3, 12)}
    result = ls.measure(pairs, Words(), detectors)
    span = result["detectors"]["span"]["pairs"]["p"]
    # 'is fine.' three times in the list: the span detector stops it and loses its [[4]]
    assert (span["stopped"], span["stopped_rated"], span["ratings_changed"]) == (2, 1, 1)
    tandem = result["detectors"]["tandem"]["pairs"]["p"]
    assert (tandem["stopped"], tandem["stopped_rated"], tandem["ratings_changed"]) == (1, 0, 0)
    # the loop is 24 words; three blocks of four are 12: stopped at 12, 12 saved
    assert tandem["tokens_saved"] == 12 and tandem["tokens"] == 24 + 14 + 5
    assert result["detectors"]["tandem"]["total"]["tokens_saved_share"] == 12 / 43
    assert "tandem" in ls.table(result) and result["cap_tokens_share"]["p"] == 0.0
