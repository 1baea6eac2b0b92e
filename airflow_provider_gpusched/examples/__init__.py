"""Real training for the drop-in examples (``pip install 'airflow-provider-gpusched[examples]'``: PyTorch and
scikit-learn, whose bundled ``digits`` data set needs no download). Import it, or copy it into your project:

* :mod:`.digits`: the ``digits`` data, an MLP and a CNN whose blocks a NAS search chooses, and
  :func:`~.digits.train_digits`: real training epoch by epoch, each epoch reported through ``trial.report``
  (so sweeps can prune it), checkpointed, resumed after a preemption, on the leased GPU when there is one;
* :mod:`.checkpoints`: where a checkpoint lives under gpusched, saving it atomically, reading it back checked,
  and stopping cleanly on SIGTERM (preemption, ``gpusched queue stop``, Slurm's requeue).

The DAGs that use them are ``dags/digits_*.py``; docs/examples.md walks through each one.
"""
