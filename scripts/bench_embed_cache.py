"""Count the card embeddings a memory with no in-process text memo pays — a PostgreSQL worker, a freshly started
process — when the store's embedding cache is keyed by content, against what a cache keyed by card row and `seq`
alone would pay, side by side in one run:

    python scripts/bench_embed_cache.py --episodes /tmp/grounded/syn/dev.jsonl
    python scripts/bench_embed_cache.py --episodes data/samples/tau2_retail_sample.jsonl --max-episodes 50

Each episode is replayed as a live agent's memory sees it (`DecisionAwareMemory.observe` at every user turn, which
ingests and embeds the new cards; `IndexConfig(encode_memo=0)`: no in-process memo) on a fresh SQLite store.
Counted: `rows` — card versions whose vector the index needed (a new card, or a card re-written at a later `seq`):
what a row-and-seq-keyed cache embeds; `embedded` — texts the encoder actually embedded (the content key: a text its
scope embedded before is not embedded again). The encoder is a counting stand-in that loads no model (what is
embedded does not depend on the encoder). Prints a table and one JSON object.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


class CountingEncoder:
    """Deterministic unit vectors from a text's hash; counts the texts it is asked to embed."""

    name = "counting-384"

    def __init__(self) -> None:
        self.n = 0

    def encode(self, texts, **_):
        texts = [texts] if isinstance(texts, str) else list(texts)
        self.n += sum(t != "dimension probe" for t in texts)
        out = np.stack([np.random.default_rng(abs(hash(t)) % 2**32).standard_normal(384) for t in texts]) \
            if texts else np.zeros((0, 384))
        return (out / np.linalg.norm(out, axis=1, keepdims=True)).astype(np.float32) if texts else out


def replay(episodes: list, tmp: Path) -> dict[str, int]:
    """Replay each episode turn by turn on its own memory; the counts of the module docstring."""
    from damc.runtime.index import IndexConfig
    from damc.runtime.memory import DecisionAwareMemory
    from damc.runtime.store import CardStore

    rows = [0]
    put = CardStore.put_embeddings

    def counting_put(self, r, *a, **k):
        rows[0] += len(r)
        return put(self, r, *a, **k)

    enc, cards = CountingEncoder(), 0
    CardStore.put_embeddings = counting_put
    try:
        for i, ep in enumerate(episodes):
            m = DecisionAwareMemory(tmp / f"m{i}", valuer="heuristic", tokenizer=None, encoder=enc,
                                    index_config=IndexConfig(encode_memo=0))
            msgs = ep.messages
            users = [j for j, x in enumerate(msgs) if x.get("role") == "user"] + [len(msgs)]
            for end in users[1:]:
                m.observe(msgs[:end], ep.episode_id)
            cards += m.store.count()
            m.close()
    finally:
        CardStore.put_embeddings = put
    return {"episodes": len(episodes), "cards": cards, "rows": rows[0], "embedded": enc.n}


def main(argv: list[str] | None = None) -> dict[str, int]:
    import tempfile

    from damc.episodes import load_episodes

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "))
    ap.add_argument("--episodes", type=Path, required=True, help="episodes JSONL (make_data.py's format)")
    ap.add_argument("--max-episodes", type=int, default=None, help="the first N episodes only")
    args = ap.parse_args(argv)
    episodes = load_episodes(args.episodes)[: args.max_episodes]
    with tempfile.TemporaryDirectory() as tmp:
        out = replay(episodes, Path(tmp))
    saved = 1 - out["embedded"] / max(out["rows"], 1)
    print(f"{'episodes':>9} {'cards':>7} {'row+seq key':>12} {'content key':>12} {'saved':>7}")
    print(f"{out['episodes']:>9} {out['cards']:>7} {out['rows']:>12} {out['embedded']:>12} {saved:>7.1%}")
    print(json.dumps({**out, "saved": round(saved, 4)}))
    return out


if __name__ == "__main__":
    main()
