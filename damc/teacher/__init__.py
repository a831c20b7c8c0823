"""Counterfactual teacher: LLM log-prob deltas that say how much each memory card mattered for a decision.

Modules: `backends` (HFTeacher, VLLMTeacher), `context` (decision context over a subset of cards),
`estimators` (LeaveOneOut with KV-cache prefix reuse, GroupedLeaveOneOut, AblationLasso), `aggregate`
(KNNValue: value of a card for a new decision from similar labeled decisions), `labels` (the label
dataset format) and `label` (`main(cfg)` behind `scripts/label.py`). Nothing is imported eagerly.
"""
