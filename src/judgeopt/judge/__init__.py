"""The LLM judge: declarative tasks, the HPSS factor space, prompt rendering, in-context
examples, output parsing, artifacts, the DSPy program and its JSON export."""

from __future__ import annotations

from judgeopt._renamed import renamed_names as _renamed_names
from judgeopt.scoring import PreferenceParse, RatingParse, parse_preference, parse_rating

from ._adapter import ARTIFACTS_KEY, SCORE_STOP, JudgeAdapter, NoLMError, close_score
from ._artifacts import ArtifactError, ArtifactMaker, Artifacts, ArtifactStore, sample_id_of
from ._catalog import available_tasks, load_task
from ._compiled import CompileReport, JudgeStudent
from ._decoding import (
    DECODING_PARAMS,
    Decoding,
    LogprobsUnavailableError,
    check_decodings,
    decoding_for,
    logprob_support,
    logprobs_known,
)
from ._defences import (
    DEFENCES,
    JUDGED_TAG,
    REFUSED,
    SCREENED_DEFENCES,
    VETTED_DEFENCES,
    defended_text,
    echoed_rating,
    forged_rating,
    guarded_text,
    is_refusal,
    screen_messages,
    screen_probability,
)
from ._ensemble import JudgeEnsemble, load_judge, load_judges, write_judge_index
from ._examples import ExamplePool, rescale, select_examples
from ._export import ExportedJudge, export_judge, read_judge_file, save_judge
from ._factors import (
    ANY_ASPECT,
    artifact_key,
    baseline_strategy,
    hpss_graph,
    hpss_space,
    hpss_strategy,
    shared_across_aspects,
)
from ._load import load_program
from ._metric import JudgeMetric, UnparsedJudgement
from ._predict import JudgePredict
from ._prexme import (
    ONE_SHOT_BASE_PROMPTS,
    PREXME_TASKS,
    ZERO_SHOT_BASE_PROMPTS,
    DemoRetriever,
    PrExMeProgram,
    PrExMeTask,
    extract_score,
    load_prexme_task,
    mt_task,
    prexme_space,
    render_prexme,
)
from ._prexme import resolve_value as resolve_prexme_value
from ._program import EXPLAINS_FIRST, JudgeProgram, rates_first
from ._records import to_records
from ._refusals import (
    SCREEN_FALSE_FLAGS,
    ScreenCalibration,
    calibrate_screen,
    conformal_threshold,
    forged_of,
)
from ._render import (
    criteria_for,
    fill_template,
    generation_prompt,
    render_messages,
    render_prompt,
    render_template,
)
from ._task import JudgeTask
from ._template import placeholders as template_placeholders
from ._vocabulary import RESERVED as RESERVED_FIELDS

__all__ = [
    "DEFENCES",
    "JUDGED_TAG",
    "defended_text",
    "guarded_text",
    "echoed_rating",
    "forged_rating",
    "forged_of",
    "REFUSED",
    "is_refusal",
    "screen_messages",
    "screen_probability",
    "SCREENED_DEFENCES",
    "VETTED_DEFENCES",
    "SCREEN_FALSE_FLAGS",
    "ScreenCalibration",
    "calibrate_screen",
    "conformal_threshold",
    "ANY_ASPECT",
    "ARTIFACTS_KEY",
    "RESERVED_FIELDS",
    "ONE_SHOT_BASE_PROMPTS",
    "ZERO_SHOT_BASE_PROMPTS",
    "resolve_prexme_value",
    "read_judge_file",
    "CompileReport",
    "JudgeStudent",
    "DECODING_PARAMS",
    "ArtifactError",
    "ArtifactMaker",
    "ArtifactStore",
    "Artifacts",
    "Decoding",
    "DemoRetriever",
    "ExamplePool",
    "ExportedJudge",
    "JudgeAdapter",
    "JudgeEnsemble",
    "JudgeMetric",
    "JudgePredict",
    "JudgeProgram",
    "EXPLAINS_FIRST",
    "rates_first",
    "JudgeTask",
    "LogprobsUnavailableError",
    "NoLMError",
    "SCORE_STOP",
    "close_score",
    "PREXME_TASKS",
    "PrExMeProgram",
    "PrExMeTask",
    "PreferenceParse",
    "RatingParse",
    "UnparsedJudgement",
    "artifact_key",
    "available_tasks",
    "baseline_strategy",
    "check_decodings",
    "criteria_for",
    "decoding_for",
    "export_judge",
    "extract_score",
    "fill_template",
    "generation_prompt",
    "hpss_graph",
    "hpss_space",
    "hpss_strategy",
    "load_judge",
    "load_judges",
    "load_program",
    "load_prexme_task",
    "load_task",
    "logprob_support",
    "logprobs_known",
    "mt_task",
    "parse_preference",
    "parse_rating",
    "prexme_space",
    "render_messages",
    "render_prexme",
    "render_prompt",
    "render_template",
    "rescale",
    "sample_id_of",
    "save_judge",
    "select_examples",
    "shared_across_aspects",
    "template_placeholders",
    "to_records",
    "write_judge_index",
]

__getattr__ = _renamed_names(__name__, {"load_any_judge": "load_judge"}, globals())
