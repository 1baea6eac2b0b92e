"""The search algorithms, one module per kind (its settings, its kind and its search together): grid,
random, optuna (rounds and asynchronous), evolution, PBT, Hyperband; the shared round-search base and the
checkpoint hand-over."""
