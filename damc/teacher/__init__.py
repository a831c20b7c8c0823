"""Counterfactual teacher: LLM log-prob deltas that say how much each memory card mattered for a decision.

Modules: `backends` (HFTeacher, VLLMTeacher), `context` (decision context over a subset of cards),
`estimators` (LeaveOneOut with KV-cache prefix reuse, GroupedLeaveOneOut, AblationLasso),
`agreement` / `ensemble` (label sets compared / averaged; the schema is `damc.labels`), `grounded` (targets
read off the logged call, no model) / `hybrid` (teacher delta + λ · grounded target) and `label` (`main(cfg)` behind
`scripts/label.py`). Nothing is imported eagerly.
"""
