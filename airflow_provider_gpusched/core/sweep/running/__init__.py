"""Running a sweep: the trial runner (one trial in its own process), batches, a stage's session, the
asynchronous workers, the stage loop of a terminal run, and a trial's side of reporting."""
