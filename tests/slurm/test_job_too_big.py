"""Issue 76: a job that no node can hold is refused with what the largest node of its partition has, through the CLI,
ssh and slurmrestd (Slurm itself says only "Requested node configuration is not available")."""

import pytest

from airflow_provider_gpusched.core.slurm import SSHTransport, client_for
from airflow_provider_gpusched.core.slurm.job import SlurmJobSpec
from airflow_provider_gpusched.core.slurm.transport import SlurmCommandError

from .conftest import over_every_transport

pytestmark = pytest.mark.slurm

#: the test cluster: nodes n1 and n2 in batch (the default) and idle, 8 CPUs, 16000 MB and 4 GPUs each
LARGEST = "partition 'batch' has 2 node(s); the largest has 4 GPU(s), 8 CPUs and 16000 MB of memory (n1, n2)"


@over_every_transport
def test_a_job_asking_for_16_gpus_is_told_the_largest_node_has_4(client, out):
    with pytest.raises(SlurmCommandError) as refused:
        client.submit(SlurmJobSpec(command=["true"], gpus=16, output=out()))
    text = str(refused.value)
    assert "Requested node configuration is not available — " + LARGEST in text, text
    assert "; this job asks for 16 GPUs on each node" in text


def test_the_same_through_ssh(slurm_cluster, login_host, out):
    port, options = login_host
    client = client_for(
        SSHTransport(host="127.0.0.1", user="root", port=port, ssh_options=options, slurm_conf=slurm_cluster)
    )
    with pytest.raises(SlurmCommandError) as refused:
        client.submit(SlurmJobSpec(command=["true"], gpus=16, output=out()))
    assert LARGEST + "; this job asks for 16 GPUs on each node" in str(refused.value)
