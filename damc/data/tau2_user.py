"""The caller's side of a τ²-bench task: its scenario text spoken as user turns, and the key cards.

τ²-bench describes each caller in the second person for an LLM user simulator
(`user_scenario.instructions`: `reason_for_call`, `known_info`, `unknown_info`). Replaying a task
offline needs the turns such a caller would say, so this module

* splits those three fields into sentences and puts them in the first person ("You are Yusuf Rossi in
  zip code 19122." -> "I am Yusuf Rossi in zip code 19122."; "If the agent asks you ..." -> "If you ask
  me ..."), dropping only pure conduct directives for the simulator ("Make sure you mention ...",
  "(... do not reveal it to the agent)") that hold none of the gold's values;
* reveals each request sentence just before the first gold action that uses a value it holds (an order
  id, a reservation), as a caller answers what the agent asks for; a sentence holding no such value
  stays with the sentence before it, and the request's opening sentences are the first turn; what the
  caller knows about themselves (`known_info`, `unknown_info`) is said together, when first needed;
* adds an explicit confirmation turn (fixed wording) before every write action, because both domain
  policies require the user's explicit "yes" before any database update.

Nothing is invented: every info turn is the scenario's own text, changed only in grammatical person.
`task_instructions` (how the simulator should behave: tone, when to insist) are never spoken.

The same value matching (`damc.facts.value_pattern`, `damc.facts.card_text`) finds the key cards (`key_card_ids`: the user turn
or tool result that first holds a gold value), so a sentence revealed "because action i needs value v"
is exactly a card holding v.

Example:
    >>> to_first_person("If the agent asks you for confirmation, you want to keep your order.")
    'If you ask me for confirmation, I want to keep my order.'
    >>> turns = plan_user_turns({"reason_for_call": "You want to cancel order #W1234567.",
    ...                          "known_info": "Your user id is ann_lee_123.", "unknown_info": None},
    ...                         [[value_pattern("ann_lee_123")], [value_pattern("#W1234567")]], [False, True])
    >>> [(t.before_action, t.kind, t.text) for t in turns]  # doctest: +NORMALIZE_WHITESPACE
    [(0, 'info', 'My user id is ann_lee_123.'), (1, 'info', 'I want to cancel order #W1234567.'),
     (1, 'confirm', 'Yes, please go ahead.')]
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from damc.cards import fact_cards
from damc.facts import first_holder, value_pattern

logger = logging.getLogger(__name__)

# Scenario fields that are spoken, in the order their sentences appear within one turn.
SPOKEN_FIELDS = ("reason_for_call", "known_info", "unknown_info")
# Explicit confirmations before write actions, used in turn (1st, 2nd, ... write of an episode).
CONFIRMATIONS = ("Yes, please go ahead.", "Yes, I confirm. Please proceed.", "Yes, that's correct, go ahead.")

_SENTENCE_END = re.compile(r"(?<=[.!?])[\"')\]]?\s+(?=[\"'(\[]?[A-Z0-9#])|\n+")
# Conduct directives addressed to the simulator, not things a caller says (dropped unless they hold a value).
_DIRECTIVE = re.compile(r"^(make sure|mention|be (insistent|persistent|calm|polite)|provide all details|"
                        r"do not mention|don't mention|do not reveal|don't reveal)\b", re.I)
_ASIDE = re.compile(r"\s*\([^()]*\b(reveal|mention)\b[^()]*\)", re.I)
# Words after which "you" is an object ("tell you" -> "tell me"); elsewhere it is the subject ("I").
# (Words that are also nouns, such as "refund" or "cost", are left out: "the refund you expect".)
_OBJECT_AFTER = ("to for with at from about of than tell tells told ask asks asked give gives gave help helps "
                 "helped let lets offer offers offered send sends sent charge charges charged show shows allow "
                 "allows remind reminds assure assures transfer transfers provide provides thank inform informs "
                 "get gets got make makes made cause causes caused contact contacts compensate compensates "
                 "want wants need needs upgrade upgrades convince convinces").split()
# Third-person verbs of "the agent" that become second person once "the agent" is "you".
_AGENT_VERBS = {"asks": "ask", "says": "say", "tells": "tell", "mentions": "mention", "provides": "provide",
                "gives": "give", "offers": "offer", "proposes": "propose", "refuses": "refuse",
                "confirms": "confirm", "agrees": "agree", "suggests": "suggest", "tries": "try", "finds": "find",
                "lists": "list", "shows": "show", "informs": "inform", "allows": "allow", "wants": "want",
                "needs": "need", "is": "are", "has": "have", "does": "do", "doesn't": "don't", "was": "were",
                "wasn't": "weren't", "isn't": "aren't", "cancels": "cancel", "insists": "insist",
                "claims": "claim", "denies": "deny", "explains": "explain", "changes": "change"}
_USER_RULES: list[tuple[re.Pattern[str], Any]] = [
    (re.compile(r"\byou name is\b", re.I), "my name is"),  # a typo in several retail tasks
    (re.compile(r"\byou're\b", re.I), "I'm"), (re.compile(r"\byou've\b", re.I), "I've"),
    (re.compile(r"\byou'd\b", re.I), "I'd"), (re.compile(r"\byou'll\b", re.I), "I'll"),
    (re.compile(r"\byou are\b", re.I), "I am"), (re.compile(r"\byou were\b", re.I), "I was"),
    (re.compile(r"\bare you\b", re.I), "am I"), (re.compile(r"\bwere you\b", re.I), "was I"),
    (re.compile(r"\byourself\b", re.I), "myself"), (re.compile(r"\byours\b", re.I), "mine"),
    (re.compile(r"\byour\b", re.I), "my"),
    (re.compile(r"\b(" + "|".join(_OBJECT_AFTER) + r") you\b", re.I), r"\1 me"),
    (re.compile(r"\byou\b", re.I), "I"),
]
_AGENT = r"the (?:customer service |service )?agent"
_REQUEST_START = r"(^|, |; |and |so )"  # an imperative "ask the agent ..." starts a sentence or a clause
_AGENT_RULES: list[tuple[re.Pattern[str], Any]] = [
    (re.compile(_REQUEST_START + r"(?:ask|tell) " + _AGENT + r"( \w+ly)? to\b", re.I), r"\1please\2"),
    (re.compile(_REQUEST_START + r"(?:ask|tell) " + _AGENT +
                r"(?= (?:how|what|which|when|where|why|if|whether|about)\b)", re.I), r"\1please tell me"),
    (re.compile(r"\b" + _AGENT + r"'s\b", re.I), "your"),
    (re.compile(r"\b" + _AGENT + r"\b", re.I), "you"),
    (re.compile(r"\byou (" + "|".join(map(re.escape, _AGENT_VERBS)) + r")\b", re.I),
     lambda m: "you " + _AGENT_VERBS[m.group(1).lower()]),
]


@dataclass(frozen=True)
class Sentence:
    """One sentence of a scenario field.

    Attributes:
        field: the `user_scenario.instructions` field it comes from (one of `SPOKEN_FIELDS`).
        text: the sentence in the first person.
        source: the sentence as written in the task (second person).
    """

    field: str
    text: str
    source: str


@dataclass(frozen=True)
class UserTurn:
    """One user message of a replayed task.

    Attributes:
        before_action: index of the gold action the turn is spoken just before.
        kind: "info" (scenario sentences) or "confirm" (explicit yes before a write action).
        text: what the caller says.
        fields: scenario fields its sentences come from (empty for confirmations).
    """

    before_action: int
    kind: str
    text: str
    fields: tuple[str, ...] = ()


# ----------------------------------------------------------------------------- sentences

def split_sentences(text: str | None) -> list[str]:
    """Sentences of a scenario field (split at line breaks and at ., ! or ? before a capital or digit)."""
    out = []
    for part in _SENTENCE_END.split(text or ""):
        s = part.strip().lstrip(".,; ").strip() if part else ""
        if s:
            out.append(s)
    return out


def to_first_person(sentence: str) -> str:
    """A second-person scenario sentence as the caller would say it (see the module docstring)."""
    s = sentence
    for pat, rep in _USER_RULES:
        s = pat.sub(rep, s)
    for pat, rep in _AGENT_RULES:
        s = pat.sub(rep, s)
    return s[:1].upper() + s[1:] if s else s


def scenario_sentences(instructions: Mapping[str, Any], keep: Sequence[re.Pattern[str]] = ()) -> list[Sentence]:
    """The spoken sentences of a scenario, in `SPOKEN_FIELDS` order, in the first person.

    Args:
        instructions: `user_scenario.instructions` as a mapping (missing or null fields are skipped).
        keep: value patterns; a directive sentence or aside that matches one of them is kept.
    """
    out = []
    for fld in SPOKEN_FIELDS:
        for src in split_sentences(instructions.get(fld)):
            holds = any(p.search(src) for p in keep)
            text = src if holds else _ASIDE.sub("", src).strip()
            if not text or (not holds and (_DIRECTIVE.match(text) or not re.search(r"[A-Za-z0-9]", text))):
                continue
            out.append(Sentence(fld, to_first_person(text), src))
    return out


# ----------------------------------------------------------------------------- turns

def _first_need(text: str, action_patterns: Sequence[Sequence[re.Pattern[str]]]) -> int | None:
    """Index of the first action with a value that occurs in `text` (None: no action needs it)."""
    for i, pats in enumerate(action_patterns):
        if any(p.search(text) for p in pats):
            return i
    return None


def _slots(sentences: list[Sentence], action_patterns: Sequence[Sequence[re.Pattern[str]]]) -> list[int]:
    """The action each sentence is revealed before (see `plan_user_turns`)."""
    needs = [_first_need(s.text, action_patterns) for s in sentences]
    slots: list[int] = [0] * len(sentences)
    for fld in SPOKEN_FIELDS:
        idx = [i for i, s in enumerate(sentences) if s.field == fld]
        if fld == "reason_for_call":  # leading sentences open the call; later ones follow their predecessor
            prev = 0
            for i in idx:
                prev = needs[i] if needs[i] is not None else prev
                slots[i] = prev
    # What the caller knows about themselves is said together, when the first of it is needed.
    ident = [needs[i] for i, s in enumerate(sentences) if s.field != "reason_for_call" and needs[i] is not None]
    for i, s in enumerate(sentences):
        if s.field != "reason_for_call":
            slots[i] = min(ident, default=0)
    if slots and min(slots) > 0:  # somebody has to open the call: the earliest group moves to the start
        lo = min(slots)
        slots = [0 if x == lo else x for x in slots]
    return slots


def plan_user_turns(instructions: Mapping[str, Any], action_patterns: Sequence[Sequence[re.Pattern[str]]],
                    writes: Sequence[bool]) -> list[UserTurn]:
    """The user turns of a replayed task, each placed before a gold action.

    A `reason_for_call` sentence is revealed just before the first action whose values
    (`action_patterns[i]`) it holds; one without such a value follows the sentence before it (leading
    ones open the call). `known_info` and `unknown_info` (who the caller is, what they know) are said
    together, before the first action that needs any of it (or at the opening). If nothing lands before
    action 0, the earliest group moves there. Every write action (`writes[i]`) gets a confirmation turn
    of its own right before it, after any info turn at the same place.

    Args:
        instructions: `user_scenario.instructions` (`reason_for_call`, `known_info`, `unknown_info`).
        action_patterns: per gold action, the `value_pattern`s of its key values.
        writes: per gold action, whether it writes to the database.

    Returns:
        Turns ordered by `before_action` (info before confirm at the same action).
    """
    if len(action_patterns) != len(writes):
        raise ValueError(f"{len(action_patterns)} actions but {len(writes)} write flags")
    sentences = scenario_sentences(instructions, [p for pats in action_patterns for p in pats])
    slots = _slots(sentences, action_patterns)
    turns: list[UserTurn] = []
    n_confirm = 0
    for a in range(len(action_patterns)):
        here = [s for s, slot in zip(sentences, slots) if slot == a]
        if here:
            here.sort(key=lambda s: SPOKEN_FIELDS.index(s.field))  # stable: text order within a field
            turns.append(UserTurn(a, "info", " ".join(s.text for s in here),
                                  tuple(dict.fromkeys(s.field for s in here))))
        if writes[a]:
            turns.append(UserTurn(a, "confirm", CONFIRMATIONS[n_confirm % len(CONFIRMATIONS)]))
            n_confirm += 1
    return turns


# ----------------------------------------------------------------------------- key cards

def key_card_ids(episode_id: str, messages: list[dict[str, Any]],
                 values: dict[int, list[Any]]) -> tuple[dict[str, list[str]], dict[str, list[Any]]]:
    """For each decision, the cards that first contain its gold values (user turns and tool results before it).

    Args:
        episode_id: the episode's id (card ids are `card_id(episode_id, msg[, call])`).
        messages: the episode's messages.
        values: `{decision message index: key values}` (`damc.data.tau2.key_values`).

    Returns:
        `(key_card_ids, key_facts)`: `{str(k): [card_id, ...]}` and `{str(k): [value, ...]}` (the values
        that were found), for decisions with at least one key card.
    """
    cards = fact_cards(episode_id, messages)  # per message: (card id, searchable text) of user turns and results
    keys: dict[str, list[str]] = {}
    facts: dict[str, list[Any]] = {}
    for k in sorted(i for i in values if 0 <= i < len(messages)):  # decisions in message order
        for v in values[k]:
            hit = first_holder(value_pattern(v), cards[:k])
            if hit is not None:
                keys.setdefault(str(k), [])
                if hit not in keys[str(k)]:
                    keys[str(k)].append(hit)
                facts.setdefault(str(k), []).append(v)
    return keys, facts
