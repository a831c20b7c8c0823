"""Compression: templates keep every critical atom; the LLM compressor is guarded by them."""

from __future__ import annotations

import json

import pytest

from damc.cards import Card, critical_atoms, encode_messages
from damc.runtime.compress import LLMCompressor, TemplateCompressor
from damc.templates import missing_atoms, required_atoms, summarize_result, template_compress
from damc.data.episodes import load_episodes


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
