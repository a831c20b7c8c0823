"""The runtime returns the caller's chat format untouched: no injected system prompt or tool-call syntax, an order
strict chat templates accept, `developer` roles and `name` fields kept; the A/B harness renders the text prompt of
its local decision model on its own side. Also `explain()`'s wording and the store files' permissions."""

from __future__ import annotations

import json
import os
import stat

import pytest

from damc.prompting import DEFAULT_SYSTEM, HISTORY_HEADER, TOOLS_HEADER
from damc.runtime.explain import Explanation
from damc.runtime.memory import DecisionAwareMemory, MemoryConfig
from damc.runtime.select import TopK

TOOLS = [{"type": "function", "function": {"name": "get_order", "description": "Look up an order",
                                           "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}},
                                                          "required": ["order_id"]}}}]

# What a strict template (Gemma's, Mistral's newer ones) enforces: instructions only before the first other message.
STRICT_TEMPLATE = (
    "{% set ns = namespace(started=false) %}{% for m in messages %}"
    "{% if m['role'] in ['system', 'developer'] %}{% if ns.started %}"
    "{{ raise_exception('a ' + m['role'] + ' message after the conversation started') }}{% endif %}"
    "{% else %}{% set ns.started = true %}{% endif %}"
    "<|{{ m['role'] }}|>{{ m['content'] if m['content'] is string else '' }}\n{% endfor %}")


def _call(cid: str, order_id: str) -> dict:
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": cid, "type": "function", "function": {"name": "get_order", "arguments": json.dumps({"order_id": order_id})}}]}


def conversation(lead: list[dict] | None = None) -> list[dict]:
    return [*(lead or []),
            {"role": "user", "name": "ana", "content": "My order 88412 never arrived."},
            _call("c1", "88412"),
            {"role": "tool", "tool_call_id": "c1", "content": json.dumps({"order_id": "88412", "state": "lost"})},
            {"role": "assistant", "content": "It was lost in transit."},
            {"role": "user", "name": "ana", "content": "Please send a replacement for 88412."},
            _call("c2", "88412"),
            {"role": "tool", "tool_call_id": "c2", "content": json.dumps({"order_id": "88412", "state": "lost"})}]


def _no_tool_text(messages: list[dict]) -> None:
    text = json.dumps(messages, ensure_ascii=False)
    assert TOOLS_HEADER not in text and "name(arg=value" not in text and DEFAULT_SYSTEM not in text


def test_without_a_system_message_nothing_is_injected():
    """No system message in, none out; the memory message and the current turn, verbatim; tools stay out of the
    messages (the caller passes them to its API)."""
    mem = DecisionAwareMemory(None, tokenizer=None, selector=TopK(None))
    msgs = conversation()
    ctx = mem.build_context(msgs, tools=TOOLS)
    _no_tool_text(ctx.messages)
    assert [m["role"] for m in ctx.messages] == ["user", "user", "assistant", "tool"]
    assert ctx.messages[0]["content"].startswith(HISTORY_HEADER) and "[default:0] " in ctx.messages[0]["content"]
    assert ctx.messages[1:] == msgs[4:]                     # the current turn, every key kept (`name` included)
    assert ctx.openai_messages() == ctx.messages and ctx.prefix_messages == ctx.messages[:1]


@pytest.mark.parametrize("placement", ["message", "system"])
@pytest.mark.parametrize("lead", [[], [{"role": "system", "content": "You are a support agent."}],
                                  [{"role": "developer", "content": "Be brief."}],
                                  [{"role": "system", "content": "You are a support agent."},
                                   {"role": "developer", "content": [{"type": "text", "text": "Be brief."}]}]])
def test_output_order_is_valid_for_a_strict_chat_template(lead, placement):
    """Instruction messages come first and only first, in any layout; the caller's instruction messages are the
    same dicts as sent (placement=message) or carry the fenced block at the end of the last one (system)."""
    from damc.models import load_tokenizer

    tok = load_tokenizer("smollm2-135m")
    mem = DecisionAwareMemory(None, tokenizer=None, selector=TopK(None), config=MemoryConfig(placement=placement))
    msgs = conversation(lead)
    ctx = mem.build_context(msgs, tools=TOOLS)
    roles = [m["role"] for m in ctx.messages]
    n_lead = len([r for r in roles if r in ("system", "developer")])
    assert all(r in ("system", "developer") for r in roles[:n_lead]) and n_lead == max(len(lead), placement == "system")
    tok.apply_chat_template(ctx.messages, chat_template=STRICT_TEMPLATE, tokenize=False)    # raises if misordered
    _no_tool_text(ctx.messages)
    assert ctx.messages[len(ctx.messages) - 3:] == msgs[-3:]
    if placement == "message":
        assert ctx.messages[:len(lead)] == lead and ctx.messages[len(lead)]["role"] == "user"
        assert HISTORY_HEADER in ctx.messages[len(lead)]["content"]
    else:
        last = json.dumps(ctx.messages[n_lead - 1]["content"], ensure_ascii=False)
        assert HISTORY_HEADER in last and all(HISTORY_HEADER not in json.dumps(m) for m in ctx.messages[n_lead:])


