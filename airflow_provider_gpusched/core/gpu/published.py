"""The bounds of what a local-GPU task publishes about its GPUs (its lease, its wait, its GPU time, its lease
history): the board (core/board.py) and the timeline (core/gpu/timeline.py) check every record read back against
them."""

#: GPUs one host has (and one lease or segment names)
MAX_HOST_GPUS = 64
#: a GPU's memory: 16 TiB, far above any GPU, far below a forged petabyte
MAX_GPU_MEMORY = 1 << 44
#: a name's length
MAX_NAME = 250
