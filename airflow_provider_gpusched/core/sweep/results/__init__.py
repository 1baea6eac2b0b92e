"""Reading a sweep's results: the sweep view the UI and CLI draw, analysis, the end-of-run report."""
