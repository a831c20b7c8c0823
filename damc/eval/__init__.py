"""The A/B harness: it measures the product, `DecisionAwareMemory`, against the known memory policies.

Modules: `policies` (card policies = valuers plugged into the runtime; `window`, `full`, `obs_mask` at the
message level), `harness` (`main(cfg)` behind `scripts/evaluate.py`: decisions, records, aggregation),
`metrics` (decision and ranking metrics), `stats` (cluster bootstrap, paired tests), `report` (tables and
targets from `results.json`), `pipelines` (`make demo` / `make reproduce`). Nothing is imported eagerly.
"""
