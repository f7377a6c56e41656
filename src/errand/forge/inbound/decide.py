"""What errand does about one forge event: a pure function of the event and what errand knows.

:func:`decide` reads a :class:`~errand.forge.inbound.events.ForgeEvent` and a :class:`State` (read
from the forge and the store just before) and returns one action; only
:class:`~errand.forge.inbound.webhooks.WebhookHandler` performs it. The rows, in the order they hold:

1. a ping is answered; an event errand does not act on is ignored;
2. anything the token's own account wrote is ignored, whatever it says and whether or not
   errand stored its id yet (a forge may deliver the webhook of errand's comment before the
   call that wrote it returns);
3. a part of a review that already had its round (or answered a question) is a duplicate:
   a review's body and its line comments are one instruction;
4. a label: the configured one, by a writer, on an issue no open task has, starts a task;
   where the forge says only that the labels changed (Gitea), only on an issue errand never
   had a task for (a later change is some other label's);
5. while a question waits there, a reply that is not a command is the answer, from the
   person who asked or a writer;
6. otherwise only ``@errand …`` by a writer counts (the whole handle, any case: ``@errands-team``
   is someone else; quoted lines, ``> …``, are never a mention or a command): ``@errand accept`` accepts what is ready
   (and, while a question waits, says it is still open), on a pull request the rest is a
   round there (a line comment's round asks what its review's body asks, if that says
   anything), on an issue a new task unless an open task has that issue already.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from errand.forge.inbound.events import ForgeEvent

__all__ = ["COMMANDS", "Accept", "Action", "Answer", "Duplicate", "Follow", "Ignore", "Pong", "Start", "State",
           "command_of", "decide"]

COMMANDS = frozenset({"accept"})  # `@errand accept`: the one word that is a command, not an ask


@dataclass(frozen=True)
class State:
    """What errand knows when the event arrives."""

    me: str  # the login of the account errand's token acts as
    mention: str  # "@errand"
    label: str  # "errand"
    may_write: bool = False  # the event's author has write access (asked only when it could matter)
    waiting_task: str | None = None  # the task here that waits for an answer
    asked_by: str | None = None  # who asked for that task's work (may answer without write access)
    is_question: bool = False  # the comment is the one errand posted to ask (its id is stored)
    busy_task: str | None = None  # an open task that has this issue already
    review_done: bool = False  # the event's review was acted on already
    review_body: str = ""  # the body of the review a line comment belongs to (read only for a round)
    first_task: bool = False  # errand never had a task for the issue (read for a label change, as known)


@dataclass(frozen=True)
class Ignore:
    reason: str


@dataclass(frozen=True)
class Duplicate:
    reason: str


@dataclass(frozen=True)
class Pong:
    pass


@dataclass(frozen=True)
class Start:
    """A new task for the issue, asked by the event's author (with ``text``, or by a label)."""

    text: str | None


@dataclass(frozen=True)
class Follow:
    """A round on the pull request."""

    text: str | None


@dataclass(frozen=True)
class Accept:
    still_open: str | None  # the task whose question still waits here, to say so


@dataclass(frozen=True)
class Answer:
    task_id: str
    text: str


Action = Ignore | Duplicate | Pong | Start | Follow | Accept | Answer


def decide(event: ForgeEvent, state: State) -> Action:
    if event.kind == "ping":
        return Pong()
    if event.kind == "other":
        return Ignore(f"{event.name} is not something errand acts on")
    if is_mine(event, state):
        return Ignore(f"errand's own writing (@{event.author} is the account errand's token acts as)")
    if event.review_id is not None and state.review_done:
        return Duplicate(f"review {event.review_id} was acted on already")
    if event.kind == "labeled":
        return _labelled(event, state)
    command = command_of(event.body, state.mention)
    if state.waiting_task is not None and event.body and command is None:
        return _answer(event, state, state.waiting_task)
    if not _mentions(event.body, state.mention):
        return Ignore(f"no {state.mention}")
    if not state.may_write:
        return Ignore(f"@{event.author} has no write access to {event.repo}")
    text = _ask(event.body, state.mention) or None
    if command == "accept":
        return Accept(still_open=state.waiting_task)
    if not event.pull:
        return _busy(event, state) or Start(text)
    # One review, one instruction: a line comment's round asks what its review's body asks
    # (the line comments are all in the round's instruction, with file and line).
    body = state.review_body.strip() if event.kind == "line_comment" else ""
    return Follow((_ask(body, state.mention) if _mentions(body, state.mention) else body) or text)


def is_mine(event: ForgeEvent, state: State) -> bool:
    """Whether the token's own account wrote it (logins compare without case, as the forges do)."""
    return bool(event.author) and bool(state.me) and (event.author or "").lower() == state.me.lower()


def could_act(event: ForgeEvent, state: State) -> bool:
    """Whether the author's write access can change the decision: what to ask the forge for."""
    if event.kind in ("ping", "other") or is_mine(event, state):
        return False
    if event.kind == "labeled":
        return event.label == state.label
    return bool(event.body) and (state.waiting_task is not None or _mentions(event.body, state.mention))


def command_of(body: str, mention: str) -> str | None:
    """``accept`` for ``@errand accept``, alone or followed by punctuation (``@errand accept!``,
    ``@errand accept, thanks``); None for anything else (``@errand accept the float version`` asks)."""
    if not _mentions(body, mention):
        return None
    found = _COMMAND.match(_ask(body, mention))
    word = found.group(1).lower() if found else None
    return word if word in COMMANDS else None


_COMMAND = re.compile(r"(\w+)\s*(?:$|[^\w\s-])")


def _mentions(body: str, mention: str) -> bool:
    """Whether ``body``, its quoted lines left out, starts with the whole handle (any case):
    ``@errand fix``, ``@Errand, fix``; not ``@errands-team`` or ``@errand-helper``."""
    return re.match(re.escape(mention) + r"(?![\w-])", _unquoted(body), re.IGNORECASE) is not None


def _ask(body: str, mention: str) -> str:
    """What follows the mention in ``body`` (whose unquoted text starts with it)."""
    return _unquoted(body)[len(mention):].strip()


def _unquoted(body: str) -> str:
    """``body`` without its quoted lines (``> …``, a quote-reply): what someone else said is no command."""
    return "\n".join(line for line in body.splitlines() if not line.lstrip().startswith(">")).strip()


def _labelled(event: ForgeEvent, state: State) -> Action:
    if event.label != state.label:
        return Ignore("another label")
    if not state.may_write:
        return Ignore(f"@{event.author} has no write access to {event.repo}")
    busy = _busy(event, state)
    if busy is None and not event.label_added and not state.first_task:
        return Ignore(f"#{event.number}'s labels changed and it has {state.label}, but errand had a task "
                      f"for it already: not a new request")
    return busy or Start(None)


def _busy(event: ForgeEvent, state: State) -> Ignore | None:
    """A label or an ``@errand`` ask on an issue an open task has already starts nothing more."""
    if state.busy_task is not None:
        return Ignore(f"task {state.busy_task} has #{event.number} already")
    return None


def _answer(event: ForgeEvent, state: State, task_id: str) -> Action:
    if state.is_question:
        return Ignore("errand's own question")
    if event.author is None or (event.author != state.asked_by and not state.may_write):
        return Ignore(f"@{event.author} may not answer for {event.repo}")
    text = _ask(event.body, state.mention) if _mentions(event.body, state.mention) else event.body
    return Answer(task_id, text or event.body)
