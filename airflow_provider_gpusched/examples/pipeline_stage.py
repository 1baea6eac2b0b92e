"""A minimal pipeline runtime: one stage of a partitioned model, connected to its neighbours over TCP.

    python -m airflow_provider_gpusched.examples.pipeline_stage --model tiny-vit --microbatches 16 [--result FILE]

Run once per stage with the environment that ``core/partition/stages.py`` gives each (``GPUSCHED_STAGE_FIRST``
/ ``_LAST``, ``GPUSCHED_STAGE_ADDR``, ``GPUSCHED_STAGE_PREV_ADDR`` / ``_NEXT_ADDR``). Each stage builds the same
model (same seed: the same weights), keeps its own layers, and then:

* the first stage makes ``--microbatches`` seeded inputs and sends each through its layers to the next stage;
* a middle stage listens on its address, receives activations from the previous stage, runs its layers and
  sends them on;
* the last stage receives, runs its layers, and writes a summary of the outputs (``--result``, JSON: the count,
  their sum and the first micro-batch's first row) so that a test can compare it with the whole model run in
  one process.

Micro-batches stream: a stage works on one while its neighbours work on others. On the wire each tensor is a
fixed header (magic, dtype, rank, shape) and its raw bytes, checked on receipt (no pickle); an empty header
ends the stream. Runs on the leased GPU when PyTorch sees one.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import struct
import sys
import time
from typing import Any

MAGIC = b"GPSP"
HEADER = struct.Struct("!4sBB")  # magic, dtype code, rank (0: end of stream)
DTYPES = ["float32", "float16", "bfloat16"]
MAX_BYTES = 1 << 30


def _recv_exact(conn: socket.socket, n: int) -> bytes:
    chunks, got = [], 0
    while got < n:
        chunk = conn.recv(min(1 << 20, n - got))
        if not chunk:
            raise ConnectionError(f"the previous stage closed the connection after {got} of {n} bytes")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def send_tensor(conn: socket.socket, tensor) -> None:
    import torch

    tensor = tensor.detach().contiguous().cpu()
    code = DTYPES.index(str(tensor.dtype).removeprefix("torch."))
    shape = tuple(tensor.shape)
    payload = tensor.view(torch.uint8).numpy().tobytes() if tensor.dtype == torch.bfloat16 else tensor.numpy().tobytes()
    conn.sendall(HEADER.pack(MAGIC, code, len(shape)) + struct.pack(f"!{len(shape)}I", *shape) + payload)


def send_end(conn: socket.socket) -> None:
    conn.sendall(HEADER.pack(MAGIC, 0, 0))


def recv_tensor(conn: socket.socket):
    """The next tensor, or None at the end of the stream; a malformed header is an error naming what is wrong."""
    import numpy as np
    import torch

    magic, code, rank = HEADER.unpack(_recv_exact(conn, HEADER.size))
    if magic != MAGIC:
        raise ValueError(f"not a gpusched pipeline stream (header {magic!r})")
    if rank == 0:
        return None
    if code >= len(DTYPES) or rank > 8:
        raise ValueError(f"bad tensor header: dtype code {code}, rank {rank}")
    shape = struct.unpack(f"!{rank}I", _recv_exact(conn, 4 * rank))
    itemsize = 4 if DTYPES[code] == "float32" else 2
    size = itemsize
    for n in shape:
        size *= n
    if size > MAX_BYTES:
        raise ValueError(f"tensor of {size} bytes announced (shape {shape}): more than {MAX_BYTES}")
    data = bytearray(_recv_exact(conn, size))
    if DTYPES[code] == "bfloat16":
        return torch.frombuffer(data, dtype=torch.uint8).view(torch.bfloat16).reshape(shape)
    return torch.from_numpy(np.frombuffer(data, dtype=DTYPES[code]).reshape(shape).copy())


def _split(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise SystemExit(f"pipeline_stage: address {address!r}: expected host:port")
    return host, int(port)


def connect(address: str, deadline: float) -> socket.socket:
    """Connect to the next stage, retrying until ``deadline`` (it may still be starting)."""
    host, port = _split(address)
    while True:
        try:
            return socket.create_connection((host, port), timeout=10)
        except OSError as exc:
            if time.monotonic() > deadline:
                raise SystemExit(f"pipeline_stage: cannot reach the next stage at {address}: {exc}") from None
            time.sleep(0.2)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="a built-in model (mlp, convnet, tiny-vit) or module:callable")
    parser.add_argument("--input-shape", help="one sample's input shape (built-in models know theirs)")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--microbatches", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--connect-timeout", type=float, default=120.0)
    parser.add_argument("--result", help="the last stage writes its summary here (JSON)")
    args = parser.parse_args(argv)

    import torch

    from airflow_provider_gpusched.core.partition.profile import load_model, parse_shape

    env = os.environ
    stage, stages = int(env["GPUSCHED_STAGE"]), int(env["GPUSCHED_STAGES"])
    first, last = int(env["GPUSCHED_STAGE_FIRST"]), int(env["GPUSCHED_STAGE_LAST"])
    prev_addr, next_addr = env.get("GPUSCHED_STAGE_PREV_ADDR", ""), env.get("GPUSCHED_STAGE_NEXT_ADDR", "")
    node = env.get("SLURMD_NODENAME") or socket.gethostname()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    layers, shape = load_model(args.model, seed=args.seed)
    if args.input_shape:
        shape = parse_shape(args.input_shape)
    if not 1 <= first <= last <= len(layers):
        raise SystemExit(f"pipeline_stage: layers {first}-{last}: the model has {len(layers)}")
    part = torch.nn.Sequential(*layers[first - 1 : last]).to(device).eval()
    print(
        f"stage {stage} of {stages}: layers {first}-{last} of {len(layers)} on {node} ({device}); "
        + (f"listening on {env.get('GPUSCHED_STAGE_ADDR')} for {prev_addr}" if prev_addr else "the first stage")
        + f", next {next_addr or '-'}",
        flush=True,
    )
    deadline = time.monotonic() + args.connect_timeout
    inbound = server = None
    if prev_addr:
        server = socket.create_server(("", _split(env["GPUSCHED_STAGE_ADDR"])[1]), reuse_port=False)
        server.settimeout(args.connect_timeout)
        inbound, peer = server.accept()
        inbound.settimeout(None)
        print(f"stage {stage}: the previous stage connected from {peer[0]}", flush=True)
    outbound = connect(next_addr, deadline) if next_addr else None

    def inputs():
        if inbound is None:  # the first stage makes the micro-batches, as reference_output does
            yield from microbatches_of(shape, args.batch_size, args.microbatches, args.seed)
            return
        while (tensor := recv_tensor(inbound)) is not None:
            yield tensor

    count, output, started = 0, OutputSummary(), time.monotonic()
    with torch.inference_mode():
        for x in inputs():
            y = part(x.to(device))
            count += 1
            if outbound is not None:
                send_tensor(outbound, y)
            else:
                output.add(y)
    if outbound is not None:
        send_end(outbound)
        outbound.close()
    for sock in (inbound, server):
        if sock is not None:
            sock.close()
    seconds = time.monotonic() - started
    print(f"stage {stage}: {count} micro-batches through layers {first}-{last} in {seconds:.2f}s", flush=True)
    if outbound is None:
        summary = {"microbatches": count, **output.record(), "stages": stages, "node": node}
        print("pipeline output: " + json.dumps(summary), flush=True)
        if args.result:
            with open(args.result, "w") as fh:
                json.dump(summary, fh)
    return 0


def reference_output(
    model: str,
    *,
    microbatches: int = 16,
    batch_size: int = 8,
    seed: int = 0,
    input_shape: tuple[int, ...] | None = None,
) -> dict[str, Any]:
    """The same summary with the whole model in one process: what the pipeline's last stage must match."""
    import torch

    from airflow_provider_gpusched.core.partition.profile import load_model

    layers, shape = load_model(model, seed=seed)
    shape = input_shape or shape
    whole = torch.nn.Sequential(*layers).eval()
    output = OutputSummary()
    with torch.inference_mode():
        for x in microbatches_of(shape, batch_size, microbatches, seed):
            output.add(whole(x))
    return {"microbatches": microbatches, **output.record()}


def microbatches_of(shape, batch_size: int, count: int, seed: int):
    """The pipeline's input: ``count`` micro-batches of random tensors, the same for a seed wherever they are made
    (the first stage, and reference_output's whole model)."""
    import torch

    generator = torch.Generator().manual_seed(seed + 1)
    for _ in range(count):
        yield torch.randn(batch_size, *shape, generator=generator)


class OutputSummary:
    """What the last stage (or the whole model) says of its output: the sum of every value, and the first row."""

    def __init__(self) -> None:
        self.total = 0.0
        self.first_row: list[float] | None = None

    def add(self, y) -> None:
        self.total += float(y.double().sum())
        if self.first_row is None:
            self.first_row = [float(v) for v in y[0].flatten()[:10]]

    def record(self) -> dict[str, Any]:
        return {"sum": self.total, "first_row": self.first_row}


if __name__ == "__main__":
    sys.exit(main())
