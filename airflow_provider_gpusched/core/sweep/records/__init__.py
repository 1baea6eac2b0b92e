"""What a sweep leaves on disk and its one reader each: the trial store (status, params, results), the
trials' reports, the Optuna journal. Above core/sweep/parts, below everything that reads or writes trials."""
