"""The Google ADK tests load ADK's hello_world_ma sample from fixtures/ (as the module ``hello_world_ma``)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # as tox sets it: no cost-map download
# the sample reads its key from the environment (its .env); tether redirects every call, so any value serves
os.environ.setdefault("OPENAI_API_KEY", "sk-placeholder")
sys.path.insert(0, str(Path(__file__).parent / "fixtures"))
