"""Explanations of a built context (kept and dropped cards, scores, tokens saved, why): a stored session's last one,
or one decision of an episode file (`damc inspect STORE` adds the store's cards and scopes).

    python scripts/explain.py store runs/mem [--session S]
    python scripts/explain.py episode data/samples/bfcl_sample.jsonl [--index K] [--episode ID]
"""

from damc.bench.explain import main

if __name__ == "__main__":
    main()
