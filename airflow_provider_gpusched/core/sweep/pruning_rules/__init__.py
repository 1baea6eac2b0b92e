"""Pruning: the rule interface, a spec's PruningRule and the registry (base.py), the built-in rules (one module
each, its settings and rule together: median.py, asha.py, optuna.py) and the judging that reads a sweep's reports
(judging.py)."""
