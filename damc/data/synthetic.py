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
"""

from __future__ import annotations

import json
import logging
import random
import re
import string
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, Iterator

from tqdm import tqdm

from damc.cards import card_id
from damc.data.episodes import Episode

logger = logging.getLogger(__name__)


@dataclass
class SyntheticConfig:
    """Hyperparameters of the synthetic support-episode generator."""

    min_messages: int = 40  # hard lower bound on messages per episode (system message included)
    max_messages: int = 150  # hard upper bound on messages per episode
    min_threads: int = 2  # customer issues (refund, delivery, contact change) per episode, at least
    max_threads: int = 3  # ... and at most
    min_fillers: int = 2  # filler turns (small talk, KB questions, other orders) between thread steps, at least
    max_fillers: int = 4  # ... and at most (also capped by the message budget)
    p_tool_error: float = 0.12  # chance that a tool call fails transiently (500/503/429/timeout) and is retried
    p_repeat_key: float = 0.25  # chance the assistant restates an id/value in a reply (redundant copy of a fact)
    p_parallel: float = 0.3  # chance a question about two other orders is answered with two parallel calls
    p_change_method: float = 0.7  # chance the customer changes the refund method after first asking for one
    min_kb_articles: int = 3  # knowledge-base results per search, at least
    max_kb_articles: int = 6  # ... and at most
    domain: str = "support"  # Episode.domain
    id_prefix: str = "sup"  # episode ids are f"{id_prefix}-{seed}-{i:05d}"


# ============================================================================ vocabulary

_FIRST = ["Maya", "Jonas", "Priya", "Tomás", "Aisha", "Liam", "Chen", "Olga", "Kwame", "Sofia", "Ravi", "Emma",
          "Hiroshi", "Fatima", "Lucas", "Ingrid", "Diego", "Amara", "Noah", "Yuki", "Zanele", "Mateo", "Hannah",
          "Omar", "Elif", "Sean", "Leila", "Bruno", "Grace", "Arjun", "Nadia", "Felix", "Camille", "Tariq",
          "Rosa", "Viktor", "Mei", "Daniel", "Ana", "Kofi", "Julia", "Samir", "Freya", "Andrés", "Ngozi",
          "Patrick", "Lena", "Ibrahim", "Chloe", "Dmitri", "Isabela", "Marcus", "Sana", "Teodor", "Wen",
          "Beatriz", "Ethan", "Layla", "Kenji", "Martina"]
_LAST = ["Okafor", "Lindqvist", "Ramirez", "Nakamura", "Haddad", "O'Brien", "Kowalski", "Mensah", "Fischer",
         "Patel", "Moreau", "Johansson", "Silva", "Nguyen", "Abernathy", "Costa", "Petrov", "Tanaka",
         "Greenberg", "Achebe", "Rossi", "Dubois", "Kaur", "Schmidt", "Alvarez", "Murphy", "Yilmaz", "Park",
         "Van der Berg", "Santos", "Ivanova", "MacLeod", "Banerjee", "Hoffman", "Otieno", "Larsen", "Ortiz",
         "Chowdhury", "Walsh", "Bianchi", "Novak", "Adeyemi", "Fernández", "Holm", "Kim", "Whitaker",
         "Zhou", "Castillo", "Brennan", "Sato"]
_MAIL_DOMAINS = ["gmail.com", "outlook.com", "yahoo.com", "proton.me", "icloud.com", "fastmail.com", "hey.com",
                 "web.de", "orange.fr", "hotmail.co.uk"]
_WORK_DOMAINS = ["fernhill.co", "brightpath.io", "kestrel-labs.com", "meridianhealth.org", "atlasfreight.net",
                 "quarrystudio.com", "lumenlegal.com", "northgate.edu", "pinecrest-dental.com", "solent.ac.uk"]
_STREETS = ["Larkspur Ave", "Harbour Rd", "Elm Street", "Wexford Close", "Calle Mayor", "Birchwood Dr",
            "Old Mill Lane", "Kingsway", "Marigold Ct", "Riverside Pkwy", "Quarry Hill Rd", "Station Road",
            "Juniper Way", "Lakeview Terrace", "Chestnut St", "Beacon St", "Sycamore Blvd", "Foxglove Row",
            "Granite Ave", "Union Square"]
_CITIES = [("Denver", "CO", "802{:02d}"), ("Austin", "TX", "787{:02d}"), ("Portland", "OR", "972{:02d}"),
           ("Columbus", "OH", "432{:02d}"), ("Raleigh", "NC", "276{:02d}"), ("Madison", "WI", "537{:02d}"),
           ("Tucson", "AZ", "857{:02d}"), ("Albany", "NY", "122{:02d}"), ("Boise", "ID", "837{:02d}"),
           ("Richmond", "VA", "232{:02d}"), ("Sacramento", "CA", "958{:02d}"), ("Omaha", "NE", "681{:02d}"),
           ("Toronto", "ON", "M4{:02d}"), ("Leeds", "", "LS{:02d}"), ("Bristol", "", "BS{:02d}"),
           ("Galway", "", "H91 {:02d}")]
_BRANDS = ["Northwind Outfitters", "Bluebird Home", "Kettle & Kin", "Parcelpoint", "Verdant Goods",
           "Lumen Electronics", "Harbor & Hearth", "Tidewater Supply", "Copperleaf", "Brightwell Market",
           "Saltmarsh Trading Co.", "Orchard Lane"]

# (name, (price_lo, price_hi), short references a customer would use)
_PRODUCTS = [
    ("Corvel 1.7L Electric Kettle", (29, 89), ["kettle", "electric kettle"]),
    ("Aldis Pro Countertop Blender", (59, 189), ["blender"]),
    ("Fenwick Noise-Cancelling Headphones", (79, 329), ["headphones", "noise cancelling headphones"]),
    ("Tallis Memory Foam Pillow (2-pack)", (25, 79), ["pillows", "memory foam pillows"]),
    ("Orla 6-Quart Pressure Cooker", (69, 159), ["pressure cooker", "instant pot thing"]),
    ("Brisk Trail Running Shoes", (59, 179), ["running shoes", "trainers", "shoes"]),
    ("Harrow Cast Iron Skillet 12\"", (22, 69), ["skillet", "cast iron pan", "frying pan"]),
    ("Pemberly Linen Duvet Cover (Queen)", (49, 149), ["duvet cover", "bedding"]),
    ("Voss 27\" 4K Monitor", (189, 459), ["monitor", "4k monitor", "screen"]),
    ("Kinetic Ergonomic Office Chair", (149, 499), ["office chair", "desk chair", "chair"]),
    ("Quill Mechanical Keyboard", (49, 179), ["keyboard", "mechanical keyboard"]),
    ("Sable Wireless Mouse", (15, 69), ["mouse", "wireless mouse"]),
    ("Ember Smart Thermostat", (99, 249), ["thermostat", "smart thermostat"]),
    ("Lyra Bluetooth Speaker", (29, 149), ["speaker", "bluetooth speaker"]),
    ("Marlow Waterproof Rain Jacket", (59, 219), ["rain jacket", "jacket", "raincoat"]),
    ("Atlas 40L Hiking Backpack", (49, 189), ["backpack", "hiking pack", "rucksack"]),
    ("Petal Ceramic Dinner Set (16 pc)", (49, 139), ["dinner set", "plates", "dishes"]),
    ("Gale Cordless Stick Vacuum", (119, 399), ["vacuum", "stick vacuum", "hoover"]),
    ("Nimbus Air Purifier", (89, 299), ["air purifier", "purifier"]),
    ("Rook Espresso Machine", (149, 649), ["espresso machine", "coffee machine"]),
    ("Tern Stainless Water Bottle", (12, 39), ["water bottle", "bottle"]),
    ("Willow Yoga Mat", (19, 89), ["yoga mat", "mat"]),
    ("Cinder Non-Stick Cookware Set", (79, 299), ["pan set", "cookware set", "pots and pans"]),
    ("Halcyon Weighted Blanket", (59, 189), ["weighted blanket", "blanket"]),
    ("Pico Kids' Tablet Case", (12, 39), ["tablet case", "ipad case"]),
    ("Strata Standing Desk Frame", (199, 599), ["standing desk", "desk frame", "desk"]),
    ("Ferro Electric Toothbrush", (29, 149), ["toothbrush", "electric toothbrush"]),
    ("Oakridge Leather Wallet", (25, 95), ["wallet", "leather wallet"]),
    ("Glint LED Desk Lamp", (19, 89), ["desk lamp", "lamp"]),
    ("Meadow Organic Cotton Sheets", (59, 179), ["sheets", "bed sheets", "cotton sheets"]),
    ("Solis Smartwatch", (99, 399), ["smartwatch", "watch"]),
    ("Bramble Dog Bed (Large)", (39, 129), ["dog bed", "pet bed"]),
    ("Coda Portable Charger 20000mAh", (25, 79), ["power bank", "portable charger", "charger"]),
    ("Fable Hardcover Notebook Set", (12, 35), ["notebooks", "notebook set"]),
    ("Arbor Garden Hose 50ft", (25, 79), ["garden hose", "hose"]),
    ("Kiln Stoneware Mug Set", (19, 59), ["mugs", "mug set"]),
    ("Drift Ceiling Fan Remote", (15, 45), ["fan remote", "remote"]),
    ("Loom Knit Cardigan", (39, 129), ["cardigan", "sweater", "jumper"]),
    ("Vantage Dashcam", (49, 199), ["dashcam", "dash cam"]),
    ("Pulse Fitness Tracker", (39, 149), ["fitness tracker", "tracker", "fitbit-type band"]),
    ("Haven Bath Towel Set", (29, 99), ["towels", "towel set"]),
    ("Echo Ridge Camping Tent (4P)", (119, 399), ["tent", "camping tent"]),
]
_CARRIERS = ["UPS", "FedEx", "USPS", "DHL", "Royal Mail", "Canada Post", "DPD", "OnTrac"]

_ERROR_REASONS = [("REFUND_LIMIT_EXCEEDED", "Refund amount {amt} exceeds the agent approval limit of {lim}"),
                  ("PAY-{n}", "Refund requires manual approval: amount {amt} over limit {lim}"),
                  ("E_APPROVAL_REQUIRED", "Supervisor approval required for refunds above {lim}"),
                  ("RISK_HOLD_{n2}", "Refund blocked by risk review (amount {amt}, limit {lim})"),
                  ("ERR_MANUAL_REVIEW", "Payment provider flagged refund of {amt} for manual review"),
                  ("RFND-{n}", "Refund of {amt} declined: over per-agent limit ({lim})")]

_TEAMS = ["billing", "payments", "tier2", "supervisor", "finance_ops"]
_METHODS = ["original payment method", "store credit", "bank transfer", "gift card"]


# ============================================================================ small helpers

def _iso(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def _alnum(rng: random.Random, n: int, chars: str = string.ascii_lowercase + string.digits) -> str:
    return "".join(rng.choice(chars) for _ in range(n))


def _digits(rng: random.Random, n: int) -> str:
    return str(rng.randint(1, 9)) + "".join(rng.choice(string.digits) for _ in range(n - 1))


def _price(rng: random.Random, lo: float, hi: float) -> float:
    """A price whose JSON repr equals its 2-decimal form (cents never end in 0)."""
    cents = rng.choice([c for c in range(1, 100) if c % 10])
    return round(rng.randint(int(lo), int(hi)) + cents / 100, 2)


def _money(x: float) -> str:
    return f"{x:.2f}"


# A fact token is delimited by anything that is not part of an id (ids may hold '-' and '_').
def _fact_re(fact: str) -> re.Pattern[str]:
    return re.compile(r"(?<![A-Za-z0-9_\-])" + re.escape(fact) + r"(?![A-Za-z0-9_\-])")


# id formats: one style per entity per episode, so formats vary across episodes but not within one
_ORDER_FMTS: list[Callable[[random.Random], str]] = [
    lambda r: _digits(r, 5),
    lambda r: f"{_digits(r, 3)}-{_digits(r, 7)}",
    lambda r: f"ORD-{r.randint(2023, 2025)}-{r.randint(0, 99999):05d}",
    lambda r: _alnum(r, 2, string.ascii_uppercase) + _digits(r, 6),
    lambda r: _digits(r, 10),
    lambda r: f"SO{_digits(r, 6)}",
    lambda r: f"{_digits(r, 4)}-{_alnum(r, 3, string.ascii_uppercase)}",
]
_USER_FMTS: list[Callable[[random.Random], str]] = [
    lambda r: f"U-{_digits(r, 5)}",
    lambda r: f"usr_{_alnum(r, 8)}",
    lambda r: _digits(r, 7),
    lambda r: f"CUST-{_digits(r, 4)}-{_alnum(r, 2, string.ascii_uppercase)}",
    lambda r: f"cus_{_alnum(r, 14, string.ascii_letters + string.digits)}",
    lambda r: f"C{_digits(r, 8)}",
]
_TICKET_FMTS: list[Callable[[random.Random], str]] = [
    lambda r: f"TCK-{_digits(r, 5)}",
    lambda r: f"SR-{r.randint(0, 999999):06d}",
    lambda r: f"INC{r.randint(0, 9999999):07d}",
    lambda r: _digits(r, 6),
    lambda r: f"CASE-{r.randint(23, 25)}{r.randint(1, 12):02d}-{_digits(r, 4)}",
    lambda r: f"ZD-{_digits(r, 5)}",
]
_REFUND_FMTS: list[Callable[[random.Random], str]] = [
    lambda r: f"re_{_alnum(r, 16, string.ascii_letters + string.digits)}",
    lambda r: f"RF-{_digits(r, 5)}",
    lambda r: f"RMA{_digits(r, 6)}",
    lambda r: f"REF-{_alnum(r, 6, string.ascii_uppercase + string.digits)}",
]

# canonical tool -> (name aliases, description, properties, required)
_TOOL_SPECS: dict[str, tuple[list[str], str, dict[str, Any], list[str]]] = {
    "kb": (["search_knowledge_base", "kb_search", "search_help_center"],
           "Search the help-center knowledge base and return the best matching articles.",
           {"query": {"type": "string", "description": "Free-text search query."},
            "top_k": {"type": "integer", "description": "Maximum number of articles to return."}}, ["query"]),
    "user": (["lookup_user", "find_customer", "get_customer"],
             "Look up a customer account by email, phone, name or id.",
             {"email": {"type": "string"}, "phone": {"type": "string"},
              "name": {"type": "string", "description": "Full name; may return several matches."},
              "user_id": {"type": "string"}}, []),
    "orders": (["list_orders", "get_customer_orders", "search_orders"],
               "List a customer's recent orders (newest first).",
               {"user_id": {"type": "string"},
                "status": {"type": "string", "enum": ["any", "open", "delivered", "returned"]},
                "limit": {"type": "integer"}}, ["user_id"]),
    "order": (["get_order", "lookup_order", "get_order_details"],
              "Get one order with items, payment and shipment tracking.",
              {"order_id": {"type": "string"}}, ["order_id"]),
    "create_ticket": (["create_ticket", "open_case", "create_support_ticket"],
                      "Open a support ticket for the customer.",
                      {"user_id": {"type": "string"}, "order_id": {"type": "string"},
                       "subject": {"type": "string"},
                       "priority": {"type": "string", "enum": ["low", "normal", "high", "urgent"]}},
                      ["user_id", "subject"]),
    "get_ticket": (["get_ticket", "get_case", "fetch_ticket"], "Get a ticket with its status and history.",
                   {"ticket_id": {"type": "string"}}, ["ticket_id"]),
    "update_ticket": (["update_ticket_status", "set_ticket_status", "update_case"],
                      "Change a ticket's status and add an internal note.",
                      {"ticket_id": {"type": "string"},
                       "status": {"type": "string",
                                  "enum": ["open", "pending", "escalated", "resolved", "closed"]},
                       "note": {"type": "string"}}, ["ticket_id", "status"]),
    "refund": (["issue_refund", "create_refund", "refund_order"],
               "Refund all or part of an order.",
               {"order_id": {"type": "string"},
                "amount": {"type": "number", "description": "Amount in the order currency."},
                "method": {"type": "string", "enum": _METHODS},
                "reason": {"type": "string"}}, ["order_id", "amount", "method"]),
    "refund_status": (["get_refund_status", "check_refund", "lookup_refund"], "Status of a refund.",
                      {"refund_id": {"type": "string"}}, ["refund_id"]),
    "escalate": (["escalate_ticket", "escalate_case", "transfer_to_team"],
                 "Escalate a ticket to another team with the blocking error.",
                 {"ticket_id": {"type": "string"}, "team": {"type": "string", "enum": _TEAMS},
                  "error_code": {"type": "string", "description": "Error code that blocked the agent."},
                  "summary": {"type": "string"}}, ["ticket_id", "team"]),
    "replace": (["create_replacement_order", "ship_replacement", "reship_order"],
                "Ship a free replacement for an order.",
                {"order_id": {"type": "string"}, "shipping_address": {"type": "string"},
                 "expedited": {"type": "boolean"}}, ["order_id", "shipping_address"]),
    "email": (["send_email", "send_customer_email", "email_customer"], "Send an email to the customer.",
              {"to": {"type": "string"}, "subject": {"type": "string"}, "body": {"type": "string"}},
              ["to", "subject", "body"]),
}


def _pick(rng: random.Random, options: list[str], **kw: Any) -> str:
    return rng.choice(options).format(**kw)


def _casual(rng: random.Random, text: str) -> str:
    """Occasionally make a user message look typed in a hurry."""
    r = rng.random()
    if r < 0.15:
        text = text[0].lower() + text[1:]
    if r < 0.1 and text.endswith((".", "!")):
        text = text[:-1]
    if rng.random() < 0.05:
        text = text.replace(" you ", " u ").replace("please", "pls")
    return text


# ============================================================================ world objects

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


class _Facts:
    """Where each tracked fact appears: fact -> [(card position, card_id)], in order of appearance."""

    def __init__(self) -> None:
        self.auto: dict[str, re.Pattern[str]] = {}  # facts found by scanning card text (ids, codes, emails)
        self.holders: dict[str, list[tuple[int, str]]] = {}

    def track(self, fact: str) -> None:
        if fact not in self.auto:
            self.auto[fact] = _fact_re(fact)
            self.holders.setdefault(fact, [])

    def note(self, fact: str, pos: int, cid: str) -> None:
        lst = self.holders.setdefault(fact, [])
        if (pos, cid) not in lst:
            lst.append((pos, cid))

    def scan(self, text: str, pos: int, cid: str) -> None:
        for fact, pat in self.auto.items():
            if pat.search(text):
                self.note(fact, pos, cid)


# ============================================================================ the episode builder

class _Episode:
    """Builds one episode: message emission, fact tracking and key-card bookkeeping."""

    def __init__(self, rng: random.Random, cfg: SyntheticConfig, episode_id: str):
        self.rng, self.cfg, self.eid = rng, cfg, episode_id
        self.messages: list[dict[str, Any]] = []
        self.facts = _Facts()
        self.turn_start = 0
        self.key_card_ids: dict[str, list[str]] = {}
        self.key_facts: dict[str, list[str]] = {}
        self.repeated: list[int] = []
        self.clock = datetime(2024, 1, 1, tzinfo=timezone.utc) + timedelta(
            days=rng.randint(0, 700), hours=rng.randint(7, 20), minutes=rng.randint(0, 59),
            seconds=rng.randint(0, 59))
        self.names = {k: rng.choice(v[0]) for k, v in _TOOL_SPECS.items()}
        self.compact_json = rng.random() < 0.6  # some backends emit compact JSON, some spaced
        self._used: set[str] = set()
        self._ncall = 0

    # ---------------------------------------------------------------- ids
    def unique(self, make: Callable[[random.Random], str]) -> str:
        while True:
            v = make(self.rng)
            if v not in self._used and not any(v in u or u in v for u in self._used):
                self._used.add(v)
                return v

    # ---------------------------------------------------------------- time
    def tick(self, lo: float, hi: float) -> str:
        self.clock += timedelta(seconds=self.rng.uniform(lo, hi))
        return _iso(self.clock)

    # ---------------------------------------------------------------- emission
    def system(self, text: str) -> None:
        self.messages.append({"role": "system", "content": text})

    def user(self, text: str, holds: tuple[str, ...] = (), gap: tuple[float, float] = (15, 240),
             chatty: float = 0.0) -> None:
        """A user message; `holds` are explicit facts it carries; `chatty` = chance of a small-talk preamble."""
        i = len(self.messages)
        if chatty and self.rng.random() < chatty:
            joiner = self.rng.choice(["Anyway,", "So,", "Right —", "OK.", ""])
            if joiner.endswith((",", "—")):
                text = text[0].lower() + text[1:]
            text = " ".join(x for x in (self.rng.choice(_SMALL_USER), joiner, text) if x)
        text = _casual(self.rng, text)
        self.messages.append({"role": "user", "content": text, "timestamp": self.tick(*gap)})
        self.turn_start = i
        cid = card_id(self.eid, i)
        self.facts.scan(text, i, cid)
        for f in holds:
            assert f in text, (f, text)
            self.facts.note(f, i, cid)

    def say(self, text: str, needs: tuple[str, ...] = (), holds: tuple[str, ...] = ()) -> None:
        """An assistant text reply (a decision); `needs` are facts the reply depends on."""
        k = len(self.messages)
        self._decide(k, needs)
        for f in needs:
            assert f in text, (f, text)
        self.messages.append({"role": "assistant", "content": text, "timestamp": self.tick(2, 12)})
        cid = card_id(self.eid, k)
        self.facts.scan(text, k, cid)
        for f in holds:
            self.facts.note(f, k, cid)

    def calls(self, calls: list[tuple[str, dict[str, Any], Any]], needs: tuple[str, ...] = (),
              holds: tuple[str, ...] = ()) -> None:
        """One assistant message with parallel tool calls `(tool, args, result)` and their tool messages."""
        k = len(self.messages)
        self._decide(k, needs)
        arg_text = json.dumps([c[1] for c in calls], ensure_ascii=False)
        for f in needs:
            assert f in arg_text, (f, arg_text)
        sep = (",", ":") if self.compact_json else (", ", ": ")
        tcs = []
        for _ in calls:
            self._ncall += 1
            tcs.append({"id": "call_" + _alnum(self.rng, 24, string.ascii_letters + string.digits),
                        "type": "function", "function": {"name": "", "arguments": ""}})
        for tc, (tool, args, _) in zip(tcs, calls):
            tc["function"] = {"name": self.names[tool], "arguments": json.dumps(args, ensure_ascii=False)}
        self.messages.append({"role": "assistant", "content": None, "tool_calls": tcs,
                              "timestamp": self.tick(1, 6)})
        for j, (tc, (tool, args, result)) in enumerate(zip(tcs, calls)):
            content = result if isinstance(result, str) else json.dumps(result, ensure_ascii=False, separators=sep)
            self.messages.append({"role": "tool", "tool_call_id": tc["id"], "content": content,
                                  "timestamp": self.tick(0.3, 4)})
            cid = card_id(self.eid, k, j)
            if tool != "kb":  # KB articles are generic text; never count them as holding a customer's fact
                self.facts.scan(tc["function"]["arguments"] + " " + content, k, cid)
            for f in holds:
                if f in tc["function"]["arguments"]:
                    self.facts.note(f, k, cid)

    def call(self, tool: str, args: dict[str, Any], result: Any, needs: tuple[str, ...] = (),
             holds: tuple[str, ...] = ()) -> None:
        self.calls([(tool, args, result)], needs, holds)

    def call_retrying(self, tool: str, args: dict[str, Any], result: Any, needs: tuple[str, ...] = (),
                      holds: tuple[str, ...] = ()) -> None:
        """A call that may fail transiently first; the agent retries with the same arguments."""
        n_fail = 0
        while self.rng.random() < self.cfg.p_tool_error and n_fail < 2:
            self.call(tool, args, self.transient_error(), needs, holds)
            n_fail += 1
            if self.rng.random() < 0.15:
                self.say(_pick(self.rng, _SAY_HICCUP))
        self.call(tool, args, result, needs, holds)

    def transient_error(self) -> Any:
        r = self.rng
        kind = r.randrange(7)
        if kind == 0:
            return {"error": {"code": 500, "message": "Internal Server Error"}}
        if kind == 1:
            return {"status": "error", "code": 503, "message": "Service Unavailable: upstream dependency timed out"}
        if kind == 2:
            return {"error": "RateLimitError: too many requests", "code": 429, "retry_after": r.randint(1, 30)}
        if kind == 3:
            return "HTTP 502 Bad Gateway"
        if kind == 4:
            return {"error": {"type": "TimeoutError", "message": f"upstream did not respond within {r.choice([10, 15, 30])}s"}}
        if kind == 5:
            return "ConnectionResetError: [Errno 104] Connection reset by peer"
        return {"ok": False, "error": {"code": 504, "message": "Gateway Timeout", "request_id": _alnum(r, 12)}}

    # ---------------------------------------------------------------- key bookkeeping
    def _decide(self, k: int, needs: tuple[str, ...]) -> None:
        u = self.turn_start
        keep_facts, cards, repeated = [], [], False
        for f in needs:
            hs = self.facts.holders.get(f, [])
            if any(u <= pos < k for pos, _ in hs):
                continue  # visible in the current turn: not a memory decision for this fact
            before = [cid for pos, cid in hs if pos < u]
            assert before, f"{self.eid}@{k}: fact {f!r} needed but never seen"
            keep_facts.append(f)
            repeated |= len(before) > 1
            cards += [c for c in before if c not in cards]
        if keep_facts:
            self.key_card_ids[str(k)] = cards
            self.key_facts[str(k)] = keep_facts
            if repeated:
                self.repeated.append(k)

    def maybe_repeat(self) -> bool:
        return self.rng.random() < self.cfg.p_repeat_key


# ============================================================================ phrasings

_SAY_HICCUP = ["Sorry, our system is being a bit slow — trying that again.",
               "Hmm, that lookup timed out on my side. One more try.",
               "Apologies, I hit a temporary error. Retrying now.",
               "Bear with me a moment, the tool didn't respond properly.",
               "That didn't go through on the first attempt; let me try again."]
_GREET = ["Hi there,", "Hello!", "Hey,", "Good morning.", "Hi,", "Hello, hoping you can help.",
          "Hi — quick question, well maybe not so quick.", "Evening!", "Hiya.", "Hello support team,"]
_OPEN_REASON = ["I've got a couple of problems with recent orders.", "I need help with a few things on my account.",
                "something went wrong with my last orders and I'm getting frustrated",
                "I have an issue with an order and a question about another one.",
                "I'm having some trouble with stuff I bought from you.",
                "a couple of my orders haven't gone the way they should."]
_ID_EMAIL = ["My email is {email}.", "The account is under {email}.", "you can find me with {email}",
             "I signed up with {email} if that helps.", "Email on the account: {email}"]
_ID_PHONE = ["My phone number on file is {phone}.", "Try my number, {phone}.",
             "It should be under the phone number {phone}."]
_ID_NAME = ["Name's {name}, I'm in {city}.", "I'm {name} from {city}.",
            "The account is in my name, {name} — {city}."]
_SAY_ORDERS_NO_ID = [
    "Thanks, {first}. I've found your account and I can see {n} recent orders, including {refs}. What can I help with first?",
    "Got it — you're verified, {first}. I'm looking at your order history now ({n} orders, e.g. {refs}). Which issue shall we start with?",
    "Thanks for waiting. Your account is pulled up and I can see your recent purchases ({refs} among them). Tell me what went wrong.",
    "I have your account open, {first}. There are {n} orders in the last few months. Which one is giving you trouble?"]
_SMALL_USER = ["Sorry, my cat just walked across the keyboard 😅", "How's your day going, by the way?",
               "Is it busy today? The wait was a bit long.", "Quick aside, are you a bot or a person?",
               "Ugh, it's been one of those weeks.", "Hang on, someone's at the door. Back in a sec.",
               "ok I'm back, sorry about that", "Thanks for being patient with me, honestly.",
               "By the way the website looks different, did you redesign it?",
               "lol my kid is asking who I'm typing to", "It's raining here again, typical.",
               "Do you work weekends too?"]
_SMALL_SAY = ["No problem at all — take your time.", "Ha, it happens! I'm here whenever you're ready.",
              "Doing well, thanks for asking! Let's keep going.", "No worries at all.",
              "I'm an automated assistant, but I can loop in a colleague if you ever need one.",
              "Thanks for your patience too. Let's keep sorting this out.",
              "Sorry about the wait today — we're busier than usual.",
              "Yes, the site got a refresh last month. Let me know if anything is hard to find."]

_KB_TOPICS = {
    "returns": ("What's your return window for {cat}?", "return policy {cat}",
                ["Items can be returned within 30 days of delivery in original condition.",
                 "Final-sale and clearance items cannot be returned.",
                 "Return shipping is free for damaged or defective items.",
                 "Opened hygiene products are not eligible for return."]),
    "warranty": ("Does the {cat} come with a warranty?", "warranty coverage {cat}",
                 ["Most electronics carry a 12-month limited manufacturer warranty.",
                  "Warranty claims require proof of purchase and the serial number.",
                  "Accidental damage is not covered by the standard warranty."]),
    "shipping": ("How long does standard shipping normally take?", "standard shipping times",
                 ["Standard shipping takes 3–7 business days within the mainland.",
                  "Expedited shipping takes 1–2 business days when ordered before 2 pm.",
                  "Remote areas may add up to 3 business days."]),
    "price": ("If something I bought drops in price, do you match it?", "price adjustment price match",
              ["Price adjustments are available within 14 days of purchase.",
               "We do not match marketplace sellers or flash sales."]),
    "intl": ("Can you ship to another country if I'm travelling?", "international shipping",
             ["We ship to 38 countries; duties are charged at checkout.",
              "International orders cannot be redirected once dispatched."]),
    "gift": ("Can I add gift wrap to an order that's already placed?", "gift wrap existing order",
             ["Gift wrap can be added until the order enters fulfilment.",
              "Gift receipts hide prices and can be emailed separately."]),
    "points": ("How do the loyalty points work again?", "loyalty points rewards",
               ["Members earn 1 point per dollar spent; 100 points equal a $5 reward.",
                "Points expire after 12 months without account activity."]),
}
_KB_ORDER_QUESTIONS = {
    "returns": ["Could I still return the {ref} if I wanted to?", "Am I still inside the return window for the {ref}?",
                "If I send back the {ref}, do I get everything back?"],
    "warranty": ["Does the {ref} I bought still have warranty?", "How long is the warranty on my {ref}?",
                 "Is the {ref} covered if it breaks next month?"],
    "shipping": ["How long does shipping usually take? Asking about the {ref}.",
                 "When should I expect the {ref}, normally?"],
    "price": ["The {ref} is cheaper on your site now — can I get the difference back?",
              "I saw the {ref} on sale this week, do you do price adjustments?"],
    "gift": ["Can I still add gift wrap to the {ref} order?", "Is it too late to make the {ref} a gift order?"],
}
_KB_FILLER = ["Customers should keep their order confirmation email for reference.",
              "Our support team is available 7 days a week from 8 am to 10 pm local time.",
              "Some exceptions apply to items purchased from third-party sellers on our marketplace.",
              "Please allow additional processing time during holiday periods and promotional events.",
              "Bulky items may be delivered by a freight partner who will call to schedule a time slot.",
              "This article was last reviewed by the policy team and supersedes earlier guidance.",
              "Store credit is issued as a digital balance and never expires.",
              "Bank transfers may take up to 10 business days depending on the receiving bank.",
              "Refunds to the original payment method usually post within 5–10 business days.",
              "Orders placed with a gift card are refunded to a new gift card.",
              "Items must include all accessories, manuals and packaging to qualify.",
              "For safety reasons, we cannot accept returns of used mattresses or car seats.",
              "If your package shows as delivered but you cannot find it, check with neighbours first.",
              "We may ask for photos of damaged items to help improve our packaging.",
              "Subscriptions can be paused or cancelled at any time from the account page.",
              "Promotional codes cannot be applied retroactively to completed orders.",
              "In some regions, local consumer law grants additional rights which are not affected.",
              "Exchanges are processed as a return plus a new order at current prices.",
              "Carrier delays caused by weather are outside our control but we will help trace parcels.",
              "Assembly services are offered through a partner in selected cities only."]
_KB_TITLES = ["Returns & refunds policy", "Warranty information", "Shipping options and delivery times",
              "Price adjustments", "International orders", "Gift services", "Loyalty programme FAQ",
              "Damaged or defective items", "Missing packages", "Payment methods we accept",
              "Changing or cancelling an order", "Account security tips", "Store credit explained",
              "Large item delivery", "Product recalls", "Subscriptions and auto-delivery"]


# ============================================================================ the simulation

class _Simulation(_Episode):
    """The support conversation: opening, interleaved issue threads, filler turns, closing."""

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

    # ---------------------------------------------------------------- threads
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
        r, c = self.rng, self.customer
        ref = self.ref(order)
        problem = r.choice(["arrived damaged", "stopped working after a few days", "is the wrong size",
                            "came with parts missing", "isn't what the listing showed", "was cracked out of the box"])
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
        yield
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
        yield
        method = "original payment method"
        if r.random() < self.cfg.p_change_method:
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
            yield
        self.user(r.choice(["OK, please go ahead and process that refund now.", "Alright, go ahead with the refund.",
                            "Let's do the refund then.", "Please submit it whenever you're ready.",
                            "Yep go ahead, refund it"]))
        if r.random() < 0.5:  # agents often re-open the case before acting on it
            self.call_retrying("get_ticket", {"ticket_id": tid},
                               {"ticket_id": tid, "status": "open", "order_id": order.order_id,
                                "subject": f"{order.items[0][0]} {problem}"}, needs=(tid,))
        needs = (order.order_id, _money(amount)) + ((method,) if method != "original payment method" else ())
        args = {"order_id": order.order_id, "amount": amount, "method": method,
                "reason": r.choice(["damaged", "defective", "not as described", "customer_request"])}
        limit = float(r.choice([100, 150, 200, 250]))
        if amount > limit and r.random() < 0.7:
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
        else:
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
        r, c = self.rng, self.customer
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

    # ---------------------------------------------------------------- fillers
    def _small_talk(self) -> None:
        self.user(self.rng.choice(_SMALL_USER))
        self.say(self.rng.choice(_SMALL_SAY))

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

    # ---------------------------------------------------------------- output
    def tools(self) -> list[dict[str, Any]]:
        out = []
        for key, (_, desc, props, req) in _TOOL_SPECS.items():
            out.append({"type": "function", "function": {
                "name": self.names[key], "description": desc,
                "parameters": {"type": "object", "properties": props, "required": req}}})
        return out


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
