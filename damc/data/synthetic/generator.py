"""The generator: the support conversation script and `generate_episode(s)`.

`_Simulation` combines the builder, the world, the issue threads and the fillers into one conversation:
a system prompt, an opening (the customer identifies themselves; the agent finds the account and lists
the orders), two or three threads interleaved with filler turns up to a drawn target length, and a
closing that resolves the tickets. `generate_episodes` draws every episode from one `random.Random(seed)`.
"""

from __future__ import annotations

import logging
import random
from typing import Iterator

from tqdm import tqdm

from damc.data.synthetic.config import SyntheticConfig
from damc.data.synthetic.fillers import _Fillers
from damc.data.synthetic.phrasings import (
    _GREET,
    _ID_EMAIL,
    _ID_NAME,
    _ID_PHONE,
    _OPEN_REASON,
    _SAY_ORDERS_NO_ID,
)
from damc.data.synthetic.threads import _Threads
from damc.data.synthetic.vocab import _MAIL_DOMAINS, _pick
from damc.episodes import Episode

logger = logging.getLogger(__name__)


class _Simulation(_Threads, _Fillers):
    """The support conversation: opening, interleaved issue threads, filler turns, closing."""

    # ---------------------------------------------------------------- top level
    def run(self) -> None:
        r, cfg = self.rng, self.cfg
        target = r.randint(cfg.min_messages + 8, cfg.max_messages - 22)
        self.system(self._system_prompt())
        self._opening()
        delivered = [o for o in self.orders if o.status == "delivered"]  # refunds: things that arrived
        moving = [o for o in self.orders if o.status in ("shipped", "in_transit")]  # late deliveries
        r.shuffle(delivered)
        r.shuffle(moving)
        kinds = r.sample(["refund", "delivery", "contact", "refund2"], r.randint(cfg.min_threads, cfg.max_threads))
        threads: list[Iterator[None]] = []
        for kind in kinds:
            if kind.startswith("refund"):
                threads.append(self._refund_thread(delivered.pop()))
            elif kind == "delivery":
                threads.append(self._delivery_thread(moving.pop()))
            else:
                threads.append(self._contact_thread())
        # weighted: questions that touch earlier ids are the common case, pure chit-chat the rare one
        fillers = [self._kb_question, self._other_orders,
                   self._other_orders, self._other_orders, self._profile_check, self._ticket_check,
                   self._ticket_check, self._wrong_number, self._open_orders, self._recall_question,
                   self._recall_question]
        for _ in range(r.randint(0, 2)):  # some customers chat or ask around before their main issue
            r.choice(fillers)()
        while threads:
            g = r.choice(threads)
            try:
                next(g)
            except StopIteration:
                threads.remove(g)
                continue
            left = target - len(self.messages)
            n = r.randint(cfg.min_fillers, cfg.max_fillers) if left > 30 else r.randint(0, 1)
            for _ in range(n):
                r.choice(fillers)()
        while len(self.messages) < target - 6:
            r.choice(fillers)()
        self._closing()

    def _system_prompt(self) -> str:
        r = self.rng
        head = r.choice([f"You are the customer support assistant for {self.brand}.",
                         f"You are {r.choice(['Ava', 'Sam', 'Robin', 'Kai'])}, a support agent at {self.brand}.",
                         f"You help {self.brand} customers with orders, refunds and account questions."])
        rules = [r.choice(["Verify the customer's identity before discussing orders.",
                           "Always look the customer up before touching their orders."]),
                 r.choice(["Use the tools; never invent order or ticket numbers.",
                           "Only quote ids that a tool returned."]),
                 r.choice(["Refunds above your approval limit must be escalated with the blocking error code.",
                           "If a refund is rejected for approval reasons, escalate the ticket and include the error code."]),
                 r.choice(["Respect the customer's latest instructions about refund method and contact details.",
                           "If the customer changes a preference, the newest instruction wins."]),
                 r.choice(["Be concise and friendly.", "Keep replies short; no marketing.", "Be warm but brief."])]
        r.shuffle(rules)
        return head + " " + " ".join(rules) + f" Today is {self.clock.strftime('%A, %B %d, %Y')}."

    # ---------------------------------------------------------------- opening
    def _opening(self) -> None:
        r, c = self.rng, self.customer
        how = r.choice(["email", "email", "phone", "name"])
        ident = {"email": _pick(r, _ID_EMAIL, email=c.email), "phone": _pick(r, _ID_PHONE, phone=c.phone),
                 "name": _pick(r, _ID_NAME, name=c.name, city=c.city)}[how]
        self.user(f"{r.choice(_GREET)} {r.choice(_OPEN_REASON)} {ident}", gap=(0, 1))
        profile = {"user_id": c.user_id, "name": c.name, "email": c.email, "phone": c.phone,
                   "shipping_address": c.address, "tier": c.tier, "customer_since": c.since}
        if how == "name":  # several accounts share the name: confuser user ids in the result
            others = []
            for _ in range(r.randint(1, 3)):
                addr, city = self._address()
                others.append({"user_id": self.unique(self.fmt_user), "name": c.name, "city": city,
                               "email": f"{c.name.split()[0].lower()}{r.randint(1, 999)}@{r.choice(_MAIL_DOMAINS)}"})
            matches = others + [{"user_id": c.user_id, "name": c.name, "city": c.city, "email": c.email}]
            r.shuffle(matches)
            self.call_retrying("user", {"name": c.name}, {"matches": matches, "count": len(matches)})
        else:
            arg = {"email": c.email} if how == "email" else {"phone": c.phone}
            if how == "email" and r.random() < 0.2:  # a typo first: 404, then the customer corrects it
                bad = c.email.replace("@", r.choice(["@@", "1@", "@g"]), 1)
                self.call("user", {"email": bad}, {"error": {"code": 404, "message": f"No customer with email {bad}"}})
                self.say(r.choice(["I couldn't find an account with that address — could you double-check the spelling?",
                                   "Hmm, no account comes up for that email. Is there a typo, or another address you use?"]))
                self.user(r.choice(["oops sorry, typo. it's {e}", "Sorry! Should be {e}", "my bad — {e}"]).format(e=c.email))
            self.call_retrying("user", arg, profile)
        self.call_retrying("orders", {"user_id": c.user_id, "limit": 10},
                           {"user_id": c.user_id, "orders": [o.summary() for o in self.orders]})
        refs = ", ".join(f"the {self.ref(o)}" for o in r.sample(self.orders, 2))
        self.say(_pick(r, _SAY_ORDERS_NO_ID, first=c.name.split()[0], n=len(self.orders), refs=refs))

    # ---------------------------------------------------------------- closing
    def _closing(self) -> None:
        r = self.rng
        self.user(r.choice(["That's everything, thanks a lot!", "Great, I think we're done. Thank you!",
                            "ok that's all for today, cheers", "Perfect, thanks for the help.",
                            "Thanks, you've been very helpful. Bye!"]))
        if r.random() < 0.8:
            for tid, _, _ in self.tickets:
                self.call_retrying("update_ticket", {"ticket_id": tid, "status": r.choice(["resolved", "closed"]),
                                                     "note": r.choice(["customer confirmed all issues handled",
                                                                       "resolved in chat", "no further action"])},
                                   {"ticket_id": tid, "status": "resolved"}, needs=(tid,))
        self.say(r.choice(["You're welcome — have a great day!", "Glad I could help. Take care!",
                           "Anytime. Have a good one!", "Happy to help — bye for now!"]))


