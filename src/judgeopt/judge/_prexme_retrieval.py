"""PrExMe's one-shot demonstrations: the most similar labelled example of a pool.

:class:`DemoRetriever` uses TF-IDF over character n-grams of the source and the hypothesis (as
PrExMe concatenates the two sentence embeddings) and never returns an example with the same
source text as the sample.
"""

from __future__ import annotations

import math
import threading
from collections import Counter
from collections.abc import Sequence
from typing import Final

import numpy as np

from judgeopt.data import Record

from ._prexme_templates import PrExMeTask, load_prexme_task

__all__ = ["DemoRetriever"]

_NGRAMS: Final[tuple[int, ...]] = (1, 2, 3)


def _ngrams(text: str) -> Counter[str]:
    # Character n-grams work for Chinese (no spaces) and for English/German alike.
    t = " ".join(text.lower().split())
    return Counter(t[i : i + n] for n in _NGRAMS for i in range(len(t) - n + 1))


class _Tfidf:
    """TF-IDF vectors (sublinear tf, smoothed idf, L2-normalised) over character n-grams."""

    def __init__(self, texts: Sequence[str]) -> None:
        from scipy import sparse  # type: ignore[import-untyped, unused-ignore]

        counts = [_ngrams(t) for t in texts]
        df: Counter[str] = Counter()
        for c in counts:
            df.update(c.keys())
        self.vocab = {g: i for i, g in enumerate(sorted(df))}
        n = len(texts)
        self.idf = np.array([math.log((1 + n) / (1 + df[g])) + 1.0 for g in sorted(df)])
        rows, cols, vals = [], [], []
        for r, c in enumerate(counts):
            for g, k in c.items():
                rows.append(r)
                cols.append(self.vocab[g])
                vals.append(1.0 + math.log(k))
        m = sparse.csr_matrix((vals, (rows, cols)), shape=(n, len(self.vocab)))
        m = m.multiply(self.idf.reshape(1, -1)).tocsr()
        norms = np.sqrt(np.asarray(m.multiply(m).sum(axis=1)).ravel())
        norms[norms == 0] = 1.0
        self.matrix = sparse.diags(1.0 / norms) @ m

    def similarities(self, text: str) -> np.ndarray:
        """Cosine similarity of ``text`` with every fitted text."""
        c = _ngrams(text)
        idx = [
            (self.vocab[g], (1.0 + math.log(k)) * self.idf[self.vocab[g]])
            for g, k in c.items()
            if g in self.vocab
        ]
        if not idx:
            return np.zeros(self.matrix.shape[0])
        q = np.zeros(self.matrix.shape[1])
        for j, v in idx:
            q[j] = v
        q /= np.linalg.norm(q)
        return np.asarray(self.matrix @ q).ravel()


class DemoRetriever:
    """Finds the most similar labelled example for a sample (PrExMe's one-shot RAG).

    Similarity is the mean of the TF-IDF cosine of the sources and of the hypotheses, which is
    the cosine of the concatenated, separately normalised vectors (PrExMe concatenates the
    source and hypothesis sentence embeddings; no embedding model is needed here). Examples
    with the same source text as the sample are never returned, so the sample itself, and
    another system's output for the same segment or article, cannot serve as its own
    demonstration. Ties go to the earlier example. Thread-safe.

    Args:
        examples: Labelled records with the task's input fields and human score.
        task: The task (or its name).

    Raises:
        ValueError: When no example has the task's fields and score.
    """

    def __init__(self, examples: Sequence[Record], task: PrExMeTask | str) -> None:
        self.task = load_prexme_task(task)
        t = self.task
        self.examples = [
            r
            for r in examples
            if all(f in r.inputs for f in t.input_names) and t.score_key in r.scores
        ]
        if not self.examples:
            raise ValueError(
                f"No example has the inputs {list(t.input_names)!r} and the score "
                f"`{t.score_key}` that task `{t.name}` needs."
            )
        self._src = _Tfidf([r.inputs[t.source_field] for r in self.examples])
        self._hyp = _Tfidf([r.inputs[t.hypothesis_field] for r in self.examples])
        self._sources = [" ".join(r.inputs[t.source_field].split()) for r in self.examples]
        self._memo: dict[tuple[str, str], Record | None] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self.examples)

    def nearest(self, source: str, hypothesis: str) -> Record | None:
        """The most similar example with a different source, or ``None`` if there is none."""
        key = (source, hypothesis)
        with self._lock:
            if key in self._memo:
                return self._memo[key]
        sim = 0.5 * (self._src.similarities(source) + self._hyp.similarities(hypothesis))
        norm_source = " ".join(source.split())
        for i, s in enumerate(self._sources):
            if s == norm_source:
                sim[i] = -np.inf
        best = int(np.argmax(sim))
        found = None if not np.isfinite(sim[best]) else self.examples[best]
        with self._lock:
            self._memo[key] = found
        return found
