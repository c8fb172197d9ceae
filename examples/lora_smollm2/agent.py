"""A one-call arithmetic helper written against the plain ``openai`` client. It knows nothing of tether.

The client is built at import time with a fixed base URL; tether redirects its requests while it trains the
model behind it.
"""

from __future__ import annotations

import openai

client = openai.OpenAI(base_url="http://127.0.0.1:8000/v1", api_key="not-needed", max_retries=0)


def answer(task: dict[str, str], model: str = "smol") -> str:
    """Ask the model the task's question; return its reply."""
    response = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": task["question"]}]
    )
    return response.choices[0].message.content or ""
