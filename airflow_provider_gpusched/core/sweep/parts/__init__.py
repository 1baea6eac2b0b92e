"""The parts a sweep spec is made of: the parameter space and the trials drawn from it, the objective, the
command and config template, the resources, seed formats. The bottom of core/sweep: it imports nothing above."""
