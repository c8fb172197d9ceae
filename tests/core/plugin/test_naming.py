"""``tether.plugin.naming.global_name``: an unnamed object is named after the module variable holding it."""

from __future__ import annotations

import sys
import types

from tether.plugin.naming import global_name


def test_a_module_variable_names_the_object() -> None:
    module = types.ModuleType("tether_test_naming_module")
    thing, other = object(), object()
    module.__dict__.update(_hidden=thing, cardiology_agent=thing, other=other)
    sys.modules[module.__name__] = module
    try:
        assert global_name(thing) == "cardiology_agent"  # private names are skipped
        assert global_name(thing, {"first_choice": thing}) == "first_choice"  # the caller's globals first
        assert global_name(object()) is None
    finally:
        del sys.modules[module.__name__]
