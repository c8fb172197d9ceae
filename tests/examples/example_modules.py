"""An example's modules in a test, imported as its scripts import them: by plain name from its folder.

The examples share module names (``data``, ``agent``, ``train``), and one pytest session may test several of them,
so the modules are taken out of ``sys.modules`` again afterwards, and any module of the same name that was there
before (another example's) is put back.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@contextlib.contextmanager
def example_modules(example: str, *names: str) -> Iterator[dict[str, ModuleType]]:
    """``names`` imported from ``examples/<example>``; every module loaded from that folder meanwhile (the ones
    they import too) is unloaded on exit."""
    folder = EXAMPLES / example
    own = {path.stem for path in folder.glob("*.py")}
    saved = {name: sys.modules.pop(name) for name in own if name in sys.modules}
    sys.path.insert(0, str(folder))
    try:
        yield {name: importlib.import_module(name) for name in names}
    finally:
        sys.path.remove(str(folder))
        for name in own:
            sys.modules.pop(name, None)
        sys.modules.update(saved)
