"""A ``vllm:<model>`` teacher for ``Distill``: a vLLM server tether starts, scoring the student's tokens through
vLLM's ``prompt_logprobs``.

vLLM's OpenAI completions endpoint takes a prompt as token ids and, with ``prompt_logprobs=k``, returns for every
prompt position after the first a map from token id to ``{"logprob", "rank", "decoded_token"}`` that always holds
the prompt's own token (plus the ``k`` likeliest): so ``POST /v1/completions`` with ``{"prompt": [[ids...],
...], "max_tokens": 1, "prompt_logprobs": 1}`` gives the teacher's logprob of each of the student's tokens, one
choice per row, in order (``choice["index"]``). The tokenizer check asks the server's ``POST /tokenize`` for the
chat template's ids of the probe conversation (vLLM's tokenizer endpoint takes ``messages``), so the
vocabularies themselves are not compared here: a template that renders to the same ids is taken as the same
tokenizer.

Built to vLLM's documented API; no test runs a real vLLM server here (tests/vllm's stand-in serves chat only).
"""

from __future__ import annotations

import asyncio
import json
import urllib.request
from typing import TYPE_CHECKING, Any

from tether.algorithms.distill.teacher import tokenizer_mismatch
from tether.models.base import BackendError, ModelBackend

if TYPE_CHECKING:
    import torch

#: seconds one scoring request may take
TIMEOUT_S = 300.0


class VLLMTeacher:
    """``vllm:<model>`` as a teacher: ``await start()`` runs the server, ``score`` asks it for prompt logprobs."""

    def __init__(self, model: str) -> None:
        from tether.models.vllm import VLLMBackend

        self.name = f"vllm:{model}"
        self.server = VLLMBackend(model)
        self._root: str | None = None
        self._model: str | None = None

    async def start(self) -> None:
        """Start the server and learn the name it serves the model under."""
        if self._root is not None:
            return
        await self.server.start()
        self._root = self.server.base_url.removesuffix("/v1")
        models = await asyncio.to_thread(_get, f"{self._root}/v1/models")
        self._model = str(models["data"][0]["id"])

    def score(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        import torch

        root = self._started()
        out = torch.zeros(mask.shape, dtype=torch.float32)
        used = (mask > 0).cpu()
        rows, prompts = [], []
        for i in range(ids.shape[0]):
            trained = torch.nonzero(used[i])
            if len(trained):  # the row up to its last trained token (the padding after it is never scored)
                rows.append(i)
                prompts.append([int(x) for x in ids[i, : int(trained[-1, 0]) + 2]])
        if not prompts:
            return out.to(mask.device)
        body = {"model": self._model, "prompt": prompts, "max_tokens": 1, "temperature": 0.0, "prompt_logprobs": 1}
        answer = _post(f"{root}/v1/completions", body)
        for choice in answer.get("choices", []):
            row = rows[int(choice["index"])]
            logprobs = choice.get("prompt_logprobs")
            if not isinstance(logprobs, list) or len(logprobs) != len(prompts[int(choice["index"])]):
                raise BackendError(
                    f"the vLLM teacher {self.name} returned no prompt_logprobs for row {row} (a vLLM too old for "
                    "prompt_logprobs on /v1/completions?)"
                )
            tokens = prompts[int(choice["index"])]
            for p in range(len(tokens) - 1):  # position p predicts token p + 1
                if used[row, p]:
                    out[row, p] = float(logprobs[p + 1][str(tokens[p + 1])]["logprob"])
        return out.to(mask.device)

    def mismatch(self, student: ModelBackend) -> str | None:
        root = self._started()

        def render(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> list[int]:
            body = {"model": self._model, "messages": messages, "tools": tools, "add_generation_prompt": True}
            return [int(x) for x in _post(f"{root}/tokenize", body)["tokens"]]

        return tokenizer_mismatch(student, self.name, vocab=None, render=render)

    async def aclose(self) -> None:
        await self.server.close()
        self._root = None

    def close(self) -> None:
        """Nothing held in this process: the server stops in ``aclose``."""

    def _started(self) -> str:
        if self._root is None:
            raise RuntimeError(f"the vLLM teacher {self.name} is not started: await start() first")
        return self._root


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=TIMEOUT_S) as response:
        return json.loads(response.read())


def _post(url: str, body: dict[str, Any]) -> Any:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            return json.loads(response.read())
    except OSError as exc:
        raise BackendError(f"the vLLM teacher at {url} did not answer: {exc}") from exc
