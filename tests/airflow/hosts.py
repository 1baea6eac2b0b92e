"""``[core] hostname_callable`` values for tests that simulate several GPU hosts on one machine."""


def gpu_host_a() -> str:
    return "gpu-host-a"


def gpu_host_b() -> str:
    return "gpu-host-b"
