"""Filler turns: what happens between the steps of the issue threads.

Small talk, knowledge-base questions (about an order the customer owns or in general), questions about
other orders (answered one after the other or with parallel calls), questions the agent answers from
what it saw earlier (an order's date or total), repeated lookups of the customer's account, open orders
and tickets, and a wrong order number that fails with a 404. Most of them touch facts seen earlier,
so they both separate a fact from the decision that needs it and create decisions of their own.
"""

from __future__ import annotations

from damc.data.synthetic.phrasings import _KB_ORDER_QUESTIONS, _KB_TOPICS, _SMALL_SAY, _SMALL_USER
from damc.data.synthetic.vocab import _iso, _money, _pick
from damc.data.synthetic.world import _World


class _Fillers(_World):
    """The filler turns of a conversation (mixed with `_Threads` into `_Simulation`)."""

    def _small_talk(self) -> None:
        self.user(self.rng.choice(_SMALL_USER))
        self.say(self.rng.choice(_SMALL_SAY))

    def _kb_question(self) -> None:
        r = self.rng
        topic = r.choice(list(_KB_TOPICS))
        q, query, facts = _KB_TOPICS[topic]
        if topic in _KB_ORDER_QUESTIONS and r.random() < 0.75:  # about an item they own: check the order first
            o = self.stale(self.orders, lambda o: o.order_id)[0]
            ref = self.ref(o)
            self.user(_pick(r, _KB_ORDER_QUESTIONS[topic], ref=ref), chatty=0.25)
            self.call_retrying("order", {"order_id": o.order_id}, o.detail(), needs=(o.order_id,))
            self._kb_call(query.format(cat=ref), topic)
            self.say(_pick(r, ["You bought it on {d}. ", "Your {ref} was ordered on {d}. ", "Purchase date: {d}. "],
                           d=o.placed.strftime("%B %d"), ref=ref) + " ".join(facts[:2]))
            return
        cat = r.choice(["electronics", "kitchen stuff", "clothing", "furniture", "that kind of item"])
        self.user(q.format(cat=cat), chatty=0.25)
        self._kb_call(query.format(cat=cat.split()[0]), topic)
        self.say(r.choice(["According to our policy: ", "Here's what our help centre says: ", "Good question. "])
                 + " ".join(facts[:2]))

    def _other_orders(self) -> None:
        r = self.rng
        k = 2 if r.random() < self.cfg.p_parallel else 1
        picked = self.stale(self.orders, lambda o: o.order_id, k)
        refs = [self.ref(o) for o in picked]
        if k == 2:
            self.user(_pick(r, ["Unrelated, but did the {a} and the {b} ship yet?",
                                "While I have you — what's the status of the {a} and the {b}?"], a=refs[0], b=refs[1]), chatty=0.25)
        else:
            self.user(_pick(r, ["Unrelated, but what's happening with my {a}?", "Oh and is the {a} on its way?",
                                "Can you check on the {a} while you're at it?"], a=refs[0]), chatty=0.25)
        if k == 2 and r.random() < 0.7:  # one after the other
            for o in picked:
                self.call_retrying("order", {"order_id": o.order_id}, o.detail(), needs=(o.order_id,))
        else:  # in parallel
            self.calls([("order", {"order_id": o.order_id}, o.detail()) for o in picked],
                       needs=tuple(o.order_id for o in picked))
        parts = [f"the {rf} is {o.status.replace('_', ' ')}" for rf, o in zip(refs, picked)]
        msg = "Checked: " + " and ".join(parts) + "."
        if self.maybe_repeat():
            msg += f" (Order {picked[0].order_id}.)"
        self.say(msg[0].upper() + msg[1:])

    def _recall_question(self) -> None:
        """A question the agent answers from what it already saw (no tool call): date or amount of an order."""
        r = self.rng
        if r.random() < 0.5:
            o = self.stale(self.orders, lambda o: o.placed.strftime("%Y-%m-%d"))[0]
            ref = self.ref(o)
            fact = o.placed.strftime("%Y-%m-%d")
            self.user(_pick(r, ["When did I order the {ref} again?", "Remind me, what date was the {ref} order?",
                                "I forget — when did I buy the {ref}?"], ref=ref), chatty=0.25)
            self.say(_pick(r, ["That order was placed on {x}.", "You ordered it on {x}.", "It was placed {x}."],
                           x=fact), needs=(fact,))
        else:
            o = self.stale(self.orders, lambda o: _money(o.total))[0]
            ref = self.ref(o)
            fact = _money(o.total)
            self.user(_pick(r, ["How much did I pay for the {ref} order in total?",
                                "What did the {ref} order come to?", "remind me what the {ref} cost me?"], ref=ref), chatty=0.25)
            self.say(_pick(r, ["The order total was {x}.", "It came to {x} in total.", "You paid {x} for that order."],
                           x=fact), needs=(fact,))

    def _profile_check(self) -> None:
        """A repeated lookup of the customer's own account (by the id found at the start)."""
        r, c = self.rng, self.customer
        self.user(r.choice(["What address do you have on file for me, out of interest?",
                            "Can you check my account details are right?", "Which phone number is on my account?"]), chatty=0.25)
        self.call_retrying("user", {"user_id": c.user_id},
                           {"user_id": c.user_id, "name": c.name, "email": c.email, "phone": c.phone,
                            "shipping_address": c.address, "tier": c.tier}, needs=(c.user_id,))
        self.say(r.choice([f"On file: {c.address}, phone {c.phone}.", f"We have {c.address} as your shipping address.",
                           f"Your account shows {c.phone} and the address {c.address}."]))

    def _open_orders(self) -> None:
        r, c = self.rng, self.customer
        self.user(r.choice(["Do I have anything else still open with you?", "Is anything else still pending on my account?",
                            "Are there other orders still on the way?"]), chatty=0.25)
        opened = [o.summary() for o in self.orders if o.status in ("processing", "shipped", "in_transit", "exception")]
        self.call_retrying("orders", {"user_id": c.user_id, "status": "open"},
                           {"user_id": c.user_id, "orders": opened}, needs=(c.user_id,))
        self.say(f"You have {len(opened)} open order{'s' if len(opened) != 1 else ''} right now."
                 if opened else "Nothing else is open — everything else has been delivered or closed.")

    def _ticket_check(self) -> None:
        r = self.rng
        if not self.tickets:
            return self._other_orders()
        tid, ref, order = self.stale(self.tickets, lambda t: t[0])[0]
        self.user(_pick(r, ["Is the case about the {ref} still open?", "What's the status of the {ref} case?",
                            "Has anyone picked up my ticket for the {ref} yet?",
                            "any movement on the {ref} complaint?"], ref=ref), chatty=0.25)
        self.call_retrying("get_ticket", {"ticket_id": tid},
                           {"ticket_id": tid, "status": r.choice(["open", "pending"]),
                            "updated_at": _iso(self.clock), "messages": r.randint(1, 4)}, needs=(tid,))
        if r.random() < 0.5:  # and the order behind it
            self.call_retrying("order", {"order_id": order.order_id}, order.detail(), needs=(order.order_id,))
        self.say(r.choice(["It's open and in the queue.", "Yes, it's still active — no action needed from you.",
                           "It's being worked on."]))

    def _wrong_number(self) -> None:
        """The customer quotes a number that is not theirs (a near-miss): 404 and a correction."""
        r = self.rng
        real = r.choice(self.orders).order_id
        digits = [i for i, ch in enumerate(real) if ch.isdigit()]
        if len(digits) < 2:
            return self._small_talk()
        i, j = r.sample(digits, 2)
        chars = list(real)
        chars[i], chars[j] = chars[j], chars[i]
        chars[i] = str((int(chars[i]) + 1) % 10)
        wrong = "".join(chars)
        if wrong in self._used:
            return self._small_talk()
        self.user(_pick(r, ["Oh, can you also look at order {w}? I found it in an old email.",
                            "There's also order {w}, what happened with that one?"], w=wrong))
        self.call("order", {"order_id": wrong}, r.choice([
            {"error": {"code": 404, "message": f"Order {wrong} not found"}},
            {"status": "error", "code": 404, "message": "NotFound: no order with that id for this customer"},
            f"OrderNotFoundError: {wrong}"]))
        self.say(r.choice(["I can't find an order with that number on your account — maybe it's from a different store?",
                           "That number doesn't match any of your orders, I'm afraid.",
                           "Nothing comes up for that number. Could it be from another retailer?"]))
