"""Benchmark: API requests to follow many deferred Kubernetes jobs, the shared watch against the cncf provider.

On the project's test cluster (scripts/k8s-cluster.sh: started here if KUBECONFIG is not given), N Jobs are created
on kwok's fake GPU nodes (their pods run and stay running: nothing is executed), then followed for a window of W
seconds twice, each as a triggerer would, in one event loop:

  shared   N waiters on one SharedJobWatch (what KubernetesJobTrigger does: a Job watch and a pod watch per
           namespace for every trigger of the process)
  cncf     N KubernetesPodTrigger.run() of apache-airflow-providers-cncf-kubernetes (the KubernetesPodOperator's
           deferrable mode), each on its own pod, at its poll interval (2 s, its default)

The requests are counted by the API server itself (apiserver_request_total on /metrics, by verb and resource), less
what the cluster does on its own in a window of the same length with no waiter (controllers, kwok). The cncf
provider is installed into a folder of its own (.bench-cncf/, pip --target, no dependencies: our .venv has the rest).

    .venv/bin/python bench/kubernetes_watch.py [--jobs 1000] [--window 60]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import os
import platform
import re
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CNCF = REPO / ".bench-cncf"
CNCF_VERSION = "10.25.0"
ON_KWOK = {
    "node_selector": {"type": "kwok"},
    "tolerations": [{"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}],
    # on the pod (kwok's stages read the pod's annotations): it stays Running through the windows
    "pod_template": {
        "metadata": {
            "annotations": {
                "pod-complete.stage.kwok.x-k8s.io/delay": "24h",
                "pod-complete.stage.kwok.x-k8s.io/jitter-delay": "24h",
            }
        },
        "spec": {"containers": [{"name": "main", "image": "gpusched.local/python:3.11"}]},
    },
}
_METRIC = re.compile(r"^apiserver_request_total\{(?P<labels>[^}]*)\} (?P<value>[0-9.e+]+)$")


def requests(api) -> Counter:
    """apiserver_request_total by (verb, resource), as the server counts them."""
    # the client's own connection pool: its TLS client certificate is the admin's
    text = api.rest_client.pool_manager.request("GET", api.configuration.host + "/metrics").data.decode()
    out: Counter = Counter()
    for line in text.splitlines():
        m = _METRIC.match(line)
        if not m:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m["labels"]))
        out[(labels.get("verb", ""), labels.get("resource", ""))] += float(m["value"])
    return out


def delta(before: Counter, after: Counter) -> Counter:
    return Counter({k: after[k] - before[k] for k in after if after[k] - before[k] > 0})


def install_cncf() -> None:
    if (CNCF / "airflow" / "providers" / "cncf" / "kubernetes").is_dir():
        return
    print(f"installing apache-airflow-providers-cncf-kubernetes {CNCF_VERSION} into {CNCF} (once)", flush=True)
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(CNCF),
         f"apache-airflow-providers-cncf-kubernetes=={CNCF_VERSION}", "kubernetes_asyncio==35.0.1", "aiofiles==25.1.0"],
        check=True,
    )  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--window", type=float, default=60.0)
    args = parser.parse_args()
    kubeconfig = os.environ.get("KUBECONFIG")
    started_here = False
    if not kubeconfig:
        env = {
            **os.environ,
            "GPUSCHED_K8S_ROOT": str(REPO / ".k8s-bench"),
            "GPUSCHED_K8S_FAKE_NODES": "64",
            "GPUSCHED_K8S_FAKE_GPUS": "8",
        }
        subprocess.run(["bash", str(REPO / "scripts" / "k8s-cluster.sh"), "up"], env=env, check=True)
        kubeconfig, started_here = str(REPO / ".k8s-bench" / "kubeconfig"), True
    try:
        return run(kubeconfig, args.jobs, args.window)
    finally:
        if started_here:
            subprocess.run(
                ["bash", str(REPO / "scripts" / "k8s-cluster.sh"), "down"],
                env={**os.environ, "GPUSCHED_K8S_ROOT": str(REPO / ".k8s-bench")},
            )


def run(kubeconfig: str, jobs: int, window: float) -> int:
    from kubernetes import client

    from airflow_provider_gpusched.core.kubernetes.access import ClusterAccess
    from airflow_provider_gpusched.core.kubernetes.job_spec import job_spec
    from airflow_provider_gpusched.core.kubernetes.jobs import JobClient
    from airflow_provider_gpusched.core.kubernetes.watch import SharedJobWatch
    from airflow_provider_gpusched.core.work_tag import WorkTag

    namespace = f"bench-{uuid.uuid4().hex[:6]}"
    access = ClusterAccess(kubeconfig_path=kubeconfig, namespace=namespace, source="the bench cluster")
    api = access.api_client()
    core = client.CoreV1Api(api)
    core.create_namespace({"metadata": {"name": namespace}})
    spec = job_spec({"command": ["true"], "gpus": 1, **ON_KWOK})
    t0 = time.monotonic()
    names = []
    with JobClient(access) as jc:
        for i in range(jobs):
            tag = WorkTag(dag_id="bench", run_id="r", task_id="t", map_index=i, try_number=1)
            names.append(jc.submit(spec, tag, preflight=i == 0).name)
    print(f"{jobs} Jobs created in {time.monotonic() - t0:.0f} s", flush=True)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        running = sum(p.status.phase == "Running" for p in core.list_namespaced_pod(namespace).items)
        if running >= jobs:
            break
        time.sleep(2)
    pods = {p.metadata.labels["job-name"]: p.metadata.name for p in core.list_namespaced_pod(namespace).items}
    print(f"{len(pods)} pods running on kwok's nodes", flush=True)

    before = requests(api)
    time.sleep(window)
    idle = delta(before, requests(api))

    async def shared() -> Counter:
        watch = SharedJobWatch(access, namespace)
        watch.start()
        subs = [watch.subscribe(n) for n in names]
        b = requests(api)
        end = time.monotonic() + window
        while time.monotonic() < end:  # each waiter looks at its Job on each change, as the trigger does
            await asyncio.sleep(1)
            for s in subs:
                s.snapshot()
        d = delta(b, requests(api))
        for s in subs:
            s.close()
        watch.stop()
        return d

    ours = asyncio.run(shared())

    install_cncf()
    sys.path.append(str(CNCF))  # after the .venv: its airflow/ holds only the provider
    os.environ.setdefault("AIRFLOW__CORE__UNIT_TEST_MODE", "False")
    import yaml
    from airflow.providers.cncf.kubernetes.triggers.pod import KubernetesPodTrigger

    config = yaml.safe_load(Path(kubeconfig).read_text())

    async def cncf() -> Counter:
        triggers = [
            KubernetesPodTrigger(
                pod_name=pods[n],
                pod_namespace=namespace,
                trigger_start_time=datetime.datetime.now(datetime.timezone.utc),
                base_container_name="main",
                config_dict=config,
                poll_interval=2,
                get_logs=False,
                startup_timeout=3600,
            )  # fmt: skip
            for n in names
            if n in pods
        ]

        async def one(t):
            async for _ in t.run():
                return

        tasks = [asyncio.create_task(one(t)) for t in triggers]
        await asyncio.sleep(5)  # their clients made and first reads done
        b = requests(api)
        await asyncio.sleep(window)
        d = delta(b, requests(api))
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        return d

    theirs = asyncio.run(cncf())
    core.delete_namespace(namespace, propagation_policy="Background")
    api.close()

    def less_idle(d: Counter) -> Counter:
        return Counter({k: v - idle.get(k, 0) for k, v in d.items() if v - idle.get(k, 0) > 0.5})

    print(
        f"\n{platform.node()}, {os.cpu_count()} CPUs, {time.strftime('%Y-%m-%d')}: {jobs} deferred jobs, {window:.0f} s window"
    )
    print(f"{'design':<10}{'requests':>10}{'per second':>12}  by verb and resource (less the idle cluster's)")
    for name, d in (("shared", less_idle(ours)), ("cncf", less_idle(theirs))):
        total = sum(d.values())
        detail = ", ".join(f"{v:.0f} {verb} {res}" for (verb, res), v in d.most_common(5))
        print(f"{name:<10}{total:>10.0f}{total / window:>12.1f}  {detail}")
    print(f"{'idle':<10}{sum(idle.values()):>10.0f}{sum(idle.values()) / window:>12.1f}  the cluster on its own")
    return 0


if __name__ == "__main__":
    sys.exit(main())
