"""The customer's issue threads: a refund, a late delivery, a contact change.

Each thread is a generator: one `next()` plays one step (a user turn and the agent's calls and reply),
so the simulation can interleave two or three threads with filler turns in between. The threads plant
the facts that matter later — an order id, a ticket id, a refusal code, a refund method or address the
customer gave several turns ago — and the later steps that need them pass them as `needs`.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any, Iterator

from damc.data.synthetic.vocab import (
    _ERROR_REASONS,
    _METHODS,
    _TEAMS,
    _WORK_DOMAINS,
    _alnum,
    _digits,
    _iso,
    _money,
    _pick,
)
from damc.data.synthetic.world import _Order, _World


class _Threads(_World):
    """The issue threads of a conversation (mixed with `_Fillers` into `_Simulation`)."""

    def _open_ticket(self, order: _Order, subject: str) -> str:
        """Open a case for `order`; the first one becomes the conversation's case. Returns its id."""
        r, c = self.rng, self.customer
        tid = self.unique(self.fmt_ticket)
        self.facts.track(tid)
        args = {"user_id": c.user_id, "order_id": order.order_id, "subject": subject,
                "priority": r.choice(["normal", "normal", "high"])}
        self.call_retrying("create_ticket", args,
                           {"ticket_id": tid, "status": "open", "created_at": _iso(self.clock),
                            "assignee": r.choice(["queue:general", "queue:returns", "bot"])},
                           needs=(c.user_id, order.order_id))
        if self.ticket is None:
            self.ticket = tid
        self.tickets.append((tid, self.ref(order), order))
        return tid

    def _refund_thread(self, order: _Order) -> Iterator[None]:
        """A refund, one step per `next()`: the problem is reported and a case opened; the customer asks for a
        refund (partial when they keep the order's second item) and may change the refund method; then the
        refund is submitted, and either refused over the approval limit (escalated with the error code) or
        accepted (followed up by its reference)."""
        r = self.rng
        ref = self.ref(order)
        problem = r.choice(["arrived damaged", "stopped working after a few days", "is the wrong size",
                            "came with parts missing", "isn't what the listing showed", "was cracked out of the box"])
        tid = self._refund_reported(order, ref, problem)
        yield
        amount = self._refund_requested(order, ref, tid)
        yield
        method = "original payment method"
        if r.random() < self.cfg.p_change_method:
            method = self._refund_method_changed(tid)
            yield
        args = self._refund_go_ahead(order, tid, problem, amount, method)
        needs = (order.order_id, _money(amount)) + ((method,) if method != "original payment method" else ())
        limit = float(r.choice([100, 150, 200, 250]))
        if amount > limit and r.random() < 0.7:
            yield from self._refund_refused(tid, args, needs, amount, limit, method)
        else:
            yield from self._refund_accepted(order, tid, args, needs, amount, method)

    def _refund_reported(self, order: _Order, ref: str, problem: str) -> str:
        """The customer reports the problem; the agent checks the order and opens a case. Returns its id."""
        r = self.rng
        self.user(_pick(r, ["So, the {ref} {p}. I'd like my money back.",
                            "First thing: the {ref} I ordered {p}.",
                            "The {ref} {p} — really disappointed honestly.",
                            "Can we start with the {ref}? It {p}.",
                            "ok so my {ref} {p} and I want to return it"], ref=ref, p=problem))
        self.call_retrying("order", {"order_id": order.order_id}, order.detail(), needs=(order.order_id,))
        if r.random() < 0.4:
            self._kb_call(r.choice(["damaged item refund", "defective product return", "refund eligibility"]))
        tid = self._open_ticket(order, f"{order.items[0][0]} {problem}")
        msg = _pick(r, ["I'm sorry about that. I've opened a case for the {ref} and it's eligible for a refund.",
                        "That's not the experience we want — I've logged it with our returns team. We can refund you.",
                        "Sorry to hear it. A case is open now; you can get a refund for it."], ref=ref)
        if self.maybe_repeat():
            msg += f" Your case number is {tid}."
            self.say(msg, holds=())
        else:
            self.say(msg)
        return tid

    def _refund_requested(self, order: _Order, ref: str, tid: str) -> float:
        """The customer asks for a refund; the agent asks how it should be paid. Returns the amount."""
        r = self.rng
        # the customer asks for the refund; partial when the order has a second item they keep
        partial = len(order.items) > 1 and r.random() < 0.6
        amount = order.items[0][2] * order.items[0][3] if partial else order.total
        amount = round(amount, 2)
        if partial:
            self.user(_pick(r, ["Just refund the {ref} please, I'm keeping the rest of that order.",
                                "Only the {ref} needs refunding — the other thing in that order is fine.",
                                "I'd like a refund for the {ref} only, not the whole order."], ref=ref))
        else:
            self.user(_pick(r, ["Yes, a refund please. Back to my card is fine.",
                                "A refund would be great, to the original payment please.",
                                "Refund please — however it normally goes back.",
                                "I'd rather just get a refund than a replacement."]))
        if r.random() < 0.5:
            self.call_retrying("update_ticket", {"ticket_id": tid, "status": "open",
                                                 "note": r.choice(["customer requests refund", "refund requested",
                                                                   "partial refund requested" if partial else "full refund requested"])},
                               {"ticket_id": tid, "status": "open"}, needs=(tid,))
        self.say(r.choice(["Sure. Before I submit it: original payment method, or would store credit suit you better?",
                           "Okay! I can refund to your original payment method — just confirm that's what you'd like and I'll process it.",
                           "No problem. I'll get that ready; let me know when you want me to go ahead."]))
        return amount

    def _refund_method_changed(self, tid: str) -> str:
        """The customer wants the refund paid another way (maybe noted on the case). Returns the method."""
        r = self.rng
        method = r.choice(_METHODS[1:])
        self.user(_pick(r, ["Actually, thinking about it, can you make it {m} instead of my card?",
                            "Change of plan: I'd prefer {m} for that refund, not the card.",
                            "Wait — put it on {m} please, my card was cancelled last week.",
                            "hmm could the refund go to {m}? the card's expired"], m=method), holds=(method,))
        if r.random() < 0.35:  # the change is also written onto the case: a second card holding it
            self.call_retrying("update_ticket", {"ticket_id": tid, "status": "open",
                                                 "note": f"customer prefers refund as {method}"},
                               {"ticket_id": tid, "status": "open"}, needs=(tid,), holds=(method,))
        ack = r.choice(["Noted — I'll use that instead.", "Got it, I've made a note of that.",
                        "Understood, I'll switch it."])
        if self.maybe_repeat():
            ack = f"Understood — {method} it is."
        self.say(ack, holds=(method,) if method in ack else ())
        return method

    def _refund_go_ahead(self, order: _Order, tid: str, problem: str, amount: float, method: str) -> dict[str, Any]:
        """The customer says go ahead; the agent may re-read the case. Returns the refund call's arguments."""
        r = self.rng
        self.user(r.choice(["OK, please go ahead and process that refund now.", "Alright, go ahead with the refund.",
                            "Let's do the refund then.", "Please submit it whenever you're ready.",
                            "Yep go ahead, refund it"]))
        if r.random() < 0.5:  # agents often re-open the case before acting on it
            self.call_retrying("get_ticket", {"ticket_id": tid},
                               {"ticket_id": tid, "status": "open", "order_id": order.order_id,
                                "subject": f"{order.items[0][0]} {problem}"}, needs=(tid,))
        args = {"order_id": order.order_id, "amount": amount, "method": method,
                "reason": r.choice(["damaged", "defective", "not as described", "customer_request"])}
        return args

    def _refund_refused(self, tid: str, args: dict[str, Any], needs: tuple[str, ...], amount: float, limit: float,
                        method: str) -> Iterator[None]:
        """Over the approval limit: the refund is refused with an error code, then escalated with that code."""
        r = self.rng
        code, tmpl = r.choice(_ERROR_REASONS)
        code = code.format(n=r.randint(4001, 4099), n2=f"{r.randint(1, 99):02d}")
        self.facts.track(code)
        err = r.choice([
            {"error": {"code": 403, "reason": code, "message": tmpl.format(amt=_money(amount), lim=_money(limit))}},
            {"status": "error", "code": 403, "error_code": code, "message": tmpl.format(amt=_money(amount), lim=_money(limit))},
            {"error": f"PermissionDenied: {code}", "code": 403, "detail": tmpl.format(amt=_money(amount), lim=_money(limit))}])
        self.call("refund", args, err, needs=needs, holds=(method,))
        self.call("update_ticket", {"ticket_id": tid, "status": "pending",
                                    "note": "refund blocked, needs approval"}, {"ticket_id": tid, "status": "pending"},
                  needs=(tid,))
        self.say(r.choice(["I wasn't able to complete the refund myself — it's above what I can approve. I'll need to get it approved.",
                           "The payment system didn't accept it from my side because of the amount. This needs a supervisor's sign-off.",
                           "It needs an approval I don't have, unfortunately. I've put the case on hold for now."]))
        yield
        self.user(r.choice(["Any news on the refund? Can you push it to whoever can approve it?",
                            "So what happens with my refund now? Who can approve it?",
                            "Can you escalate the refund thing please, I don't want to wait forever.",
                            "Please send the refund to someone who can sign it off."]))
        team = r.choice(_TEAMS)
        self.call_retrying("escalate", {"ticket_id": tid, "team": team, "error_code": code,
                                        "summary": f"Refund of {_money(amount)} blocked ({code})"},
                           {"ticket_id": tid, "escalation_id": f"ESC-{_digits(r, 5)}", "queue": f"{team}-approvals",
                            "sla_hours": r.choice([4, 8, 24, 48])}, needs=(tid, code))
        self.say(r.choice(["Done — it's with the approvals team now; they usually reply within a day.",
                           "I've escalated it. Someone with approval rights will finish the refund shortly.",
                           "Escalated. You'll get an email once it's approved."]))
        yield
        if r.random() < 0.6:
            self.user(r.choice(["Out of curiosity, why exactly did it fail earlier?",
                                "What was the error you got before, in case they ask me?",
                                "What did the system actually say when it refused?"]))
            self.say(_pick(r, ["It was rejected with code {c} — the amount is over the automatic approval limit.",
                               "The payment system returned {c}: amount above my approval limit.",
                               "Error {c}. It's a limit on what agents can approve, nothing wrong on your side."],
                           c=code), needs=(code,))
            yield

    def _refund_accepted(self, order: _Order, tid: str, args: dict[str, Any], needs: tuple[str, ...],
                         amount: float, method: str) -> Iterator[None]:
        """The refund goes through; the customer later asks whether it was sent and for its reference."""
        r = self.rng
        rid = self.unique(self.fmt_refund)
        self.facts.track(rid)
        self.call_retrying("refund", args, {"refund_id": rid, "status": "pending", "amount": amount,
                                            "method": method, "eta_business_days": r.choice([3, 5, 7, 10])},
                           needs=needs, holds=(method,))
        if r.random() < 0.6:
            self.call_retrying("update_ticket", {"ticket_id": tid, "status": "pending",
                                                 "note": f"refund {rid} submitted"},
                               {"ticket_id": tid, "status": "pending"}, needs=(tid,))
        msg = r.choice(["All done — the refund is submitted.", "Your refund has been processed on our side.",
                        "The refund is in; it can take a few business days to show up."])
        if self.maybe_repeat():
            msg += f" Reference: {rid}."
        self.say(msg)
        yield
        self.user(r.choice(["Has that refund actually gone through yet?", "Can you check whether the refund was sent?",
                            "Any update on the money? Nothing on my statement yet.",
                            "Is the refund still pending?"]))
        if r.random() < 0.4:
            self.call_retrying("get_ticket", {"ticket_id": tid},
                               {"ticket_id": tid, "status": "pending", "order_id": order.order_id,
                                "last_note": "refund submitted"}, needs=(tid,))
        self.call_retrying("refund_status", {"refund_id": rid},
                           {"refund_id": rid, "status": r.choice(["processing", "sent", "pending"]),
                            "amount": amount, "method": method}, needs=(rid,))
        self.say(r.choice(["It's on its way — the payment processor has it.", "It's still processing, nothing to worry about yet.",
                           "It's been sent from our side; your provider may take a few days."]))
        yield
        if r.random() < 0.5:
            self.user(r.choice(["What's the refund reference, in case I need to chase it?",
                                "Can you give me the reference number for the refund?",
                                "what's the confirmation number for that refund?"]))
            self.say(_pick(r, ["Sure, it's {x}.", "The refund reference is {x}.", "Here you go: {x}."], x=rid),
                     needs=(rid,))
            yield

    def _delivery_thread(self, order: _Order) -> Iterator[None]:
        r = self.rng
        ref = self.ref(order)
        self.user(_pick(r, ["Next: my {ref} still hasn't shown up.", "Where is my {ref}? It's been ages.",
                            "Also the {ref} never arrived, tracking hasn't moved in a week.",
                            "Then there's the {ref} — supposedly shipped, but nothing."], ref=ref))
        self.call_retrying("order", {"order_id": order.order_id}, order.detail(), needs=(order.order_id,))
        tid = self._open_ticket(order, r.choice(["parcel not received", "shipment stuck in transit",
                                                 "lost package"])) if r.random() < 0.7 else None
        msg = r.choice(["I can see it left the warehouse but the carrier hasn't scanned it since — it looks stuck.",
                        "The carrier shows no movement for several days. That usually means it's lost.",
                        "It's flagged with a delivery exception at the carrier. I can send a replacement if you like."])
        if self.maybe_repeat():
            msg += f" Tracking number {order.tracking} with {order.carrier}."
        self.say(msg)
        yield
        addr, _ = self._address()
        self.facts.track(addr)
        self.user(_pick(r, ["One thing — I moved recently. Anything new should go to {a}, not the old place.",
                            "Heads up, I've changed address: {a}. Please use that from now on.",
                            "btw if you send anything, my new address is {a}",
                            "Also I'm staying at {a} for the next few months, so ship there please."], a=addr),
                  holds=(addr,))
        self.say(r.choice(["Thanks, noted. I'll make sure anything new goes there.", "Got it, I'll use that address.",
                           "Understood — new address noted."]))
        yield
        self.user(r.choice(["Can you just send me a new one?", "Please reship it, I need it this week.",
                            "Let's do a replacement rather than waiting.", "ok send a replacement then"]))
        new_id = self.unique(self.fmt_order)
        self.facts.track(new_id)
        self.call_retrying("replace", {"order_id": order.order_id, "shipping_address": addr,
                                       "expedited": r.random() < 0.5},
                           {"replacement_order_id": new_id, "status": "processing", "ship_to": addr,
                            "estimated_delivery": (self.clock + timedelta(days=r.randint(2, 6))).strftime("%Y-%m-%d")},
                           needs=(order.order_id, addr))
        if tid:
            self.call_retrying("update_ticket", {"ticket_id": tid, "status": "pending",
                                                 "note": r.choice(["replacement shipped", "reshipped to new address"])},
                               {"ticket_id": tid, "status": "pending"}, needs=(tid,))
        msg = r.choice(["The replacement is on its way to your new address.", "Replacement created — it ships today.",
                        "Done, a new one is being packed now."])
        if self.maybe_repeat():
            msg += f" New order number: {new_id}."
        self.say(msg)
        yield
        if r.random() < 0.6:
            self.user(r.choice(["What's the order number for the replacement?",
                                "Can I get the number of the new order so I can track it?",
                                "sorry what was the new order number?"]))
            self.say(_pick(r, ["It's {x}.", "The replacement order is {x}.", "Sure — {x}."], x=new_id), needs=(new_id,))
            yield

    def _contact_thread(self) -> Iterator[None]:
        r, c = self.rng, self.customer
        work = self.unique(lambda rr: f"{c.name.split()[0].lower()[:1]}{re.sub('[^a-z]', '', c.name.split()[-1].lower())}@"
                                      f"{rr.choice(_WORK_DOMAINS)}")
        self.facts.track(work)
        self.user(_pick(r, ["Could you send any emails about all this to {e} instead? I don't check the other one.",
                            "Please use {e} for any confirmations, the old address is full.",
                            "Small thing: my work email {e} is better for updates."], e=work), holds=(work,))
        self.say(r.choice(["Sure, I'll use that for anything I send you.", "Noted — updates will go there.",
                           "Got it, I'll send confirmations to that address."]))
        yield
        self.user(r.choice(["Could you email me a summary of what we've done today?",
                            "Can you send me all of this in writing?",
                            "Please email me a recap so I have it on record."]))
        body = "Summary of your support conversation today."
        needs: tuple[str, ...] = (work,)
        if self.ticket:
            body += f" Case {self.ticket}."
            needs += (self.ticket,)
        self.call_retrying("email", {"to": work, "subject": f"Your {self.brand} support summary", "body": body},
                           {"sent": True, "message_id": f"<{_alnum(r, 10)}@mail>"}, needs=needs)
        self.say(r.choice(["Sent! It should arrive in a minute.", "Done, check your inbox.", "The recap is on its way."]))
        yield
