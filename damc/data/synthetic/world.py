"""The customer's world: orders and account, drawn per episode, and the knowledge base they query.

`_World` extends the episode builder with the entities a conversation is about — the customer, four to
seven orders with items, prices, payments and carrier scans, the tickets opened along the way — and
the lookups shared by threads and fillers: which order or ticket was mentioned least recently, how the
customer refers to an order, and a knowledge-base search with long, mostly generic results.
"""

from __future__ import annotations

import random
import re
import string
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Callable

from damc.data.synthetic.builder import _Episode
from damc.data.synthetic.config import SyntheticConfig
from damc.data.synthetic.phrasings import _KB_FILLER, _KB_TITLES, _KB_TOPICS
from damc.data.synthetic.vocab import (
    _BRANDS,
    _CARRIERS,
    _CITIES,
    _FIRST,
    _LAST,
    _MAIL_DOMAINS,
    _ORDER_FMTS,
    _PRODUCTS,
    _REFUND_FMTS,
    _STREETS,
    _TICKET_FMTS,
    _USER_FMTS,
    _alnum,
    _digits,
    _iso,
    _money,
    _price,
)


@dataclass
class _Order:
    order_id: str
    items: list[tuple[str, list[str], float, int]]  # (name, references, unit price, quantity)
    placed: datetime
    status: str
    carrier: str
    tracking: str
    payment: str
    events: list[dict[str, str]] = field(default_factory=list)  # carrier scans, oldest first

    @property
    def total(self) -> float:
        return round(sum(p * q for _, _, p, q in self.items), 2)

    @property
    def ref(self) -> list[str]:  # how the customer refers to it
        return self.items[0][1]

    def summary(self) -> dict[str, Any]:
        return {"order_id": self.order_id, "placed_at": self.placed.strftime("%Y-%m-%d"), "status": self.status,
                "items": [n for n, _, _, _ in self.items], "total": self.total}

    def detail(self) -> dict[str, Any]:
        d: dict[str, Any] = {"order_id": self.order_id, "status": self.status,
                             "placed_at": _iso(self.placed),
                             "items": [{"name": n, "qty": q, "unit_price": p} for n, _, p, q in self.items],
                             "total": self.total, "currency": "USD", "payment": self.payment}
        if self.status in ("shipped", "delivered", "in_transit", "exception"):
            d["shipment"] = {"carrier": self.carrier, "tracking_number": self.tracking, "events": self.events}
        return d


@dataclass
class _Customer:
    user_id: str
    name: str
    email: str
    phone: str
    address: str
    city: str
    tier: str
    since: str


