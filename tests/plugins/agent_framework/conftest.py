"""The Agent Framework samples read their OpenAI settings from the environment when their module is imported:
point them at an unreachable loopback port (tether redirects every call to its proxy) before they are."""

from __future__ import annotations

import os
import sys
from pathlib import Path

for _name, _value in {
    "OPENAI_API_KEY": "sk-tether-test",
    "OPENAI_BASE_URL": "http://127.0.0.1:9/v1",
    "OPENAI_CHAT_MODEL": "gpt-4o-mini",
    "OPENAI_CHAT_COMPLETION_MODEL": "gpt-4o-mini",
}.items():
    os.environ[_name] = _value

sys.path.insert(0, str(Path(__file__).parent / "fixtures"))
