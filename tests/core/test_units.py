from datetime import timedelta

import pytest

from airflow_provider_gpusched.core.errors import InvalidArgumentError
from airflow_provider_gpusched.core.units import format_bytes, parse_bytes, slurm_time_limit


@pytest.mark.parametrize(
    "text,expected",
    [
        (1024, 1024),
        ("2.5GB", 2_500_000_000),
        ("1200MiB", 1200 * 1024**2),
        ("24G", 24 * 1024**3),
        ("24GiB", 24 * 1024**3),
        ("512", 512),
        (" 8 gib ", 8 * 1024**3),
        ("1.5T", int(1.5 * 1024**4)),
    ],
)
def test_parse_bytes(text, expected):
    assert parse_bytes(text) == expected


@pytest.mark.parametrize("bad", ["", "ten GB", "5 parsecs", "-1G", "1.2.3G", None, True, -5, [1]])
def test_parse_bytes_rejects_with_argument_name(bad):
    with pytest.raises(InvalidArgumentError) as err:
        parse_bytes(bad, argument="gpu_memory")
    assert "gpu_memory" in str(err.value)
    assert "expected" in str(err.value)


def test_format_bytes():
    assert format_bytes(24 * 1024**3) == "24.0GiB"
    assert format_bytes(512) == "512B"


@pytest.mark.parametrize(
    "value,expected",
    [
        (90, "01:30:00"),
        (timedelta(hours=2, seconds=30), "02:00:30"),
        ("01:30:00", "01:30:00"),
        ("90", "01:30:00"),
        ("5:30", "00:05:30"),
        ("2-00:00:00", "2-00:00:00"),
        ("1-12", "1-12:00:00"),
        ("UNLIMITED", "UNLIMITED"),
    ],
)
def test_slurm_time_limit(value, expected):
    assert slurm_time_limit(value) == expected


@pytest.mark.parametrize("bad", [0, -3, "soon", "1:2:3:4", timedelta(0), 1.5])
def test_slurm_time_limit_rejects(bad):
    with pytest.raises(InvalidArgumentError, match="time_limit"):
        slurm_time_limit(bad)


def test_size_fields_parse_when_set_and_read_as_bytes():
    """GPURequest's sizes (core/units.py OptionalSize, Size): given as text or bytes, held as bytes, checked as
    they are set (the error names the field), and kept through dataclasses.replace and equality."""
    import dataclasses

    from airflow_provider_gpusched.core.gpu.placement import GPURequest

    request = GPURequest(gpu_memory="10GiB", memory_margin="512MiB")
    assert (request.gpu_memory, request.memory_margin, request.host_memory) == (10 << 30, 512 << 20, None)
    assert GPURequest().memory_margin == 0 and GPURequest().gpu_memory is None
    copy = dataclasses.replace(request, host_memory="1GiB")
    assert copy.host_memory == 1 << 30 and copy.gpu_memory == 10 << 30 and copy != request
    assert dataclasses.replace(copy, host_memory=None) == request
    with pytest.raises(InvalidArgumentError, match=r"host_memory.*positive size such as '16GiB'"):
        GPURequest(host_memory=0)
    with pytest.raises(InvalidArgumentError, match=r"^min_free_ram: "):
        GPURequest(min_free_ram="lots")
    request.gpu_memory = "2GiB"
    assert request.gpu_memory == 2 << 30
