"""A two-agent research crew, written as a CrewAI user would write it. It knows nothing of tether.

The researcher looks a topic up with the ``lookup`` tool; the writer turns the research into one sentence.
The model is an OpenAI-compatible endpoint with a fixed base URL, built at import time; tether redirects its
requests while it trains the crew, and this code never changes.
"""

from __future__ import annotations

from crewai import LLM, Agent, Crew, Process, Task
from crewai.tools import tool

FACTS = {
    "paris": "Paris is the capital of France.",
    "mars": "Mars is the fourth planet from the Sun.",
    "python": "Python was created by Guido van Rossum.",
    "everest": "Mount Everest is 8,849 metres high.",
    "nile": "The Nile flows into the Mediterranean Sea.",
}


@tool("lookup")
def lookup(topic: str) -> str:
    """Look up a short fact about a topic (one or two words, such as "Paris")."""
    fact = FACTS.get(topic.strip().lower())
    if fact is None:
        raise KeyError(f"no fact about {topic!r}")
    return fact


# "openai/<name>" with a base_url: CrewAI's native OpenAI provider (chat completions, native tool calls)
llm = LLM(model="openai/crew-model", base_url="http://127.0.0.1:8000/v1", api_key="not-needed")

researcher = Agent(
    role="researcher",
    goal="Find one fact about {topic}",
    backstory="You look things up with the lookup tool and report exactly what it says.",
    tools=[lookup],
    llm=llm,
    max_iter=3,
)
writer = Agent(
    role="writer",
    goal="Write one clear sentence about {topic}",
    backstory="You turn research notes into a single sentence.",
    llm=llm,
    max_iter=2,
)

research = Task(
    description="Look up {topic} with the lookup tool and report the fact.",
    expected_output="The fact, as the tool gave it.",
    agent=researcher,
)
write = Task(
    description="Write one sentence about {topic} from the research.",
    expected_output="One sentence.",
    agent=writer,
    context=[research],
)

crew = Crew(agents=[researcher, writer], tasks=[research, write], process=Process.sequential)
