"""Create each object of a multi-document YAML (stdin) in the cluster of $KUBECONFIG, as its admin; an object that
exists is left as it is. Used by scripts/k8s-cluster.sh for the fake nodes (status included: a node's create
keeps it, as a kubelet's registration does) and the cluster's own objects."""

import contextlib
import os
import sys

import yaml
from kubernetes import config, dynamic
from kubernetes.dynamic.exceptions import ConflictError


def main() -> int:
    client = dynamic.DynamicClient(config.new_client_from_config(config_file=os.environ["KUBECONFIG"]))
    for doc in yaml.safe_load_all(sys.stdin):
        if not doc:
            continue
        api = client.resources.get(api_version=doc["apiVersion"], kind=doc["kind"])
        namespace = doc.get("metadata", {}).get("namespace")
        with contextlib.suppress(ConflictError):
            api.create(body=doc, namespace=namespace) if namespace else api.create(body=doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
