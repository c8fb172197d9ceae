"""A plain-openai agent that scores itself with an LLM judge, as Agent Lightning's room-selector example does.

Both clients are built at import time with fixed URLs, as a user writes them: the agent's model (nothing
listens there: inside a rollout tether redirects it to the model being trained) and the judge's
(``JUDGE_BASE_URL``, read at import), which must keep answering from its own endpoint.
"""

from __future__ import annotations

import os
from typing import Any

import openai

import tether

client = openai.OpenAI(base_url="http://127.0.0.1:9/v1", api_key="sk-user", max_retries=0)
judge = openai.OpenAI(base_url=os.environ["JUDGE_BASE_URL"], api_key="sk-judge", max_retries=0, timeout=30)
async_client = openai.AsyncOpenAI(base_url="http://127.0.0.1:9/v1", api_key="sk-user", max_retries=0)
async_judge = openai.AsyncOpenAI(
    base_url=os.environ["JUDGE_BASE_URL"], api_key="sk-judge", max_retries=0, timeout=30
)


def _grade_request(question: str, answer: str) -> list[Any]:
    return [{"role": "user", "content": f"Grade this answer. Question: {question} Answer: {answer}"}]


def grade(question: str, answer: str) -> float:
    verdict = judge.chat.completions.create(model="judge-model", messages=_grade_request(question, answer))
    return 1.0 if "CORRECT" in (verdict.choices[0].message.content or "") else 0.0


def _ask(question: str) -> str:
    reply = client.chat.completions.create(model="policy", messages=[{"role": "user", "content": question}])
    return reply.choices[0].message.content or ""


def answer(question: str) -> dict[str, Any]:
    """The judge is called as it is: ``tether.wrap(answer, passthrough=[judge])`` keeps it on its endpoint."""
    text = _ask(question)
    return {"answer": text, "score": grade(question, text)}


def answer_in_region(question: str) -> dict[str, Any]:
    """The judge call marked in the code."""
    text = _ask(question)
    with tether.passthrough():
        score = grade(question, text)
    return {"answer": text, "score": score}


async def answer_async(question: str) -> dict[str, Any]:
    """The same with async clients, the judge marked in the code."""
    reply = await async_client.chat.completions.create(
        model="policy", messages=[{"role": "user", "content": question}]
    )
    text = reply.choices[0].message.content or ""
    with tether.passthrough():
        verdict = await async_judge.chat.completions.create(
            model="judge-model", messages=_grade_request(question, text)
        )
    return {"answer": text, "score": 1.0 if "CORRECT" in (verdict.choices[0].message.content or "") else 0.0}
