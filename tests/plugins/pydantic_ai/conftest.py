"""The pydantic_ai tests load the fixture example from its folder. Its agents hard-code ``'openai:gpt-5.2'``,
whose provider wants an API key when the agent is built: a placeholder stands in (requests never leave the
machine: tether's redirect sends them to the proxy, which the fake LLM or the embedded model answers)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("OPENAI_API_KEY", "sk-placeholder-for-tests")
sys.path.insert(0, str(Path(__file__).parent))
