"""PrExMe's templates, score extraction, demonstrations and program (scripted LM only).

The template texts are checked against the paper's own text (Tables 3-7 in
../shared/seeds/002_*.txt) and the factor names against the published surface
(../shared/data/prexme_surface/dev.csv). Real-model runs are in test_grid.py (slow).
"""

from __future__ import annotations

import csv
import re
from pathlib import Path
from typing import Any

import dspy
import numpy as np
import pytest

from judgeopt.data import Record, load_records
from judgeopt.evaluate import evaluate
from judgeopt.judge import (
    DemoRetriever,
    NoLMError,
    PrExMeProgram,
    extract_score,
    load_prexme_task,
    mt_task,
    prexme_space,
    render_prexme,
)
from judgeopt.judge._prexme import (
    FORMAT_REQUIREMENTS,
    ONE_SHOT_BASE_PROMPTS,
    TASK_DESCRIPTIONS,
    ZERO_SHOT_BASE_PROMPTS,
    demo_score,
    resolve_value,
)
from judgeopt.metrics import correlation
from judgeopt.testing import ScriptedLM

SEEDS = Path(__file__).resolve().parents[1].parent / "shared" / "seeds"


def S(base: str, td: str, fr: str) -> dict[str, str]:
    return {"base_prompt": base, "task_description": td, "format_requirement": fr}


# ---------------------------------------------------------------------- factors and names


def test_factor_counts_and_space_sizes() -> None:
    assert list(ZERO_SHOT_BASE_PROMPTS) == ["PZS", "ZS-CoT", "ZS-CoT-EM"]
    assert list(ONE_SHOT_BASE_PROMPTS) == ["POS", "OS-CoT", "OS-CoT-EM"]
    assert len(TASK_DESCRIPTIONS) == 24
    assert len(FORMAT_REQUIREMENTS) == 10
    assert prexme_space(one_shot=False).size == 720
    assert prexme_space().size == 1440
    assert prexme_space().names == ("base_prompt", "task_description", "format_requirement")


