"""tether's ``openai`` plugin: the adapter for plain functions that call the OpenAI client
(``pip install "tether[openai]"``).

The endpoint redirect that sends every SDK request of a rollout to tether's proxy is part of the core
(``tether.capture.redirect``, held by the runner around each rollout). Importing this module does not import
``openai``.
"""

from __future__ import annotations

from tether.plugin.hookimpls import adapters_hook
from tether_openai.adapter import OpenAIFunctionAdapter

EXTRA = "openai"
REQUIRES = ("openai",)

__all__ = ["EXTRA", "REQUIRES", "OpenAIFunctionAdapter", "register_adapters"]

register_adapters = adapters_hook(OpenAIFunctionAdapter)
