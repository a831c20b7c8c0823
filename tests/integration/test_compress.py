"""Compression: templates keep every critical atom; the LLM compressor is guarded by them."""

from __future__ import annotations

import json

import pytest

from damc.cards import Card, critical_atoms, encode_messages
from damc.episodes import load_episodes
from damc.runtime.compress import LLMCompressor, TemplateCompressor
from damc.templates import missing_atoms, required_atoms, summarize_result, template_compress


def _tool_card(name, args, result, i=1):
    msgs = [{"role": "assistant", "content": None, "tool_calls": [{"id": "c", "type": "function",
             "function": {"name": name, "arguments": json.dumps(args)}}]},
            {"role": "tool", "tool_call_id": "c", "content": result if isinstance(result, str) else json.dumps(result)}]
    return encode_messages(msgs, "ep", start_index=i)[0]


ERR = _tool_card("get_order", {"order_id": "88412"}, {"status": "error", "code": 500, "message": "Internal Server Error"})
OK = _tool_card("get_weather", {"city": "Beijing", "date": "2023-10-28"}, {"status": "success", "weather": "sunny", "temp_max": 22})


def test_templates_match_the_seed_examples():
    assert template_compress(ERR) == "✗ get_order(order_id=88412) failed: 500 Internal Server Error"
    assert template_compress(OK) == "✓ get_weather(city=Beijing, date=2023-10-28) → weather=sunny, temp_max=22"
    (line,) = TemplateCompressor().compress([ERR])
    assert line.line == "[ep:1:0] ✗ get_order(order_id=88412) failed: 500 Internal Server Error"
    assert {"get_order", "88412", "500"} <= required_atoms(ERR)


def test_json_summary_keeps_ids_and_truncates_long_text():
    result = {"items": [{"id": f"SKU-{i}", "title": "x" * 300} for i in range(10)], "order_id": "A-77", "big": "y" * 500}
    text, ids = summarize_result(result)
    assert "order_id=A-77" in text and "SKU-0" in text and "SKU-2" in text and "+7 more" in text
    assert "x" * 100 not in text and "y" * 100 not in text
    assert set(ids) >= {"A-77", "SKU-0", "SKU-1", "SKU-2"}
    card = _tool_card("list_items", {"cart": "C9"}, result)
    assert missing_atoms(card, template_compress(card)) == []
    assert len(template_compress(card)) < len(card.raw_text) / 3


def test_template_keeps_required_atoms_on_real_episodes():
    eps = load_episodes("data/samples/bfcl_sample.jsonl")
    n = 0
    for ep in eps:
        for card in encode_messages(ep.messages, ep.episode_id):
            line = template_compress(card)
            assert "\n" not in line
            assert missing_atoms(card, line) == [], (card.card_id, line)
            n += 1
    assert n > 20


def test_long_user_text_appends_cut_atoms():
    text = "Please help. " + "blah " * 100 + "My ticket is TK-5521 and the file is report_q3.csv."
    (card,) = encode_messages([{"role": "user", "content": text}], "ep")
    line = template_compress(card)
    assert len(line) < len(text) and "TK-5521" in line and "report_q3.csv" in line


def test_fake_compressor_dropping_error_code_is_rejected():
    fake = LLMCompressor(generate=lambda prompts: ["get_order failed for order 88412 (server error)"] * len(prompts))
    (out,) = fake.compress([ERR])
    assert out.source == "template" and out.rejected == "dropped critical atoms" and out.missing == ["500"]
    assert out.text == template_compress(ERR)
    good = LLMCompressor(generate=lambda prompts: ["get_order 88412 failed 500"] * len(prompts))
    (out,) = good.compress([ERR])
    assert out.source == "llm" and out.text == "get_order 88412 failed 500" and out.line.startswith("[ep:1:0] ")
    verbose = LLMCompressor(generate=lambda p: [template_compress(ERR) + " and more words"])
    assert verbose.compress([ERR])[0].rejected == "not shorter than the template"