def test_developer_role_and_names_are_accepted_and_kept():
    """A `developer` message (OpenAI's newer system) is an instruction: not a card, not history, sent verbatim;
    `name` fields survive ingestion (on the cards) and assembly (in the current turn)."""
    lead = [{"role": "developer", "name": "ops", "content": "Answer in English."}]
    mem = DecisionAwareMemory(None, tokenizer=None, selector=TopK(None))
    msgs = conversation(lead)
    ctx = mem.build_context(msgs, tools=TOOLS)
    assert ctx.messages[0] == lead[0]
    assert mem.expand("default:1").meta["name"] == "ana" and "default:0" not in {
        sc.card.card_id for sc in mem.store.session_cards("default")}
    assert ctx.messages[-3] == {"role": "user", "name": "ana", "content": "Please send a replacement for 88412."}
    from damc.runtime.assemble import split_conversation

    system, history, turn, u = split_conversation(msgs)
    assert system == "Answer in English." and history[0] is msgs[1] and turn == msgs[5:] and u == 5


def test_the_harness_renders_the_local_models_text_prompt_from_the_runtime_output():
    """A card policy's prompt for the local decision model is the tool listing and call syntax rendered on the
    harness side over the runtime's kept lines; the runtime's own messages hold neither."""
    from damc.eval.policies import DecisionView, PolicyEnv, Setting, decision_messages, make_policy
    from damc.prompting import build_decision_messages
    from damc.runtime.assemble import split_conversation

    msgs = conversation()
    view = DecisionView("default", tuple(msgs), tuple(TOOLS))
    mem = DecisionAwareMemory(None, tokenizer=None)
    mem.observe(msgs)
    pol = make_policy("recency")
    env = PolicyEnv(count_tokens=lambda s: max(1, len(s) // 4), window_tokens=8192)
    out = pol.build(view, Setting(512), env, memory=mem, valuer=pol.make_valuer(env))
    ctx = mem.build_context(msgs, tools=TOOLS, budget_tokens=512, valuer=pol.make_valuer(env),
                            selector=pol.selector(Setting(512)))
    _no_tool_text(ctx.messages)
    assert out.messages == decision_messages(msgs, TOOLS, ctx) == build_decision_messages(
        None, TOOLS, [], split_conversation(msgs)[2], memory_lines=ctx.memory_lines)
    assert out.messages[0] == {"role": "system", "content": DEFAULT_SYSTEM}
    assert out.messages[2]["content"].startswith(TOOLS_HEADER) and "get_order(order_id)" in out.messages[2]["content"]
    assert out.messages[-2] == {"role": "assistant", "content": 'get_order(order_id="88412")'}


def test_explain_says_what_was_added_on_a_short_chat_and_names_the_scope():
    mem = DecisionAwareMemory(None, tokenizer=None, selector=TopK(None), user_id="alice", agent_id="bot")
    msgs = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"},
            {"role": "user", "content": "What did I just say?"}]
    ctx = mem.build_context(msgs)
    assert ctx.tokens_after > ctx.tokens_before                # the fenced header costs more than "Hi"/"Hello!"
    text = str(mem.explain(ctx))
    added = ctx.tokens_after - ctx.tokens_before
    assert f"added {added:,}, +{100 * added / ctx.tokens_before:.0f} %" in text and "saved -" not in text
    assert text.splitlines()[0].startswith("context for session 'default' (user 'alice', agent 'bot'): ")
    long_chat = [{"role": "user", "content": f"Fact {i}: " + "the sky is blue and the grass is green. " * 20}
                 for i in range(12)] + [{"role": "user", "content": "Which fact was first?"}]
    ctx = DecisionAwareMemory(None, tokenizer=None).build_context(long_chat, budget_tokens=64)
    assert f"(saved {ctx.tokens_saved:,}, " in str(Explanation.from_context(ctx)) and ctx.tokens_saved > 0
    assert "(user 'default'): " in str(Explanation.from_context(ctx)).splitlines()[0]


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o077, 0o600)])
def test_store_files_share_one_mode_from_the_umask(tmp_path, umask, mode):
    """cards.db and cards.faiss get the same permissions: what `open()` gives under the process umask."""
    old = os.umask(umask)
    try:
        with DecisionAwareMemory(tmp_path / "mem", tokenizer=None) as mem:
            mem.build_context(conversation(), tools=TOOLS)
    finally:
        os.umask(old)
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in (tmp_path / "mem").iterdir()
             if p.name in ("cards.db", "cards.faiss")}
    assert modes == {"cards.db": mode, "cards.faiss": mode}
