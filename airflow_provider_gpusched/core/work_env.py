"""Names of the environment variables this package gives the work it runs (a leaf module: a trial runner process
imports it, and must start in a tenth of a second)."""

#: where work keeps its checkpoints, as every runner tells it: the local GPU runner (kept across relaunches), a
#: sweep trial (its folder's ``checkpoint/``) and a Slurm time-limit chain (its task folder's ``checkpoint/``)
CHECKPOINT_ENV = "GPUSCHED_CHECKPOINT_DIR"
