"""Pruning: the rule interface and its registry (base.py), the built-in rules (one small class each),
and the judging that reads a sweep's reports (judging.py)."""
