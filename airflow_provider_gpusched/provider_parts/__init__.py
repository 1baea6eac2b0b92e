"""Each built-in backend wing's part of the provider metadata (provider_info.py assembles them).

A part is data only: a module of its wing named after the backend, holding ``PROVIDER_INFO``, the entries its
wing adds to the lists of Airflow's provider metadata (``hooks``, ``operators``, ``connection-types``...). It
imports nothing, as every Airflow process reads the provider metadata."""

#: the built-in wings, in core/backends.py's registration order (the order their entries are listed in)
BUILT_IN = ("slurm", "local")
