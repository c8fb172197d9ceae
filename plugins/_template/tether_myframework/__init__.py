"""tether's ``myframework`` plugin: trains MyFramework agents unchanged (``pip install "tether[myframework]"``).

TODO(framework): say what the adapter runs, how it captures model and tool calls, and how it names sub-agents.
Importing this module does not import MyFramework.
"""

from __future__ import annotations

from tether.plugin.hookimpls import adapters_hook
from tether_myframework.adapter import MyFrameworkAdapter

#: TODO(framework): the extra's name in pyproject.toml ([project.optional-dependencies])
EXTRA = "myframework"
#: TODO(framework): the top-level modules the plugin needs (the framework's, and "openai" if its clients use it)
REQUIRES = ("myframework", "openai")

__all__ = ["EXTRA", "REQUIRES", "MyFrameworkAdapter", "register_adapters"]

#: the hook that registers the adapter; TODO(framework): if something must be switched off around every rollout
#: (the framework's telemetry), add ``rollout_context = rollout_hook(<a function returning an async context>)``
register_adapters = adapters_hook(MyFrameworkAdapter)
