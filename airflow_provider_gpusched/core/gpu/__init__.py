"""Local GPUs: inventory (NVML or simulated), crash-safe leases, admission and placement, launching,
and out-of-memory retry. Pure Python, no Airflow imports."""
