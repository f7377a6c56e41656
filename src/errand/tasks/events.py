"""The vocabulary of a task's log, declared once: every event kind and the data fields it carries.

The engine, the steps and the service write these kinds (the agent loop writes its
own — ``model``, ``tool_call``, ``output`` and the rest — through the journal the
steps give it); the command line (:mod:`errand.cli.events`), the web UI
(:mod:`errand.server.eventview`) and the prompt's history read them. A test holds
every writer and both renderers to this table, so a new kind or field is declared
here first and a renderer cannot drift to a name nobody writes.

``fields`` are the keys an event's ``data`` may have; every event of a run's agent
also carries ``step``, the agent step it happened in. ``shown`` says whether a
person's log shows the kind (a kind that is only read back by code, such as the
agent's full ``message``, is not).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["CONTROL_KINDS", "KINDS", "OUTPUT_KINDS", "Kind", "declared"]


@dataclass(frozen=True)
class Kind:
    name: str
    fields: frozenset[str]
    about: str
    shown: bool = True
    output: bool = False  # streamed text, shown as it came


def _kind(name: str, fields: str, about: str, *, shown: bool = True, output: bool = False) -> Kind:
    return Kind(name, frozenset(fields.split()), about, shown, output)


_AGENT = "step"  # every agent event's
_USAGE = "cache_read_tokens cache_write_tokens cost input_tokens output_tokens run_cost run_tokens"  # a model call's

KINDS: Mapping[str, Kind] = {kind.name: kind for kind in (
    # a round, as the engine runs it
    _kind("round_started", "agent round runs worker",
          "a worker claimed the task and opened a round of N attempts, worked by its agent"),
    _kind("model_endpoint", "describe key model resolved_by", "the model the round uses, and where it came from"),
    _kind("environment", "budgets commit config detected isolation lint network setup_network test",
          "what shapes the round, read from the base commit"),
    _kind("setup_started", "key commands keyed_on network reused",
          "the environment's setup commands begin (or, reused from another commit, its refresh)"),
    _kind("setup_output", "text", "a line the setup printed", output=True),
    _kind("setup_cached", "key keyed_on reused tree_layer", "the environment was set up before; its layer is reused"),
    _kind("setup_tree", "kept kept_sample left_tracked untracked", "what setup wrote into the working tree"),
    _kind("setup_finished", "key refresh_failed refreshed reused", "setup ended and its layer is cached"),
    _kind("egress", "hosts last_refused more_hosts more_refused refusal_counts refused role",
          "what a sandbox of the task reached through its egress proxy, and what was refused and why"),
    _kind("tests_before", "cached command exit_code failed passed", "the tests on the base commit"),
    _kind("memories_given", "ids lines stale", "the project memories the agent was given", shown=False),
    _kind("memories_surfaced", "ids lines path", "rules and memories scoped to a file the agent opened",
          shown=False),
    _kind("memories_exported", "file ids kinds", "errand memory export wrote the approved memories into a file"),
    _kind("memory_unavailable", "reason", "project memory could not be read; the round goes on without it"),
    _kind("memory_proposed", "id text", "the agent proposed a memory", shown=False),
    _kind("memories_proposed", "ids refused input_tokens output_tokens cache_read_tokens cache_write_tokens cost",
          "distilling proposed memories for a person to approve (its model call's usage counts in the figures)",
          shown=False),
    _kind("distill_failed", "reason", "distilling memories from the finished task failed", shown=False),
    _kind("distill_skipped", "budget reason", "distilling was not started: the run's budget had no room for it"),
    # the agent's steps
    _kind("model", f"{_AGENT} {_USAGE} content stop tool_calls", "the model's reply"),
    _kind("message", f"{_AGENT} content role tool_call_id", "a message of the conversation", shown=False),
    _kind("tool_call", f"{_AGENT} arguments id name malformed", "the agent called a tool"),
    _kind("output", f"{_AGENT} id text", "what a command printed", output=True),
    _kind("tool_result", f"{_AGENT} content exit_code id name ok", "a tool's result"),
    _kind("model_retry", f"{_AGENT} code delay max_retries reason retry retry_after status",
          "a model call failed and is retried"),
    _kind("condensed", f"{_AGENT} {_USAGE} dropped_messages dropped_steps first_message forced last_message "
          "reason summary tokens_after tokens_before window",
          "older steps were summarised to fit the model's window"),
    _kind("exit", f"{_AGENT} budget detail spent status", "the agent's run ended"),
    _kind("question", "text", "the agent asked a person and waits"),
    _kind("answer_delivered", "ref text", "the person's answer reached the agent"),
    _kind("message_delivered", f"{_AGENT} ref text", "a person's message reached the agent"),
    # the checks and the result
    _kind("check_started", "command what", "a check of the result begins"),
    _kind("check_skipped", "reason what", "a check of the result was not run again"),
    _kind("check_output", "text", "a line a check printed", output=True),
    _kind("ranking", "rule runs", "the attempts, best first"),
    _kind("ready_for_review", "confidence run_id", "the round ended with a diff to review"),
    _kind("answered", "report run_id", "the round ended with a report and no change (a question answered)"),
    _kind("failed", "code command exit_code log reason", "the round ended without a result"),
    _kind("recovered", "previous reason rule run_id state",
          "an orphaned run was ended (its worker or workflow gone) and the task settled, with the reason"),
    # what people send and decide
    _kind("message_sent", "text", "a person's message for the agent"),
    _kind("answer_sent", "text", "a person's answer to the question"),
    _kind("cancelled", "", "a person cancelled the task"),
    _kind("retried", "after round", "a person ran the failed or cancelled task again"),
    _kind("followup", "text", "a person asked for more on the same branch"),
    _kind("followed_up", "task_id text", "the follow-up continues as a new task"),
    _kind("rejected", "reason", "a person rejected the result"),
    _kind("accepted", "branch commit run_id", "a person accepted the result onto its branch"),
    _kind("credited", "email name", "the accepted commit credits this person (Co-authored-by): who asked"),
    _kind("prepared", "branch commit run_id", "the result was committed for a draft pull request, not yet accepted"),
)}

#: Streamed text: printed as it came, not as a sentence.
OUTPUT_KINDS = frozenset(kind.name for kind in KINDS.values() if kind.output)
#: What a person sends a running round; the engine delivers these to the agent.
CONTROL_KINDS = ("message_sent", "answer_sent")


def declared(kind: str) -> Kind | None:
    return KINDS.get(kind)
