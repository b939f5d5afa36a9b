"""The model string that builds an LM again (recorded in exported judges)."""

from __future__ import annotations

from typing import Any

from ._models import LOCAL_MODELS

__all__ = ["loadable_spec", "model_spec"]


def model_spec(lm: Any) -> str | None:
    """The model string that :func:`~judgeopt.lm.make_lm` turns back into ``lm``'s model.

    * a :class:`~judgeopt.lm.LlamaCppLM`: ``"local:NAME"`` for a registry model, else
      ``"local:/absolute/path.gguf"`` (not DSPy's display name ``local/FILE.gguf``, which
      does not load);
    * a :class:`~judgeopt.lm.RouterLM` (or any LM with a ``spec``): its ``spec``
      (``"router:FILE#GROUP"``);
    * any other LM: its LiteLLM ``model`` string (the endpoint and key are never recorded:
      give ``--api-base`` again when loading);
    * ``None`` for ``None``.
    """
    if lm is None:
        return None
    spec = getattr(lm, "spec", None)
    if isinstance(spec, str) and spec:
        return spec
    model = getattr(lm, "model", None)
    return str(model) if model is not None else None


def loadable_spec(recorded: str) -> str:
    """A recorded model string as one :func:`~judgeopt.lm.make_lm` accepts.

    Judges exported before :func:`model_spec` existed recorded a local model by DSPy's
    display name ``local/FILE.gguf``; a registry model's file name maps back to
    ``local:NAME``. Other strings are returned unchanged.

    Raises:
        ValueError: For ``local/FILE`` that names no registry model (the file's path was not
            recorded: pass ``--model local:PATH``).
    """
    if not recorded.startswith("local/"):
        return recorded
    filename = recorded.removeprefix("local/")
    for name, spec in LOCAL_MODELS.items():
        if spec.filename == filename or name == filename:
            return f"local:{name}"
    raise ValueError(
        f"The judge records the model {recorded!r}, a local GGUF file whose path was not "
        "recorded; give it with --model local:PATH.gguf (or model= in Python)."
    )
