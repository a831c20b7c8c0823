"""Bad input never blocks a conversation: malformed tool arguments, lone surrogates, a huge tool result, broken
files, a failing constructor, an empty message list, tools given as a dict."""

from __future__ import annotations

import json
import logging

import pytest

from damc.runtime.assemble import leading_instructions, prompt_tokens, split_conversation
from damc.runtime.memory import DecisionAwareMemory
from damc.runtime.store import StoreError
from damc.tokens import load_token_counter

TOOLS = [{"type": "function", "function": {"name": "get_order", "description": "Look up an order",
          "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}}}}]
SYSTEM = {"role": "system", "content": "You are a support agent."}


def call(cid, name, arguments):
    return {"role": "assistant", "content": None, "tool_calls": [{"id": cid, "type": "function",
            "function": {"name": name, "arguments": arguments}}]}


def result(cid, content):
    return {"role": "tool", "tool_call_id": cid, "content": content if isinstance(content, str) else json.dumps(content)}


def test_malformed_tool_arguments_are_stored_as_text_and_later_turns_work(caplog):
    mem = DecisionAwareMemory(None, tokenizer=None)
    msgs = [SYSTEM, {"role": "user", "content": "Where is order 88412?"},
            call("c1", "get_order", '{"order_id": "884'),                    # a model's truncated output
            result("c1", {"status": "error", "code": 400, "message": "bad arguments"}),
            {"role": "assistant", "content": "Let me try that again."},
            {"role": "user", "content": "Please do."}]
    with caplog.at_level(logging.WARNING, logger="damc.runtime.ingest"):
        mem.build_context(msgs, tools=TOOLS)
    assert any("messages[2].tool_calls[0].function.arguments" in r.getMessage() and "not valid JSON" in r.getMessage()
               for r in caplog.records)
    card = mem.expand("default:2:0")
    assert card.meta["malformed"] is True and card.meta["raw_arguments"] == '{"order_id": "884'
    assert card.raw_text.startswith('get_order({"order_id": "884)') and "bad arguments" in card.raw_text
    assert card.arguments == {} and card.result_index == 3 and card.kind == "tool_error"
    later = msgs + [call("c2", "get_order", '{"order_id": "88412"}'), result("c2", {"state": "lost"}),
                    {"role": "assistant", "content": "It is lost."}, {"role": "user", "content": "Refund it."}]
    ctx = mem.build_context(later, tools=TOOLS)                        # the conversation goes on
    assert mem.expand("default:6:0").result == {"state": "lost"} and ctx.session_id == "default"
    assert mem.store.session_state("default")["n_messages"] == 9
    # a truncated call in the current turn is shown as written
    now = later + [call("c3", "refund", '{"order_id": "88412", "amount": 12'), result("c3", "error: bad JSON")]
    ctx = mem.build_context(now, tools=TOOLS)
    assert ctx.messages[-2] == now[-2]                                  # the current turn stays verbatim
    later = now + [{"role": "assistant", "content": "Retrying."}, {"role": "user", "content": "ok"}]
    mem.build_context(later, tools=TOOLS)
    assert mem.expand("default:10:0").meta["malformed"] is True
    # arguments that parse but are not an object are kept the same way
    mem.add_messages([call("c3", "get_order", "[1, 2]")], session_id="s2")
    assert mem.expand("s2:0:0").meta == {"malformed": True, "raw_arguments": "[1, 2]"}


def test_lone_surrogates_are_cleaned_before_anything_is_written():
    mem = DecisionAwareMemory(None)                                     # the default tokenizer and encoder
    tools = [{"type": "function", "function": {"name": "get_order", "description": "Look up \udc80 an order",
              "parameters": {"type": "object", "properties": {}}}}]
    msgs = [SYSTEM, {"role": "user", "content": "My order 88412 \ud800 never arrived."},
            call("c1", "get_order", json.dumps({"order_id": "884\udc0012"})),
            result("c1", "status: lost \udfff in transit"),
            {"role": "assistant", "content": "It is lost \ud83d."},
            {"role": "user", "content": "What now \udbff?"}]
    ctx = mem.build_context(msgs, tools=tools)
    json.dumps(ctx.messages, ensure_ascii=False).encode("utf-8")         # every string is valid UTF-8 now
    cards = [sc.card for sc in mem.store.all_cards()]
    assert [c.card_id for c in cards] == ["default:1", "default:2:0", "default:4"]
    assert cards[0].raw_text == "My order 88412 \ufffd never arrived."
    assert cards[1].arguments == {"order_id": "884\ufffd12"} and "lost \ufffd in transit" in cards[1].raw_text
    assert ctx.messages[-1]["content"] == "What now \ufffd?" and ctx.tokens_before > 0
    assert mem.observe(msgs + [{"role": "assistant", "content": "x \ud800"}, {"role": "user", "content": "ok"}]) == 2


class SpyTokenizer:
    """The real SmolLM2 tokenizer, counting the characters it is asked to tokenize."""

    def __init__(self) -> None:
        self.inner, self.chars = load_token_counter("smollm2-135m"), 0

    def encode(self, text, add_special_tokens=False):
        self.chars += len(text)
        return self.inner.encode(text, add_special_tokens=add_special_tokens)

    def __call__(self, texts, add_special_tokens=False):
        self.chars += len(texts) if isinstance(texts, str) else sum(map(len, texts))
        return self.inner(texts, add_special_tokens=add_special_tokens)

    def __getattr__(self, name):
        return getattr(self.inner, name)


def test_a_huge_tool_result_is_tokenized_once_not_on_every_later_turn():
    spy = SpyTokenizer()
    mem = DecisionAwareMemory(None, tokenizer=spy)
    big = json.dumps({"rows": [{"id": 100000 + i, "name": f"item {i}", "ok": i % 3 == 0} for i in range(25_000)]})
    assert len(big) > 900_000
    msgs = [SYSTEM, {"role": "user", "content": "Export every row of the catalogue."},
            call("c1", "get_order", '{"order_id": "all"}'), result("c1", big),
            {"role": "assistant", "content": "Exported."}, {"role": "user", "content": "How many rows?"}]
    mem.build_context(msgs, tools=TOOLS)
    for k in range(2):                                                   # later turns
        msgs = msgs + [{"role": "assistant", "content": f"Answer {k}."}, {"role": "user", "content": f"Next {k}?"}]
        spy.chars = 0
        ctx = mem.build_context(msgs, tools=TOOLS)
        assert spy.chars < 100_000, spy.chars                            # main re-tokenized the whole history
    _, history, turn, _ = split_conversation(msgs)                       # and the figure is still exact
    exact = prompt_tokens([*leading_instructions(msgs), *history, *turn], spy.inner, tools=TOOLS)
    assert ctx.tokens_before == exact


def test_a_missing_or_corrupt_tokenizer_names_its_file_and_leaves_no_directory(tmp_path):
    empty = tmp_path / "tok"
    empty.mkdir()
    with pytest.raises(FileNotFoundError, match=rf"{empty}.*has no tokenizer.json"):
        DecisionAwareMemory(tmp_path / "mem", tokenizer=str(empty))
    assert not (tmp_path / "mem").exists()
    with pytest.raises(FileNotFoundError, match="does not exist"):
        DecisionAwareMemory(tmp_path / "mem", tokenizer=str(tmp_path / "nowhere" / "tokenizer.json"))
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "tokenizer.json").write_text('{"version": "1.0", "model": {')
    with pytest.raises(ValueError, match=rf"{broken / 'tokenizer.json'}: not a readable tokenizer.json"):
        DecisionAwareMemory(tmp_path / "mem", tokenizer=str(broken))
    (broken / "tokenizer.json").write_text(json.dumps({"version": "1.0"}))
    (broken / "tokenizer_config.json").write_text("{oops")
    with pytest.raises(ValueError, match=rf"{broken / 'tokenizer_config.json'}: not valid JSON"):
        load_token_counter(str(broken))
    assert not (tmp_path / "mem").exists()


def test_a_store_file_that_is_not_a_database_is_named_and_kept(tmp_path):
    folder = tmp_path / "mem"
    folder.mkdir()
    junk = b"these are not the bytes of a SQLite file " * 200
    (folder / "cards.db").write_bytes(junk)
    with pytest.raises(StoreError, match=rf"{folder / 'cards.db'} is not a usable DAMC card store"):
        DecisionAwareMemory(folder, tokenizer=None)
    assert (folder / "cards.db").read_bytes() == junk                     # loses nothing
    assert sorted(p.name for p in folder.iterdir()) == ["cards.db"]


@pytest.mark.parametrize("where", ["new/dir", "new/dir/x.db", "existing"])
def test_a_failing_constructor_leaves_nothing_behind(tmp_path, where):
    (tmp_path / "existing").mkdir()
    target = tmp_path / where
    with pytest.raises(Exception, match="no-scorer"):
        DecisionAwareMemory(target, tokenizer=None, scorer=str(tmp_path / "no-scorer"))
    assert not (tmp_path / "new").exists()
    assert sorted(p.name for p in (tmp_path / "existing").iterdir()) == []
    DecisionAwareMemory(target, tokenizer=None).close()                  # and the path works afterwards


def test_empty_messages_and_tools_as_a_dict_are_refused_clearly():
    mem = DecisionAwareMemory(None, tokenizer=None)
    with pytest.raises(ValueError, match="empty message list"):
        mem.build_context([])
    with pytest.raises(TypeError, match=r"tools must be a list of OpenAI tool schemas.*got a dict.*tools=\[schema\]"):
        mem.build_context([{"role": "user", "content": "hi"}], tools=TOOLS[0])
    with pytest.raises(TypeError, match=r"tools\[0\] is a str"):
        mem.build_context([{"role": "user", "content": "hi"}], tools=["get_order"])
    with pytest.raises(TypeError, match="messages must be a list"):
        mem.build_context({"role": "user", "content": "hi"})
    assert len(mem) == 0