def generate_episode(rng: random.Random, episode_id: str, cfg: SyntheticConfig | None = None) -> Episode:
    """Generate one episode from `rng` (retrying until its length is within the configured bounds)."""
    cfg = cfg or SyntheticConfig()
    for _ in range(50):
        sim = _Simulation(rng, cfg, episode_id)
        sim.run()
        if cfg.min_messages <= len(sim.messages) <= cfg.max_messages:
            break
    else:
        raise RuntimeError(f"could not generate {episode_id} within {cfg.min_messages}-{cfg.max_messages} messages")
    meta = {"source": "synthetic", "key_card_ids": sim.key_card_ids, "key_facts": sim.key_facts,
            "repeated_key": sim.repeated}
    return Episode(episode_id=episode_id, domain=cfg.domain, tools=sim.tools(), messages=sim.messages,
                   metadata=meta)


def generate_episodes(n_episodes: int, seed: int = 0, cfg: SyntheticConfig | None = None, *,
                      progress: bool = True) -> list[Episode]:
    """Generate `n_episodes` synthetic support episodes; the same seed gives identical episodes.

    Args:
        n_episodes: how many episodes.
        seed: seed of the single `random.Random` everything is drawn from.
        cfg: generator hyperparameters (defaults: `SyntheticConfig()`).
        progress: show a tqdm bar.

    Returns:
        Episodes with ids `f"{cfg.id_prefix}-{seed}-{i:05d}"` and `metadata["key_card_ids"]`,
        `metadata["key_facts"]`, `metadata["repeated_key"]`.

    Example:
        >>> eps = generate_episodes(3, seed=7, progress=False)
        >>> [e.episode_id for e in eps]
        ['sup-7-00000', 'sup-7-00001', 'sup-7-00002']
    """
    cfg = cfg or SyntheticConfig()
    if cfg.min_messages + 30 > cfg.max_messages:
        raise ValueError("max_messages must exceed min_messages by at least 30")
    rng = random.Random(seed)
    eps = [generate_episode(rng, f"{cfg.id_prefix}-{seed}-{i:05d}", cfg)
           for i in tqdm(range(n_episodes), desc="synthetic episodes", disable=not progress or n_episodes < 50)]
    logger.info("generated %d synthetic episodes (seed %d)", len(eps), seed)
    return eps
