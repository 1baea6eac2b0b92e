"""Sweeps: parameter spaces, grid/random expansion and trial identity (pure Python, no Airflow)."""
