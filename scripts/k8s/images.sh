#!/usr/bin/env bash
# The test cluster's container images, built here once per machine (no registry is reachable): each a Docker
# archive that `ctr images import` loads into a node's containerd, used with imagePullPolicy: Never/IfNotPresent.
#   gpusched.local/pause:1          the pod sandbox (scripts/k8s/pause, built by scripts/k8s-build.sh)
#   gpusched.local/python:3.11      Debian 12 (debootstrap, minbase) with python3: the jobs' image in the tests
#
#   bash scripts/k8s/images.sh       prints the folder holding pause.tar and python.tar (building what is missing)
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CACHE="${GPUSCHED_K8S_CACHE:-$HOME/.cache/gpusched-k8s}"
DIR="$CACHE/images-$(sha256sum "$HERE/images.sh" | cut -c1-10)"
say() { echo "[k8s-images] $*" >&2; }

archive() {  # rootfs-folder tag out.tar [entrypoint...]: a one-layer Docker archive of the folder
  python3 - "$@" <<'PY'
import hashlib, io, json, os, sys, tarfile, tempfile
rootfs, tag, out, *entry = sys.argv[1:]
with tempfile.TemporaryDirectory() as tmp:
    layer = os.path.join(tmp, "layer.tar")
    with tarfile.open(layer, "w", format=tarfile.PAX_FORMAT) as tar:
        for name in sorted(os.listdir(rootfs)):
            tar.add(os.path.join(rootfs, name), arcname=name)
    digest = hashlib.sha256(open(layer, "rb").read()).hexdigest()
    config = {
        "architecture": "amd64", "os": "linux",
        "config": {"Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8"],
                   **({"Entrypoint": entry} if entry else {}), "Labels": {"io.gpusched.built-here": "true"}},
        "rootfs": {"type": "layers", "diff_ids": ["sha256:" + digest]},
        "history": [{"created_by": "scripts/k8s/images.sh"}],
    }
    raw = json.dumps(config, sort_keys=True).encode()
    config_name = hashlib.sha256(raw).hexdigest() + ".json"
    with tarfile.open(out + ".tmp", "w") as tar:
        def add(name, data):
            info = tarfile.TarInfo(name); info.size = len(data); tar.addfile(info, io.BytesIO(data))
        add(config_name, raw)
        tar.add(layer, arcname=digest + "/layer.tar")
        add("manifest.json", json.dumps([{"Config": config_name, "RepoTags": [tag], "Layers": [digest + "/layer.tar"]}]).encode())
    os.replace(out + ".tmp", out)
PY
}

mkdir -p "$DIR"
exec 9>"$CACHE/.images.lock"
flock 9
if [ ! -f "$DIR/python.tar" ]; then
  command -v debootstrap >/dev/null || { say "installing debootstrap (apt-get)"; bash "$HERE/../apt-install.sh" debootstrap; }
  start=$SECONDS
  rootfs="$DIR/python-rootfs"
  rm -rf "$rootfs"
  say "building gpusched.local/python:3.11 with debootstrap (Debian 12, minbase, python3; a few minutes once)"
  mirror="$(sed -n 's/^URIs: \(http[^ ]*debian\/\?\)$/\1/p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -1)"
  debootstrap --variant=minbase --include=python3,procps bookworm "$rootfs" "${mirror:-http://deb.debian.org/debian}" >"$DIR/debootstrap.log" 2>&1 \
    || { say "debootstrap failed: $DIR/debootstrap.log"; tail -5 "$DIR/debootstrap.log" >&2; exit 1; }
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* "$rootfs"/usr/share/doc "$rootfs"/usr/share/man
  archive "$rootfs" gpusched.local/python:3.11 "$DIR/python.tar"
  rm -rf "$rootfs"
  say "built in $((SECONDS - start)) s"
fi
if [ ! -f "$DIR/pause.tar" ]; then
  bin="${GPUSCHED_K8S_BIN:-$(bash "$HERE/../k8s-build.sh" core)}"
  tmp="$(mktemp -d)"
  install -m 0755 "$bin/pause" "$tmp/pause"
  archive "$tmp" gpusched.local/pause:1 "$DIR/pause.tar" /pause
  rm -rf "$tmp"
fi
echo "$DIR"
