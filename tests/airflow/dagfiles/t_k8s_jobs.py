"""The Kubernetes operator's DAGs for tests/kubernetes/test_operator.py: the cluster comes from the environment
(GPUSCHED_TEST_KUBECONFIG, GPUSCHED_TEST_NAMESPACE), as a connection's kube_config_path would give it."""

import os

from airflow.sdk import DAG

from airflow_provider_gpusched.core.kubernetes.access import ClusterAccess
from airflow_provider_gpusched.operators.kubernetes import KubernetesGpuJobOperator

ACCESS = ClusterAccess(
    kubeconfig_path=os.environ.get("GPUSCHED_TEST_KUBECONFIG", "/nonexistent"),
    namespace=os.environ.get("GPUSCHED_TEST_NAMESPACE", "default"),
    source="the test cluster",
)
REAL = {"gpusched.io/node-kind": "real"}

with DAG("k8s_train", schedule=None) as train:
    KubernetesGpuJobOperator(
        task_id="train",
        access=ACCESS,
        image="gpusched.local/python:3.11",
        image_pull_policy="Never",
        command=[
            "python3",
            "-c",
            "import os, time\nfor e in range(3):\n    print('epoch', e, 'gpus', os.environ['CUDA_VISIBLE_DEVICES'], flush=True)\n    time.sleep(1)",
        ],
        gpus=1,
        node_selector=REAL,
    )

with DAG("k8s_broken_image", schedule=None) as broken:
    KubernetesGpuJobOperator(
        task_id="train",
        access=ACCESS,
        image="gpusched.local/not-built:1",
        image_pull_policy="Never",
        command=["true"],
        node_selector=REAL,
        retries=3,
    )

with DAG("k8s_exit_code", schedule=None) as exits:
    KubernetesGpuJobOperator(
        task_id="train",
        access=ACCESS,
        image="gpusched.local/python:3.11",
        image_pull_policy="Never",
        command=["python3", "-c", "import sys; print('diverged at step 7', flush=True); sys.exit(5)"],
        node_selector=REAL,
        deferrable=False,
        poll_interval=1,
    )
