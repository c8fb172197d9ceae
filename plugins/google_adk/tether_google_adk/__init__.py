"""tether's ``google_adk`` plugin: trains Google ADK agents unchanged — an ``LlmAgent`` (``Agent``) with its
``sub_agents`` and ``AgentTool``s (``pip install "tether[google-adk]"``), through LiteLLM.

ADK's Gemini models call Google's API through google-genai, which cannot reach an OpenAI-compatible endpoint, so
the agents' models must be ``LiteLlm(model="openai/<model>")`` (LiteLLM's OpenAI route, an ``openai.AsyncOpenAI``
client that tether's endpoint redirect reaches). ``GoogleADKAdapter`` refuses an agent tree with a Gemini model
(a model string) and names that fix. Importing this module does not import ADK or LiteLLM; it sets
``LITELLM_LOCAL_MODEL_COST_MAP=True`` (unless already set) so that importing LiteLLM later does not download its
cost map.
"""

from __future__ import annotations

import os

from tether.plugin.hookimpls import adapters_hook

# LiteLLM fetches its model cost map from GitHub at import unless this is set; tether must not cause network
# access (it only helps when this plugin loads before LiteLLM is imported: set it yourself to be sure)
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from tether_google_adk.adapter import GoogleADKAdapter, GoogleADKOutput, NotLiteLlm

EXTRA = "google-adk"
#: top-level modules (``google`` is a namespace package: the extra's distributions are checked by version)
REQUIRES = ("google", "litellm", "openai")

__all__ = ["EXTRA", "REQUIRES", "GoogleADKAdapter", "GoogleADKOutput", "NotLiteLlm", "register_adapters"]

register_adapters = adapters_hook(GoogleADKAdapter)
