"""Synthetic customer-support episodes: a seeded simulator of the seed article's support agent.

The agent helps one customer per episode through several user turns. It has OpenAI-style tools for
knowledge-base search, customer lookup, orders, tickets, refunds, replacements, escalation and email.
Each episode interleaves two or three *threads* (a refund, a late delivery, a contact change, ...)
with filler turns (small talk, long and mostly irrelevant knowledge-base results, questions about other
orders, repeated lookups, tool failures with retries). The threads are what make memory matter: an
order id listed by a tool at the start, a ticket id returned by `create_ticket`, an error code from a
refused refund, a refund method or an address the customer gave several turns ago are needed again
much later, after the customer has stopped mentioning them.

For every decision that needs such an earlier fact the generator records, in `episode.metadata`:

* `key_card_ids` — `{str(k): [card_id, ...]}`: every candidate card (before the current user turn)
  that holds one of the needed facts (`damc.cards.card_id` ids; tool cards use the calling assistant
  message index and the call's position).
* `key_facts` — `{str(k): ["88412", ...]}`: the literal values, as they appear in the gold arguments
  (or reply) and in the key cards.
* `repeated_key` — decision indices where some needed fact sits in more than one candidate card
  (e.g. the assistant repeated an order id in a reply): the redundancy cases.

Facts already present in the current turn (e.g. an id the agent just fetched again) are not keys: the
current turn is always kept verbatim, so they do not test memory.

Everything is drawn from one `random.Random(seed)`; the same seed gives identical episodes.

Example:
    >>> eps = generate_episodes(2, seed=0)
    >>> 40 <= len(eps[0].messages) <= 150
    True
    >>> k, cards = next(iter(eps[0].metadata["key_card_ids"].items()))

Modules (names with a leading underscore are internal to this package):

* `config` — `SyntheticConfig`, the generator's hyperparameters.
* `vocab` — names, places, products, id formats, tool schemas and the random helpers that draw them.
* `phrasings` — what customer and agent say: openings, small talk, retry apologies, knowledge-base text.
* `builder` — `_Episode`: message emission, fact tracking, key-card bookkeeping.
* `world` — `_World`: the customer, their orders and tickets, and knowledge-base searches.
* `threads` — the refund, late-delivery and contact-change threads (generators, one step per `next`).
* `fillers` — filler turns between thread steps.
* `generator` — `_Simulation` (the conversation script) and `generate_episode(s)`.
"""

from damc.data.synthetic.config import SyntheticConfig
from damc.data.synthetic.generator import generate_episode, generate_episodes

__all__ = ["SyntheticConfig", "generate_episode", "generate_episodes"]
