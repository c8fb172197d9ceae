"""The openai_agents tests put the example's folder out of the way of other tests' ``agent`` modules: the
example is loaded under its own module name by ``triage_script``."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
