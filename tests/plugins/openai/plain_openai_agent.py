"""A user's agent module, written with no knowledge of tether: its OpenAI clients are built at import time
with a hard-coded base URL (port 9 on loopback, where nothing listens). tether must redirect its calls."""

from __future__ import annotations

import openai

client = openai.OpenAI(base_url="http://127.0.0.1:9/v1", api_key="sk-user", max_retries=0)
aclient = openai.AsyncOpenAI(base_url="http://127.0.0.1:9/v1", api_key="sk-user", max_retries=0)


def answer(question: str) -> str:
    reply = client.chat.completions.create(model="gpt-test", messages=[{"role": "user", "content": question}])
    return reply.choices[0].message.content or ""


async def aanswer(question: str) -> str:
    reply = await aclient.chat.completions.create(
        model="gpt-test", messages=[{"role": "user", "content": question}]
    )
    return reply.choices[0].message.content or ""


def answer_streamed(question: str) -> str:
    stream = client.chat.completions.create(
        model="gpt-test", messages=[{"role": "user", "content": question}], stream=True
    )
    return "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)


def summarize(question: str) -> str:
    # the Responses API, which tether's proxy serves as the chat call it translates to
    return client.responses.create(model="gpt-test", input=question).output_text