@pytest.mark.slow
def test_llm_compressor_with_smollm2_is_always_faithful():
    cards = [ERR, _tool_card("search_files", {"pattern": "*.py"}, {"files": ["a.py", "b/c.py"], "count": 2})]
    comp = LLMCompressor("smollm2-135m", max_new_tokens=24)
    out = comp.compress(cards)
    assert len(out) == 2
    for card, c in zip(cards, out):
        assert missing_atoms(card, c.text) == []          # whatever the model wrote, nothing critical is lost
        assert c.source in ("llm", "template") and (c.source == "llm") == (c.rejected is None)
    assert comp.stats["accepted"] + comp.stats["rejected"] == 2


def test_merged_card_atoms_are_kept():
    card = Card.from_dict({**OK.to_dict(), "meta": {"atoms": ["2023-10-29", "Shanghai-7"]}})
    line = template_compress(card)
    assert "2023-10-29" in line and "Shanghai-7" in line
    assert {"2023-10-29", "Shanghai-7"} <= required_atoms(card)
    assert critical_atoms("x") == set()


# ----------------------------------------------------------------------------- field-level lines

from damc.runtime.compress import FieldCompressor  # noqa: E402
from damc.templates import FieldConfig, field_compress, id_shaped, summarize_fields  # noqa: E402

USER = _tool_card("get_user_details", {"user_id": "raj_7340"}, {
    "user_id": "raj_7340", "name": {"first_name": "Raj", "last_name": "Sanchez"}, "email": "raj@example.com",
    "payment_methods": {"credit_card_78": {"source": "credit_card", "id": "credit_card_78", "brand": "visa"},
                        "gift_card_49": {"source": "gift_card", "id": "gift_card_49", "amount": 163.0}},
    "membership": "silver", "note": None, "reservations": ["MZDDS4", "60RX9E", "S5IK51", "OUEA45", "Q69X3R"]})
PRODUCT = _tool_card("get_product_details", {"product_id": "1656367028"}, {
    "name": "Mechanical Keyboard", "product_id": "1656367028", "variants": {
        iid: {"item_id": iid, "options": {"switch": sw, "size": size}, "available": True, "price": 200 + j}
        for j, (iid, sw, size) in enumerate([("9690244451", "clicky", "full"), ("7706410293", "tactile", "80%"),
                                             ("3616838507", "linear", "60%"), ("8484921793", "clicky", "80%")])}})


def test_field_lines_keep_every_id_the_template_drops():
    """The template keeps `*_id` keys and the first list items: the 4th and 5th reservation ids — values a later
    `get_reservation_details` needs — are lost there and kept here, with the dict keyed by its own id said once."""
    tpl = template_compress(USER)
    line = field_compress(USER)
    assert "Q69X3R" not in tpl and "OUEA45" not in tpl
    for rid in ("MZDDS4", "60RX9E", "S5IK51", "OUEA45", "Q69X3R", "credit_card_78", "gift_card_49", "raj_7340"):
        assert rid in line, rid
    assert line.count("credit_card_78") == 1 and "null" not in line and "note" not in line
    assert line.startswith("✓ get_user_details(user_id=raj_7340) → user_id=raj_7340, name{first_name=Raj")
    assert "reservations[MZDDS4, 60RX9E, S5IK51, OUEA45, Q69X3R]" in line
    assert required_atoms(USER) <= {a for a in required_atoms(USER) if a in line}  # every required atom stays


def test_field_lines_choose_the_fields_of_the_record_the_query_names():
    """With room for few non-id fields, the variant whose options the decision query names keeps its options;
    the others keep their ids only. Without a query: shallow fields first, every id still there."""
    cfg = FieldConfig(result_chars=60, focus=False)
    line = summarize_fields(PRODUCT.result, "user: I'd like the tactile one instead", cfg)
    assert "7706410293{options{switch=tactile, size=80%}" in line
    assert "clicky" not in line and "linear" not in line
    for iid in ("9690244451", "7706410293", "3616838507", "8484921793"):
        assert iid in line
    # focus (the default): the siblings of the record the query names are left out whole, ids included
    focused = summarize_fields(PRODUCT.result, "user: I'd like the tactile one instead", FieldConfig(result_chars=60))
    assert "variants{7706410293{options{switch=tactile, size=80%}" in focused
    assert not any(iid in focused for iid in ("9690244451", "3616838507", "8484921793"))
    assert focused.endswith(" fields")
    # a query naming no record more than another focuses nothing
    assert all(iid in summarize_fields(PRODUCT.result, "user: what keyboards do you have?", FieldConfig())
               for iid in ("9690244451", "7706410293", "3616838507", "8484921793"))
    plain = summarize_fields(PRODUCT.result, None, cfg)
    assert "name=\"Mechanical Keyboard\"" in plain and "tactile" not in plain and "+" in plain
    assert all(iid in plain for iid in ("9690244451", "8484921793"))
    # max_ids caps the identifiers too, and says so
    capped = summarize_fields(PRODUCT.result, None, FieldConfig(result_chars=0, max_ids=2))
    assert sum(iid in capped for iid in ("9690244451", "7706410293", "3616838507", "8484921793")) <= 1
    assert capped.endswith("fields")