def test_factor_names_are_the_published_surface_names(shared_data: Path) -> None:
    with (shared_data / "prexme_surface" / "dev.csv").open(encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    space = prexme_space(one_shot=False)
    for factor in space.names:
        assert {r[factor] for r in rows} == set(space[factor].values), factor


def test_templates_appear_in_the_paper_tables() -> None:
    """Tables 3-6, after undoing the PDF conversion's known garbling."""
    files = sorted(SEEDS.glob("002_*.txt"))
    if not files:
        pytest.skip("the PrExMe paper text is not beside the project")
    paper = files[0].read_text(encoding="utf-8")

    def norm(text: str) -> str:
        text = " ".join(text.replace("\\n", " ").split())
        return re.sub(r"(\w)- (\w)", r"\1\2", text)  # hyphenation at line ends

    # The conversion printed one "\n" as "In" and the end of Table 3's ZS-CoT as commas.
    text = norm(paper).replace("fire me. In Please", "fire me. Please")
    text = re.sub(r"'Judgment: ,+", "'Judgment: '.\"", text)
    for name, template in {**TASK_DESCRIPTIONS, **ZERO_SHOT_BASE_PROMPTS}.items():
        assert norm(template) in text, name
    for name, fmt in FORMAT_REQUIREMENTS.items():
        assert norm(fmt.text) in text, name


def test_value_names_accept_the_papers_spellings() -> None:
    space = prexme_space()
    assert resolve_value(space["format_requirement"], "simple labels") == "easy token labels"
    assert resolve_value(space["format_requirement"], "complex l.") == "complex token labels"
    assert resolve_value(space["base_prompt"], "zs-cot") == "ZS-CoT"
    assert resolve_value(space["base_prompt"], "OS") == "POS"
    assert resolve_value(space["task_description"], "Urgent sit.") == "Urgent situation"
    with pytest.raises(ValueError, match="Allowed values"):
        resolve_value(space["task_description"], "Angry")


def test_tasks_and_inserts() -> None:
    assert load_prexme_task("zh-en").insert == "translation from Chinese to English"
    assert load_prexme_task("en_de").insert == "translation from English to German"
    summ = load_prexme_task("summarization")
    assert (summ.insert, summ.result_type, summ.input_names) == (
        "summary of a given source text",
        "Summary",
        ("source", "summary"),
    )
    assert mt_task("Hebrew", "English").name == "he_en"
    with pytest.raises(ValueError, match="Known tasks"):
        load_prexme_task("fr_en")


# ------------------------------------------------------------------------------ rendering


def test_pzs_neutral_binary_for_en_de() -> None:
    got = render_prexme(
        "en_de", S("PZS", "Neutral", "0 or 1"), "I have a dog", "Ich habe einen Hund"
    )
    assert got == (
        "Judge the quality of the following translation from English to German. \n"
        "Source Text: I have a dog \n"
        "Translation: Ich habe einen Hund \n"
        "Return a discrete score of 0 if the translation has flaws and 1 if it is perfect. \n"
        "Score: "
    )


def test_zs_cot_skeptical_labels_for_summarization() -> None:
    got = render_prexme(
        "summarization",
        S("ZS-CoT", "Skeptical", "easy token labels"),
        "ARTICLE {with braces}",
        "SUMMARY",
    )
    assert got == (
        "I'm not sure about this one. Could you help me out by judging the quality of the "
        "following summary of a given source text and giving me your perspective? \n"
        "Source Text: ARTICLE {with braces} \n"
        "Summary: SUMMARY \n"
        'Choose, whether the summary is either "bad", "neutral" or "good". \n'
        "First, think step by step and explain your thought process, then return your "
        "judgment in the format 'Judgment: '."
    )


def test_zs_cot_em_urgent_situation_for_zh_en() -> None:
    got = render_prexme("zh_en", S("ZS-CoT-EM", "Urgent situation", "-100 to 100"), "你好", "Hello")
    assert got == (
        "Please help me! My boss needs me to find an answer quickly. Otherwise, he might fire "
        "me. \n Please judge the quality of the following translation from Chinese to English "
        "immediately! \n"
        "Source Text: 你好 \n"
        "Translation: Hello \n"
        "Return a score on a scale from -100 to 100 where -100 indicates that the translation "
        "is very bad and 100 is assigned to a perfect translation. \n"
        "First describe your emotions, then think step by step and explain your thought "
        "process, finally return your judgment in the format 'Judgment: '."
    )


def test_emphasis_and_relaxed_are_as_published() -> None:
    got = render_prexme("en_de", S("PZS", "Emphasis", "0 to 5"), "a", "b")
    assert got.startswith("Empathetic \nSource Text: a \n")
    assert (
        "where 0 indicates that the translation is very bad and 5 is assigned to a "
        "perfect translation." in got
    )
    got = render_prexme("en_de", S("PZS", "Relaxed", "0 to 5"), "a", "b")
    assert got.startswith(
        "This is not important at all, but if you have some time, can you "
        "please translation from English to German. \n"
    )


DEMO = Record(
    id="d1",
    group_id="seg9",
    system_id=None,
    inputs={"source": "Guten Tag", "translation": "Good day"},
    scores={"mqm": -5.0},
)


def test_one_shot_templates_table_7() -> None:
    got = render_prexme("en_de", S("POS", "Polite", "0 to 100"), "src", "hyp", DEMO)
    assert got == (
        "Please judge the quality of the following translation from English to German. \n"
        "Here is an example:\n"
        "Source Text: Guten Tag \n"
        "Translation: Good day\n"
        "Score: 80\n\n"
        "Now it is your turn to grade the Translation. \n"
        "Source Text: src \n"
        "Translation: hyp \n"
        "Return a score on a scale from 0 to 100 where 0 indicates that the translation is "
        "very bad and 100 is assigned to a perfect translation. \n"
        "Score: "
    )
    got = render_prexme("en_de", S("OS-CoT", "Command", "complex token labels"), "src", "hyp", DEMO)
    assert got == (
        "Judge the quality of the following translation from English to German immediately! \n"
        "Here is an example:\n"
        "Source Text: Guten Tag \n"
        "Translation: Good day\n"
        "Judgement: <Description of reasons>. Therefore the score is marvelous\n\n"
        "Now it is your turn to grade the Translation.\n"
        "Source Text: src \n"
        "Translation: hyp \n"
        'Choose, whether the translation is either "catastrophic", "indifferent" or '
        '"marvelous". \n'
        "First, think step by step and explain your thought process, then return your "
        "judgment in the format 'Judgment: '."
    )
    got = render_prexme("en_de", S("OS-CoT-EM", "Threat", "-1 or 0 or 1"), "src", "hyp", DEMO)
    assert (
        "Judgement: <Description of emotions and reasons>. Therefore the score is 1\n\n"
        "Now it is your turn to grade the Translation.\n"
    ) in got
    assert got.endswith(
        "First describe your emotions, then think step by step and explain "
        "your thought process, finally return your judgment in the format "
        "'Judgment: '."
    )
    with pytest.raises(ValueError, match="needs a demonstration"):
        render_prexme("en_de", S("POS", "Polite", "0 to 100"), "src", "hyp")


def test_every_template_renders_without_leftover_placeholders() -> None:
    task = load_prexme_task("summarization")
    demo = Record(
        id="x",
        group_id=None,
        system_id=None,
        inputs={"source": "S0", "summary": "H0"},
        scores={"avg_aspect": 3.0},
    )
    for s in prexme_space().strategies():
        text = render_prexme(task, s, "S1", "H1", demo)
        assert "{" not in text and "}" not in text, s


@pytest.mark.parametrize(
    ("human", "fr", "expected"),
    [
        (0.0, "0 or 1", "1"),
        (-20.0, "0 or 1", "0"),
        (-12.5, "-1 or 0 or 1", "0"),
        (-5.0, "0 to 5", "4"),
        (-1.0, "0 to 5", "4.8"),
        (-5.0, "-5 to 5", "3"),
        (-1.0, "0 to 100", "96"),
        (-40.0, "-100 to 100", "-100"),
        (-5.0, "0.0 to 1.0", "0.8"),
        (0.0, "0.0 to 1.0", "1.0"),
        (-12.5, "-1.0 to 1.0", "0.0"),
        (-25.0, "easy token labels", "bad"),
        (-12.5, "easy token labels", "neutral"),
        (0.0, "complex token labels", "marvelous"),
    ],
)
def test_demo_scores_in_the_formats_terms(human: float, fr: str, expected: str) -> None:
    assert demo_score(human, load_prexme_task("zh_en"), fr) == expected


def test_demo_scores_for_summarization_use_its_1_to_5_range() -> None:
    task = load_prexme_task("summarization")
    assert demo_score(1.0, task, "0 to 100") == "0"
    assert demo_score(4.0, task, "0.0 to 1.0") == "0.75"
    assert demo_score(3.0, task, "easy token labels") == "neutral"


# ----------------------------------------------------------------------------- extraction


@pytest.mark.parametrize(
    ("text", "fr", "score"),
    [
        ("Score: 85", "0 to 100", 85.0),
        ("Step 1: read. Step 2: compare. Judgment: 0.7", "0.0 to 1.0", 0.7),
        ("I'd give -3, no wait, -4", "-5 to 5", -4.0),
        ("Judgment: -0.5 on the -1.0 to 1.0 scale", "-1.0 to 1.0", 1.0),  # the last number wins
        ("+1", "-1 or 0 or 1", 1.0),
        ("It is GOOD, not bad... overall Neutral.", "easy token labels", 3.0),
        ("Not bad", "easy token labels", 1.0),
        ("goodness", "easy token labels", 5.0),  # substrings count, as in PrExMe
        ("Marvelous! Well, rather indifferent.", "complex token labels", 3.0),
        ("catastrophic", "complex token labels", 1.0),
    ],
)
def test_extract_score_last_match(text: str, fr: str, score: float) -> None:
    assert extract_score(text, fr).score == score


@pytest.mark.parametrize(
    ("text", "fr"),
    [
        ("", "0 to 100"),
        (None, "0 to 100"),
        ("No idea.", "0 to 5"),
        ("It is fine.", "easy token labels"),
        ("bad", "complex token labels"),
        ("between 1..5", "0 to 5"),
    ],
)
def test_extract_score_failures(text: str | None, fr: str) -> None:
    r = extract_score(text, fr)
    assert r.score is None and r.error


def test_labels_are_not_numbers_and_numbers_not_labels() -> None:
    assert extract_score("good 5", "easy token labels").score == 5.0
    assert extract_score("good", "0 to 5").score is None


# ------------------------------------------------------------------------------ retrieval


def _rec(i: int, src: str, hyp: str, mqm: float = -1.0) -> Record:
    return Record(
        id=f"r{i}",
        group_id=f"g{i}",
        system_id=None,
        inputs={"source": src, "translation": hyp},
        scores={"mqm": mqm},
    )


def test_retriever_finds_the_most_similar_and_never_the_same_source() -> None:
    pool = [
        _rec(0, "The cat sat on the mat.", "Die Katze sass auf der Matte."),
        _rec(1, "The stock market fell sharply today.", "Der Aktienmarkt fiel heute."),
        _rec(2, "A cat sat on a mat!", "Eine Katze sass auf einer Matte!"),
        _rec(3, "Weather: rain tomorrow.", "Wetter: morgen Regen."),
    ]
    r = DemoRetriever(pool, "en_de")
    assert r.nearest("The cat sat on the mat.", "Die Katze sass auf der Matte.").id == "r2"
    assert r.nearest("Stock markets fell today", "Aktienmarkt fiel").id == "r1"
    # Whitespace differences do not make a different source.
    assert r.nearest("The  cat sat on the mat. ", "x").id != "r0"
    only = DemoRetriever([pool[0]], "en_de")
    assert only.nearest("The cat sat on the mat.", "y") is None


def test_retriever_works_on_chinese_and_rejects_unlabelled_pools() -> None:
    pool = [
        _rec(0, "丁子霖：致友人。", "Ding Zilin: To friends."),
        _rec(1, "地中海沿岸具有油橄榄生长所需的土壤", "The Mediterranean coast has soil"),
        _rec(2, "是的，已经换了一个骑手", "Yes, the rider was changed."),
    ]
    r = DemoRetriever(pool, "zh_en")
    assert r.nearest("已经换了骑手", "The rider has been changed.").id == "r2"
    with pytest.raises(ValueError, match="No example"):
        DemoRetriever([Record("a", None, None, {"source": "s", "summary": "t"})], "zh_en")


# -------------------------------------------------------------------------------- program


@pytest.fixture(scope="module")
def zh_en(shared_data: Path) -> list[Record]:
    return load_records(shared_data / "eval4nlp2023" / "dev_zh_en.jsonl", limit=12)


def user_text(messages: list[dict[str, Any]]) -> str:
    return str(messages[-1]["content"])


def test_program_sends_one_user_message_and_parses(zh_en: list[Record]) -> None:
    fake = ScriptedLM(lambda m: "Judgment: 40. Actually 75")
    p = PrExMeProgram("zh_en", S("PZS", "Curious", "0 to 100"), lm=fake.lm)
    pred = p(**zh_en[0].inputs)
    assert isinstance(pred, dspy.Prediction)
    assert pred.score == 75.0 and pred.parse_error is None and pred.demo_id is None
    req = fake.requests[0]
    assert [m["role"] for m in req["messages"]] == ["user"]
    assert req["messages"][0]["content"] == p.render(zh_en[0].inputs)
    assert req["max_tokens"] == 180
    assert "I'm really curious about your opinion." in req["messages"][0]["content"]


def test_program_defaults_errors_and_with_strategy(zh_en: list[Record]) -> None:
    p = PrExMeProgram("zh_en")
    assert dict(p.strategy) == S("PZS", "Neutral", "0 to 100")
    with pytest.raises(NoLMError):
        p.judge(zh_en[0].inputs)
    with pytest.raises(ValueError, match="Missing input"):
        p.render({"source": "x"})
    with pytest.raises(ValueError, match="needs labelled examples"):
        PrExMeProgram("zh_en", S("POS", "Neutral", "0 to 100"))
    with pytest.raises(ValueError, match="needs labelled examples"):
        p.with_strategy(S("OS-CoT", "Neutral", "0 to 100"))
    with pytest.raises(ValueError, match="Allowed values"):
        p.with_strategy(S("PZS", "Neutral", "1 to 10"))
    q = p.with_strategy(S("ZS-CoT", "Threat", "easy token labels"))
    assert (
        q.strategy["task_description"] == "Threat" and p.strategy["task_description"] == "Neutral"
    )


def test_one_shot_program_shows_the_retrieved_demo(zh_en: list[Record], shared_data: Path) -> None:
    pool = load_records(shared_data / "eval4nlp2023" / "dev_zh_en.jsonl", limit=400)
    fake = ScriptedLM(lambda m: "Judgment: marvelous")
    p = PrExMeProgram(
        "zh_en", S("OS-CoT", "Neutral", "complex token labels"), examples=pool, lm=fake.lm
    )
    pred = p.judge(zh_en[1].inputs, sample_id=zh_en[1].id)
    assert pred.score == 5.0 and pred.rationale == "Judgment: marvelous"
    demo = next(r for r in pool if r.id == pred.demo_id)
    assert demo.inputs["source"] != zh_en[1].inputs["source"]
    sent = user_text(fake.requests[0]["messages"])
    assert f"Source Text: {demo.inputs['source']} \n" in sent
    label = demo_score(demo.scores["mqm"], p.task, "complex token labels")
    assert (
        f"Translation: {demo.inputs['translation']}\nJudgement: <Description of reasons>. "
        f"Therefore the score is {label}\n\n"
    ) in sent


def test_evaluate_runs_prexme_with_the_template_average_fallback(zh_en: list[Record]) -> None:
    # Scores tied to the translation's length; every third item gets no number.
    def respond(messages: list[dict[str, Any]]) -> str:
        text = user_text(messages)
        hyp = text.split("\nTranslation: ")[-1].split(" \n")[0]
        if len(hyp) % 3 == 0:
            return "I cannot say."
        return f"Score: {len(hyp) % 50}"

    fake = ScriptedLM(respond)
    p = PrExMeProgram("zh_en", S("PZS", "Neutral", "0 to 100"), lm=fake.lm)
    res = evaluate(p, zh_en, progress=False)
    unparsed = [r for r in zh_en if len(r.inputs["translation"]) % 3 == 0]
    assert res.n == len(zh_en) and res.parse_failures == len(unparsed) > 0
    assert res.call_failures == 0
    parsed = [len(r.inputs["translation"]) % 50 for r in zh_en if len(r.inputs["translation"]) % 3]
    fill = float(np.mean(parsed))
    pred = [
        fill if len(r.inputs["translation"]) % 3 == 0 else len(r.inputs["translation"]) % 50
        for r in zh_en
    ]
    human = [r.scores["mqm"] for r in zh_en]
    assert res.kendall == pytest.approx(correlation(human, pred, method="kendall"))
    assert res.spearman == pytest.approx(correlation(human, pred, method="spearman"))
    assert res.level == "dataset"


def test_teleprompters_compile_a_prexme_program(shared_data: Path) -> None:
    """A PrExMeProgram compiles through the teleprompters' copy protocol (fresh_copy,
    with_strategy, with_report): the result is a PrExMeProgram with the chosen strategy."""
    from judgeopt.teleprompt import GridJudgeSearch

    records = load_records(shared_data / "eval4nlp2023" / "dev_zh_en.jsonl", limit=40)
    human = {r.inputs["translation"]: r.scores["mqm"] for r in records}

    def respond(messages: list[dict[str, Any]]) -> str:
        text = user_text(messages)
        if text == "Reply with OK.":
            return "OK"
        hyp = text.split("\nTranslation: ")[-1].split(" \n")[0]
        # Only the zero-shot polite prompt tracks the human scores; the others rate every
        # translation alike (no correlation).
        if text.startswith("Please judge the quality") and "Here is an example" not in text:
            return f"Score: {100 + 4 * human[hyp]:.1f}"
        return "Score: 50"

    fake = ScriptedLM(respond)
    student = PrExMeProgram("zh_en", lm=fake.lm)
    space = {
        "base_prompt": ["PZS", "POS"],
        "task_description": ["Neutral", "Polite", "Command"],
        "format_requirement": ["0 to 100"],
    }
    best = GridJudgeSearch(budget=6, space=space, selection="best", progress=False).compile(
        student, trainset=records
    )
    assert isinstance(best, PrExMeProgram)
    assert best.strategy.as_dict() == S("PZS", "Polite", "0 to 100")
    assert best.search_result.evaluations == 6
    assert best.report_.search_result is best.search_result
    assert best.validation is not None and best.validation["spearman"] > 0.9
    assert best.model_name == "openai/scripted"
    # The one-shot strategies were judged with demonstrations retrieved from the trainset.
    assert any("Here is an example" in user_text(r["messages"]) for r in fake.judge_requests)
    # The student is left as it was.
    assert student.strategy.as_dict() == S("PZS", "Neutral", "0 to 100")
    assert student.search_result is None and student.retriever is None
    # The compiled judge judges like any PrExMeProgram.
    pred = best.judge(records[0].inputs)
    assert pred.score == pytest.approx(100 + 4 * records[0].scores["mqm"], abs=0.05)
