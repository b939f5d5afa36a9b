"""What a prefix cache leaves a model to compute (``judgeopt.lm.computed_tokens``), the count
a cost plan times the embedded model's calls on."""

from __future__ import annotations

import pytest

from judgeopt.lm import computed_tokens


def test_a_prompt_computes_what_no_earlier_prompt_shares() -> None:
    # The shared prefix [1, 2, 3] is reused; the last token is always computed.
    assert computed_tokens([[1, 2, 3, 4], [1, 2, 3, 5]]) == [4, 1]
    assert computed_tokens([[1, 2, 3], [1, 2, 3]]) == [3, 1]
    assert computed_tokens([[1, 2, 3], [9, 2, 3]]) == [3, 3]
    # The longest prefix of any earlier prompt, not only the previous one.
    assert computed_tokens([[1, 2, 3, 4], [7, 8], [1, 2, 3, 9]]) == [4, 2, 1]
    assert computed_tokens([]) == []


def test_a_block_cache_reuses_whole_blocks_of_the_earlier_prompt() -> None:
    # 4 shared tokens: two whole blocks of 2.
    assert computed_tokens([[1, 2, 3, 4, 5], [1, 2, 3, 4, 9]], block=2) == [5, 1]
    # 3 shared tokens: one whole block.
    assert computed_tokens([[1, 2, 3, 8], [1, 2, 3, 9]], block=2) == [4, 2]
    # The earlier prompt holds whole blocks only: [1, 2, 3] gives one block of 2.
    assert computed_tokens([[1, 2, 3], [1, 2, 3, 4, 5]], block=2) == [3, 3]
    # A prompt of one block computes at least its last block's last token.
    assert computed_tokens([[1, 2], [1, 2]], block=2) == [2, 2]


def test_a_cache_of_the_previous_prompt_forgets_the_ones_before() -> None:
    prompts = [[1, 2, 3], [7, 8, 9], [1, 2, 3]]
    assert computed_tokens(prompts) == [3, 3, 1]
    assert computed_tokens(prompts, window=1) == [3, 3, 3]
    assert computed_tokens(prompts, window=2) == [3, 3, 1]


def test_a_cache_that_keeps_last_logits_computes_nothing_for_a_prompt_it_holds() -> None:
    """The batch engine keeps each slot's last prompt logits: the same prompt again (a
    sampled judge's next answer) computes nothing; a longer or other one is unchanged."""
    prompts = [[1, 2, 3, 4, 5], [1, 2, 3, 4, 5], [1, 2, 3, 4, 5, 6], [7, 8, 9], [1, 2, 3, 4, 5]]
    assert computed_tokens(prompts, block=2, whole=True) == [5, 0, 2, 3, 0]
    assert computed_tokens(prompts, block=2) == [5, 1, 2, 3, 1]
    # Only while a slot holds it.
    assert computed_tokens(prompts, block=2, window=1, whole=True) == [5, 0, 2, 3, 5]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"block": 0}, "`block` must be an integer >= 1; got 0"),
        ({"block": 2.5}, "`block` must be an integer >= 1; got 2.5"),
        ({"window": 0}, "`window` must be None or an integer >= 1; got 0"),
        ({"window": True}, "`window` must be None or an integer >= 1; got True"),
    ],
)
def test_bad_settings_are_named(kwargs, message) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        computed_tokens([[1, 2]], **kwargs)
