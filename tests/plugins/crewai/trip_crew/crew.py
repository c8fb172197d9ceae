"""A YAML-configured crew in the shape of crewAI-examples' trip planners (no tether import): ``@CrewBase``
with agents and tasks from ``config/*.yaml`` (roles folded with ``>``, so each ends in a newline), a
sequential process, and a last task whose answer CrewAI converts to ``output_json``."""

from __future__ import annotations

from crewai import LLM, Agent, Crew, Process, Task
from crewai.project import CrewBase, agent, crew, task
from crewai.tools import tool
from pydantic import BaseModel


@tool("opening_hours")
def opening_hours(place: str) -> str:
    """Opening hours of a place (a museum, a castle, a venue)."""
    return f"{place}: open 10:00-18:00"


class DayPlan(BaseModel):
    day: int
    activities: list[str]


class Itinerary(BaseModel):
    name: str
    days: list[DayPlan]


llm = LLM(model="openai/trip-model", base_url="http://127.0.0.1:8000/v1", api_key="not-needed")


@CrewBase
class TripCrew:
    """Plans activities at a destination and compiles them into an itinerary."""

    agents_config = "config/agents.yaml"
    tasks_config = "config/tasks.yaml"

    @agent
    def activity_planner(self) -> Agent:
        return Agent(config=self.agents_config["activity_planner"], llm=llm, max_iter=2)  # type: ignore[index]

    @agent
    def itinerary_compiler(self) -> Agent:
        return Agent(
            config=self.agents_config["itinerary_compiler"],  # type: ignore[index]
            tools=[opening_hours],
            llm=llm,
            max_iter=3,
        )

    @task
    def activity_planning_task(self) -> Task:
        return Task(config=self.tasks_config["activity_planning_task"])  # type: ignore[index]

    @task
    def itinerary_compilation_task(self) -> Task:
        return Task(config=self.tasks_config["itinerary_compilation_task"], output_json=Itinerary)  # type: ignore[index]

    @crew
    def crew(self) -> Crew:
        return Crew(agents=self.agents, tasks=self.tasks, process=Process.sequential)  # type: ignore[attr-defined]