def test_id_shape_and_non_result_cards_fall_back_to_the_template():
    assert all(id_shaped(x) for x in ("#W2378156", "6992792935", "4OG6T3", "SDZQKO", "JFK", "a_b", "x@y.z",
                                      "2024-05-20"))
    assert not any(id_shaped(x) for x in ("delivered", "Vacuum Cleaner", "ab", 42, 3.5, None, "x" * 60))
    assert field_compress(ERR, "order 88412") == template_compress(ERR)
    (c,) = FieldCompressor().compress([USER], "which reservation?")
    assert c.source == "fields" and c.line.startswith(f"[{USER.card_id}] ✓ get_user_details")
    assert FieldCompressor().preview([USER], "which reservation?") == [c.text]
    assert TemplateCompressor().preview([USER], "ignored") == [template_compress(USER)]


def test_field_lines_hold_the_gold_values_of_real_tau2_key_cards():
    """On the shipped τ²-bench retail sample: the share of the gold's argument values held by its key cards'
    raw text that the lines keep — every one with field lines that keep every id, ≥ 90 % focused, fewer with the
    template."""
    from damc.cards import encode_episode
    from damc.episodes import decision_points
    from damc.facts import gold_values, holds_any
    from damc.query import render_decision_query

    need = kept_tpl = kept_fld = kept_all = 0
    for ep in load_episodes("data/samples/tau2_retail_sample.jsonl"):
        cards = {c.card_id: c for c in encode_episode(ep)}
        for dp in decision_points(ep, tool_calls_only=True):
            keys = [cards[k] for k in dp.key_card_ids if k in cards and cards[k].tool_name]
            raw = " ".join(c.raw_text for c in keys)
            vals = [v for v in gold_values(dp.gold) if holds_any(raw, [v])]
            q = render_decision_query(dp.context, ep.tools)
            tpl = " ".join(template_compress(c) for c in keys)
            fld = " ".join(field_compress(c, q) for c in keys)
            every = " ".join(field_compress(c, q, FieldConfig(focus=False)) for c in keys)
            need += len(vals)
            kept_all += sum(holds_any(every, [v]) for v in vals)
            kept_tpl += sum(holds_any(tpl, [v]) for v in vals)
            kept_fld += sum(holds_any(fld, [v]) for v in vals)
    assert need >= 10, need
    assert kept_all == need and kept_fld >= 0.9 * need and kept_fld > kept_tpl, (need, kept_all, kept_fld, kept_tpl)


def test_key_card_lines_table_on_the_tau2_sample():
    """`compare_renders.py --key-cards`: raw text keeps every value by definition, field lines keep more of them
    than the template, and focus never keeps more look-alikes than every-id lines."""
    import re as _re

    from damc.eval.renders import key_card_lines

    text = key_card_lines("data/samples/tau2_retail_sample.jsonl")
    rows = {m.group(1): [float(x) for x in m.group(2, 3, 4)]
            for m in _re.finditer(r"^\| ([^|]+?) \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \|", text, _re.M)}
    assert set(rows) == {"raw", "template", "fields (every id)", "fields"}
    assert rows["raw"][:2] == [1.0, 1.0] and rows["fields (every id)"][0] == 1.0
    assert rows["template"][0] < rows["fields"][0] and rows["template"][1] < rows["fields"][1]
    assert rows["fields"][2] <= rows["fields (every id)"][2]
