"""``model="hf:<model>"``: any transformers causal LM, served in-process. ``<model>`` is a local checkpoint
directory or a hub id, found as transformers finds it (``tether.models._hub``: the Hugging Face cache, else a
download unless ``HF_HUB_OFFLINE=1``).

Prompts are rendered with the checkpoint's own chat template (``tokenizer.chat_template``, tools passed to
``apply_chat_template``); checkpoints written by the embedded model use its compact template. Replies are
parsed for tool calls in the Hermes/Qwen form ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``
(SmolLM2 writes a JSON list of such calls in one block) or in the embedded form. Sampling, batching and
in-place weight updates are shared with the embedded backend (``tether.models.local._backend``).

The model runs on CUDA in bf16 when a GPU is visible, else on CPU in float32 (``device=``/``dtype=`` override:
``HFBackend(path, device="cuda:1", dtype="float16")`` or ``"hf:<path>?device=cuda:1&dtype=float16"``). On a CPU
``dtype=`` is the sampler's: the weights train in float32 and a bf16 copy samples
(``tether.models.local._sample_dtype``, which also picks it on its own where it pays). A path
holding a LoRA adapter (a checkpoint of a LoRA run) serves its base with that adapter attached.
"""

from __future__ import annotations

import json
import re
from typing import Any, cast

import jinja2
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from tether.models._device import pick_device, pick_dtype
from tether.models._hub import locate
from tether.models._quiet import quiet
from tether.models.base import BadRequest
from tether.models.embedded import template
from tether.models.embedded.model import turn_token_ids
from tether.models.local._backend import LocalBackend

_HERMES = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)


def parse_hermes(text: str) -> dict[str, Any]:
    """Text with ``<tool_call>{json}</tool_call>`` blocks → OpenAI assistant message; malformed → content."""
    if "<tool_call>" not in text:
        return {"role": "assistant", "content": text}
    calls = []
    for body in _HERMES.findall(text):
        try:
            parsed = json.loads(body)
        except ValueError:
            return {"role": "assistant", "content": text}
        # Hermes/Qwen: one object per block; SmolLM2: a list of them in one block
        values = parsed if isinstance(parsed, list) else [parsed]
        if not values or not all(isinstance(v, dict) and isinstance(v.get("name"), str) for v in values):
            return {"role": "assistant", "content": text}
        for value in values:
            call = _hermes_call(value)
            if call is None:
                return {"role": "assistant", "content": text}
            calls.append(call)
    content = _HERMES.sub("", text).strip()
    return {"role": "assistant", "content": content or None, "tool_calls": calls}


def _hermes_call(value: dict[str, Any]) -> dict[str, Any] | None:
    """One ``{"name": ..., "arguments": ...}`` object → an OpenAI tool call; None when its arguments are not
    JSON."""
    args = value.get("arguments", value.get("parameters", {}))
    if isinstance(args, str):
        try:
            json.loads(args)
        except ValueError:
            return None
    else:
        args = json.dumps(args, ensure_ascii=False)
    return {
        "id": template.new_call_id(),
        "type": "function",
        "function": {"name": value["name"], "arguments": args},
    }


def parse_reply(text: str) -> dict[str, Any]:
    """Generated text → OpenAI assistant message, recognising either tool-call format."""
    if template.CALL in text:
        return template.parse(text)
    return parse_hermes(text)


