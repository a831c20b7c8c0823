"""Integrations of `DecisionAwareMemory` with agent stacks (imported on demand, nothing at import time).

* `damc.runtime.integrations.openai` — `DAMCOpenAI(client, memory)`: wraps any OpenAI-style client, sync or async,
  so every `chat.completions.create(messages=..., tools=...)` or `responses.create(input=..., tools=...)` records
  the conversation and sends the assembled context instead of the full history, in the caller's own format.
* `damc.runtime.integrations.langchain` — `damc_middleware(memory)`: a LangChain `Runnable` that rewrites the
  messages before each model call (`damc_middleware(memory, tools) | chat_model`), and `with_damc(...)`.
"""