class _World(_Episode):
    """The episode builder plus the world it talks about: customer, orders, tickets, knowledge base."""

    def __init__(self, rng: random.Random, cfg: SyntheticConfig, episode_id: str):
        super().__init__(rng, cfg, episode_id)
        r = rng
        self.fmt_order = r.choice(_ORDER_FMTS)
        self.fmt_user = r.choice(_USER_FMTS)
        self.fmt_ticket = r.choice(_TICKET_FMTS)
        self.fmt_refund = r.choice(_REFUND_FMTS)
        self.brand = r.choice(_BRANDS)
        self.customer = self._make_customer()
        self.orders = self._make_orders(r.randint(4, 7))
        self.ticket: str | None = None  # the case opened for this conversation (first one)
        self.tickets: list[tuple[str, str, _Order]] = []  # (ticket id, customer's name for the item, order)

    # ---------------------------------------------------------------- world
    def _address(self) -> tuple[str, str]:
        r = self.rng
        city, state, zf = r.choice(_CITIES)
        z = zf.format(r.randint(1, 99))
        unit = r.choice(["", "", f", Apt {r.randint(1, 40)}", f", Unit {r.randint(1, 12)}{r.choice('ABC')}"])
        st = f"{r.randint(2, 4999)} {r.choice(_STREETS)}{unit}"
        return (f"{st}, {city}, {state} {z}" if state else f"{st}, {city} {z}"), city

    def _make_customer(self) -> _Customer:
        r = self.rng
        first, last = r.choice(_FIRST), r.choice(_LAST)
        handle = r.choice([f"{first}.{last}", f"{first[0]}{last}", f"{first}{r.randint(1, 99)}",
                           f"{last}.{first[0]}", f"{first}_{last}{r.randint(70, 99)}"])
        handle = re.sub(r"[^a-z0-9._]", "", handle.lower().replace("á", "a").replace("é", "e"))
        email = self.unique(lambda _: f"{handle}@{r.choice(_MAIL_DOMAINS)}")
        self.facts.track(email)
        phone = r.choice([f"({r.randint(201, 989)}) 555-{r.randint(0, 9999):04d}",
                          f"+44 7{_digits(r, 3)} {_digits(r, 6)}", f"+1-{r.randint(201, 989)}-555-{r.randint(0, 9999):04d}"])
        addr, city = self._address()
        uid = self.unique(self.fmt_user)
        self.facts.track(uid)
        return _Customer(uid, f"{first} {last}", email, phone, addr, city,
                         r.choice(["standard", "plus", "gold", "member"]), str(r.randint(2015, 2023)))

    def _make_orders(self, n: int) -> list[_Order]:
        r = self.rng
        products = r.sample(_PRODUCTS, n + 3)
        orders, prices = [], set()
        t = self.clock - timedelta(days=r.randint(3, 12))
        statuses = ["delivered", "delivered", "shipped", "in_transit", "delivered", "processing", "returned"]
        for i in range(n):
            name, (lo, hi), refs = products[i]
            items = [(name, refs, (lo, hi), 1)]
            if r.random() < 0.35:  # a second line item
                n2, bounds2, refs2 = products[n + r.randrange(3)]
                items.append((n2, refs2, bounds2, r.choice([1, 1, 2])))
            while True:
                priced = [(nm, rf, _price(r, *b), q) for nm, rf, b, q in items]
                o = _Order("", priced, t, "", "", "", "")
                vals = {_money(p) for _, _, p, _ in priced} | {_money(o.total)}
                if int(round(o.total * 100)) % 10 and not vals & prices and len(vals) == len(priced) + (len(priced) > 1):
                    prices |= vals
                    break
            oid = self.unique(self.fmt_order)
            self.facts.track(oid)
            self.facts.track(t.strftime("%Y-%m-%d"))
            for v in vals:
                self.facts.track(v)
            carrier = r.choice(_CARRIERS)
            tracking = self.unique(lambda rr: rr.choice([
                "1Z" + _alnum(rr, 16, string.ascii_uppercase + string.digits), "94" + _digits(rr, 20),
                _alnum(rr, 2, string.ascii_uppercase) + _digits(rr, 9) + "GB", _digits(rr, 12)]))
            payment = r.choice(["visa •••• " + _digits(r, 4), "mastercard •••• " + _digits(r, 4), "paypal",
                                "amex •••• " + _digits(r, 4), "apple_pay"])
            status = statuses[i % len(statuses)] if i else "delivered"
            events, et = [], t + timedelta(hours=r.randint(6, 30))
            steps = ["Label created", "Picked up", "Departed facility", "Arrived at hub", "In transit",
                     "Out for delivery", "Delivered"]
            n_ev = {"delivered": 7, "shipped": r.randint(2, 4), "in_transit": r.randint(3, 5)}.get(status, 0)
            for st in steps[:n_ev]:
                events.append({"time": _iso(et), "status": st, "location": r.choice(_CITIES)[0]})
                et += timedelta(hours=r.randint(3, 40))
            orders.append(_Order(oid, priced, t, status, carrier, tracking, payment, events))
            t -= timedelta(days=r.randint(2, 40), hours=r.randint(0, 23))
        r.shuffle(orders)
        return orders

    def stale(self, items: list[Any], fact: Callable[[Any], str], k: int = 1) -> list[Any]:
        """`k` of `items` whose fact was seen least recently (ties and near-ties broken at random)."""
        def last(x: Any) -> int:
            hs = self.facts.holders.get(fact(x), [])
            return hs[-1][0] if hs else -1
        ranked = sorted(items, key=lambda x: (last(x), self.rng.random()))
        pool = ranked[: k + 1]
        return self.rng.sample(pool, k)

    def ref(self, order: _Order) -> str:
        return self.rng.choice(order.ref)

    # ---------------------------------------------------------------- knowledge base
    def _kb_call(self, query: str, topic: str | None = None) -> None:
        r = self.rng
        n = r.randint(self.cfg.min_kb_articles, self.cfg.max_kb_articles)
        arts = []
        for i in range(n):
            sents = r.sample(_KB_FILLER, r.randint(5, 12))
            if i == 0 and topic:
                sents = _KB_TOPICS[topic][2] + sents[:3]
            arts.append({"id": f"KB-{_digits(r, 4)}", "title": r.choice(_KB_TITLES),
                         "score": round(0.9 - 0.08 * i - r.random() * 0.05, 3),
                         "snippet": " ".join(sents)})
        r.shuffle(arts) if r.random() < 0.3 else None
        self.call_retrying("kb", {"query": query, "top_k": n}, {"results": arts, "total": n + r.randint(0, 40)})
