"""Vocabulary of the simulated support world and the small random helpers that draw from it.

Names, addresses, brands, products and carriers; refusal codes, teams and refund methods; one id
format per entity per episode (order, user, ticket, refund); the tool schemas with their name aliases;
and the helpers that turn draws from the episode's `random.Random` into ids, prices and phrasings.
Names with a leading underscore are internal to `damc.data.synthetic`.
"""

from __future__ import annotations

import random
import re
import string
from datetime import datetime
from typing import Any, Callable

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