def _for_template(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI messages as chat templates expect them: arguments as objects, no null content."""
    out = []
    for m in messages:
        m = dict(m)
        if m.get("content") is None:
            m["content"] = ""
        if m.get("tool_calls"):
            calls = []
            for call in m["tool_calls"]:
                fn = dict(call.get("function", {}))
                if isinstance(fn.get("arguments"), str):
                    try:
                        fn["arguments"] = json.loads(fn["arguments"])
                    except ValueError:
                        pass
                calls.append({**call, "function": fn})
            m["tool_calls"] = calls
        out.append(m)
    return out


class HFBackend(LocalBackend):
    name = "hf"

    def __init__(
        self,
        path: str,
        *,
        device: str | None = None,
        dtype: str | torch.dtype | None = None,
        threads: int | None = None,
        max_batch_rows: int = 64,
        default_max_tokens: int = 256,
        kv_cache: int | str | None = None,
    ) -> None:
        super().__init__(
            threads=threads,
            max_batch_rows=max_batch_rows,
            default_max_tokens=default_max_tokens,
            kv_cache=kv_cache,
        )
        where = locate(path)
        adapter = None
        if not (where / "config.json").is_file():
            from tether.models.lora import base_of, is_adapter_dir

            if not is_adapter_dir(where):
                raise FileNotFoundError(
                    f"hf:{path} is neither a transformers checkpoint (no config.json) nor a LoRA adapter: pass a "
                    "folder written by save_pretrained, or a hub id"
                )
            adapter, where = where, base_of(where)
        self.path = str(adapter or where)
        self.base_dir = str(where.resolve())
        self.device = pick_device(device)
        # on a CPU the weights train in float32; the sampler may run a bf16 copy (``choose_sample_dtype``)
        self.dtype = pick_dtype(self.device, dtype) if self.device.startswith("cuda") else torch.float32
        has_tokenizer = adapter is not None and (adapter / "tokenizer_config.json").is_file()
        self.tokenizer = AutoTokenizer.from_pretrained(adapter if has_tokenizer else where, local_files_only=True)
        with quiet():
            loaded: Any = AutoModelForCausalLM.from_pretrained(where, dtype=self.dtype, local_files_only=True)
        self.model = loaded.to(self.device)
        self.model.eval()
        vocab = self.tokenizer.get_vocab()
        self.embedded_format = all(m in vocab for m in template.MARKERS)
        if self.tokenizer.pad_token_id is None:  # padding is masked out; any id will do
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self._stops = self._find_stops()
        self.choose_sample_dtype(self.device, dtype)
        if adapter is not None:
            from tether.models.lora import LoRA

            self.attach_lora(LoRA.from_adapter_dir(adapter))
            self.load_weights(str(adapter))

    def _find_stops(self) -> list[int]:
        stops: set[int] = set()
        eos = getattr(self.model.generation_config, "eos_token_id", None)
        for value in (eos, self.model.config.eos_token_id, self.tokenizer.eos_token_id):
            if isinstance(value, int):
                stops.add(value)
            elif isinstance(value, list):
                stops.update(int(v) for v in value)
        if self.embedded_format:
            stops.update(turn_token_ids(self.tokenizer))
        return sorted(stops)

    @property
    def stop_token_ids(self) -> list[int]:
        return self._stops

    def render(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> list[int]:
        if self.embedded_format:
            text = template.render(messages, tools)
        else:
            text = self._template_text(messages, tools, add_generation_prompt=True)
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def _template_text(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, *, add_generation_prompt: bool
    ) -> str:
        if not self.tokenizer.chat_template:
            raise BadRequest(
                f"the checkpoint at {self.path} has no chat template: set tokenizer.chat_template and save again"
            )
        try:
            return str(
                self.tokenizer.apply_chat_template(
                    _for_template(messages),
                    tools=cast(Any, tools or None),
                    add_generation_prompt=add_generation_prompt,
                    tokenize=False,
                )
            )
        except jinja2.TemplateError as exc:
            raise BadRequest(f"the checkpoint's chat template rejected these messages: {exc}") from exc

    def render_reply(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, reply: dict[str, Any]
    ) -> list[int]:
        """The reply's tokens: the embedded format's body and end marker, or what the chat template renders
        after the generation prompt when the reply is appended (trailing whitespace after the end-of-turn
        token dropped: generation stops at that token)."""
        if self.embedded_format:
            return list(self.tokenizer.encode(template.reply_text(reply), add_special_tokens=False))
        prompt = self._template_text(messages, tools, add_generation_prompt=True)
        full = self._template_text([*messages, reply], tools, add_generation_prompt=False)
        if not full.startswith(prompt):
            raise BadRequest(
                f"the chat template of {self.path} does not render a reply after its generation prompt, so the "
                "reply's tokens cannot be found: give calls with recorded token ids"
            )
        return list(self.tokenizer.encode(full[len(prompt) :].rstrip(), add_special_tokens=False))

    def parse(self, text: str) -> dict[str, Any]:
        return parse_reply(text)
