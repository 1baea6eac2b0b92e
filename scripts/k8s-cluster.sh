#!/usr/bin/env bash
# Bring up / tear down a throw-away Kubernetes cluster for tests and the demo (root), built from Go modules here
# (scripts/k8s-build.sh: no registry, no kind, no release download is reachable from these machines).
#
#   scripts/k8s-cluster.sh up       build the programs once per machine (cached), start etcd, kube-apiserver,
#                                   kube-controller-manager, kube-scheduler, kwok's fake nodes and, with
#                                   GPUSCHED_K8S_NODES=N, N real nodes (scripts/k8s-nodes.sh); waits until every node
#                                   is Ready
#   scripts/k8s-cluster.sh down     stop what this cluster started, remove its nodes' namespaces and links, restore
#                                   the host settings a kubelet changed, delete its state (nothing is left behind)
#   scripts/k8s-cluster.sh env      print `export KUBECONFIG=...` (the cluster's admin: system:masters)
#   scripts/k8s-cluster.sh status   each program's pid and the nodes
#
# The control plane runs on this host, at the address of a bridge of its own (10.206.X.1, X chosen free, kept in
# $root/net), with TLS everywhere, a CA of the cluster's own, RBAC and the Node authorizer, service-account tokens
# signed by its key: as a real cluster runs, so that the product's permission checks meet real answers. Ports are
# the first free ones (several clusters side by side: one per test worker). State lives under $GPUSCHED_K8S_ROOT
# (default <repo>/.k8s).
#
# Fake GPU nodes (kwok): GPUSCHED_K8S_FAKE_NODES (default 4) nodes named kwok-1.. with GPUSCHED_K8S_FAKE_GPUS
# (default 8) nvidia.com/gpu each, label type=kwok, taint kwok.x-k8s.io/node=fake:NoSchedule (a pod must tolerate
# it: no real work lands there by mistake). Their pods run nothing: kwok's stages move them (Running, then Succeeded
# after the delay in the pod annotation pod-complete.stage.kwok.x-k8s.io/delay; the chaos stages fail a container
# when asked). For scale, admission and preemption: pods need not run.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
root="$(realpath -m "${GPUSCHED_K8S_ROOT:-$here/.k8s}")"
fake_nodes="${GPUSCHED_K8S_FAKE_NODES:-4}"
fake_gpus="${GPUSCHED_K8S_FAKE_GPUS:-8}"
real_nodes="${GPUSCHED_K8S_NODES:-0}"
log() { echo "[k8s-cluster] $*" >&2; }

for v in fake_nodes fake_gpus real_nodes; do
  case "${!v}" in ''|*[!0-9]*) log "GPUSCHED_K8S_${v^^}=${!v}: expected a whole number"; exit 2 ;; esac
done
[ "$real_nodes" -le 9 ] || { log "GPUSCHED_K8S_NODES=$real_nodes: at most 9 real nodes"; exit 2; }

need_root() {
  if [ "$(id -u)" != 0 ]; then
    log "must run as root (the nodes are namespaces, the kubelet manages cgroups); try: sudo $0 $*"
    exit 2
  fi
}

pid_alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

stop_pidfile() {
  local f="$1"
  if pid_alive "$f"; then
    local pid; pid="$(cat "$f")"
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$f"
}

# the first TCP port from $1 that nothing listens on here, and that no other cluster of this machine took
free_port() {
  local used=" " f local_ state rest p
  for f in /proc/net/tcp /proc/net/tcp6; do
    [ -r "$f" ] || continue
    while read -r _ local_ _ state rest; do
      [ "$state" = 0A ] && used+="$((16#${local_##*:})) "
    done <"$f"
  done
  used+="$(cat /run/gpusched-k8s-ports/* 2>/dev/null | tr '\n' ' ' || true) "
  for ((p = $1; p < $1 + 500; p++)); do
    case "$used" in *" $p "*) ;; *) echo "$p"; return ;; esac
  done
  log "no free port from $1"; exit 1
}

# -- the network: one bridge of this cluster's (the control plane's address; the real nodes' links) --------------
net_octet() {
  if [ -f "$root/net" ]; then cat "$root/net"; return; fi
  local x
  for x in $(shuf -i 20-250 -n 60); do
    ip -4 addr | grep -q "10\.206\.$x\." || ip link show "gsk${x}br" >/dev/null 2>&1 || break
  done
  mkdir -p "$root" && echo "$x" >"$root/net"
  echo "$x"
}
head_addr() { echo "10.206.$(net_octet).1"; }

make_bridge() {
  local br; br="gsk$(net_octet)br"
  if ! ip link show "$br" >/dev/null 2>&1; then
    ip link add "$br" type bridge
    ip addr add "$(head_addr)/24" dev "$br"
    ip link set "$br" up
  fi
}

remove_bridge() {
  [ -f "$root/net" ] || return 0
  ip link del "gsk$(cat "$root/net")br" 2>/dev/null || true
}

# -- certificates: the cluster's CA and one key pair per client and server ----------------------------------------
pki="$root/pki"
cert() {  # name CN O [SANs]: a key and a certificate signed by the cluster's CA
  local name="$1" cn="$2" org="$3" sans="${4:-}"
  [ -f "$pki/$name.crt" ] && return
  openssl genrsa -out "$pki/$name.key" 2048 2>/dev/null
  local subj="/CN=$cn"; [ -z "$org" ] || subj="/O=$org$subj"
  openssl req -new -key "$pki/$name.key" -subj "$subj" -out "$pki/$name.csr" 2>/dev/null
  {
    echo "basicConstraints=CA:FALSE"
    echo "keyUsage=critical,digitalSignature,keyEncipherment"
    echo "extendedKeyUsage=serverAuth,clientAuth"
    [ -z "$sans" ] || echo "subjectAltName=$sans"
  } >"$pki/$name.ext"
  openssl x509 -req -in "$pki/$name.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial -days 30 \
    -extfile "$pki/$name.ext" -out "$pki/$name.crt" 2>/dev/null
  rm -f "$pki/$name.csr" "$pki/$name.ext"
  chmod 600 "$pki/$name.key"
}

make_pki() {
  mkdir -p "$pki" && chmod 700 "$pki"
  if [ ! -f "$pki/ca.crt" ]; then
    openssl genrsa -out "$pki/ca.key" 2048 2>/dev/null
    openssl req -x509 -new -key "$pki/ca.key" -subj "/CN=gpusched-test-cluster-ca" -days 30 -out "$pki/ca.crt" \
      -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" \
      2>/dev/null
    openssl genrsa -out "$pki/sa.key" 2048 2>/dev/null
    openssl rsa -in "$pki/sa.key" -pubout -out "$pki/sa.pub" 2>/dev/null
  fi
  cert apiserver kube-apiserver "" \
    "IP:$(head_addr),IP:127.0.0.1,IP:10.96.0.1,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:localhost"
  cert apiserver-kubelet-client kube-apiserver-kubelet-client system:masters
  cert admin gpusched-admin system:masters
  cert controller-manager system:kube-controller-manager ""
  cert scheduler system:kube-scheduler ""
  cert kwok kwok-controller system:masters
  cert etcd etcd "" "IP:127.0.0.1"
}

kubeconfig() {  # file client-cert-name
  cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: gpusched-test
  cluster:
    certificate-authority: $pki/ca.crt
    server: https://$(head_addr):$(cat "$root/apiserver-port")
users:
- name: $2
  user:
    client-certificate: $pki/$2.crt
    client-key: $pki/$2.key
contexts:
- name: gpusched-test
  context: {cluster: gpusched-test, user: $2}
current-context: gpusched-test
EOF
  chmod 600 "$1"
}

bin_dir() {  # GPUSCHED_K8S_BIN: the programs built elsewhere (same names); else built here once (cached)
  if [ -n "${GPUSCHED_K8S_BIN:-}" ]; then echo "$GPUSCHED_K8S_BIN"; else bash "$here/scripts/k8s-build.sh" core; fi
}

start_daemon() {  # name command...: started in its own session, its log and pid under $root
  local name="$1"; shift
  pid_alive "$root/run/$name.pid" && return
  setsid "$@" >>"$root/log/$name.log" 2>&1 </dev/null &
  echo $! >"$root/run/$name.pid"
}

api() {  # GET path as the admin: the body, or fail
  curl -sf --max-time 5 --cacert "$pki/ca.crt" --cert "$pki/admin.crt" --key "$pki/admin.key" \
    "https://$(head_addr):$(cat "$root/apiserver-port")$1"
}

wait_for() {  # what seconds command...
  local what="$1" seconds="$2"; shift 2
  local i
  for ((i = 0; i < seconds * 5; i++)); do
    "$@" >/dev/null 2>&1 && return 0
    sleep 0.2
  done
  log "$what not ready after $seconds s; logs in $root/log"
  tail -n 15 "$root"/log/*.log >&2 || true
  return 1
}

reserve_ports() {  # each program's port, the first free from its base, kept under $root and in /run (taken)
  mkdir -p /run/gpusched-k8s-ports
  local key name base
  key="$(printf '%s' "$root" | sha256sum | cut -c1-12)"
  for name in etcd-port:23790 etcd-peer-port:23800 apiserver-port:26443 kwok-port:20247; do
    base="${name#*:}"; name="${name%%:*}"
    [ -s "$root/$name" ] || free_port "$base" >"$root/$name"
    cat "$root/$name" >>"/run/gpusched-k8s-ports/$key"
  done
}

kwok_stages() {  # kwok's general pod stages (annotations set delays) and its chaos stages (a container fails)
  local src
  src="$(GOMODCACHE="${GPUSCHED_K8S_CACHE:-$HOME/.cache/gpusched-k8s}/go-mod" GOFLAGS=-mod=mod \
    go list -m -f '{{.Dir}}' -modfile=/dev/null sigs.k8s.io/kwok@v0.7.0 2>/dev/null || true)"
  [ -n "$src" ] || src="${GPUSCHED_K8S_CACHE:-$HOME/.cache/gpusched-k8s}/go-mod/sigs.k8s.io/kwok@v0.7.0"
  local f first=1
  for f in "$src"/kustomize/stage/pod/general/*.yaml "$src"/kustomize/stage/pod/chaos/*.yaml \
      "$src"/kustomize/stage/node/fast/*.yaml; do
    case "$(basename "$f")" in kustomization.yaml) continue ;; esac
    [ "$first" = 1 ] || echo "---"
    first=0
    cat "$f"
  done
}

start_control_plane() {
  local bin addr
  bin="$(bin_dir)"; addr="$(head_addr)"
  mkdir -p "$root/run" "$root/log" "$root/etcd"
  chmod 700 "$root/etcd"
  start_daemon etcd "$bin/etcd" --name gpusched --data-dir "$root/etcd" \
    --listen-client-urls "https://127.0.0.1:$(cat "$root/etcd-port")" \
    --advertise-client-urls "https://127.0.0.1:$(cat "$root/etcd-port")" \
    --listen-peer-urls "http://127.0.0.1:$(cat "$root/etcd-peer-port")" \
    --initial-advertise-peer-urls "http://127.0.0.1:$(cat "$root/etcd-peer-port")" \
    --initial-cluster "gpusched=http://127.0.0.1:$(cat "$root/etcd-peer-port")" \
    --cert-file "$pki/etcd.crt" --key-file "$pki/etcd.key" --client-cert-auth --trusted-ca-file "$pki/ca.crt" \
    --unsafe-no-fsync --quota-backend-bytes 2147483648
  start_daemon kube-apiserver "$bin/kube-apiserver" \
    --etcd-servers "https://127.0.0.1:$(cat "$root/etcd-port")" --etcd-cafile "$pki/ca.crt" \
    --etcd-certfile "$pki/admin.crt" --etcd-keyfile "$pki/admin.key" \
    --bind-address "$addr" --advertise-address "$addr" --secure-port "$(cat "$root/apiserver-port")" \
    --tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key" --client-ca-file "$pki/ca.crt" \
    --kubelet-client-certificate "$pki/apiserver-kubelet-client.crt" \
    --kubelet-client-key "$pki/apiserver-kubelet-client.key" \
    --service-account-key-file "$pki/sa.pub" --service-account-signing-key-file "$pki/sa.key" \
    --service-account-issuer https://kubernetes.default.svc --service-cluster-ip-range 10.96.0.0/16 \
    --authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction,Priority \
    --kubelet-preferred-address-types InternalIP,Hostname \
    --allow-privileged=true --profiling=false --event-ttl 30m --v 1
  wait_for "kube-apiserver" 90 api /readyz
  kubeconfig "$root/kubeconfig" admin
  kubeconfig "$root/controller-manager.kubeconfig" controller-manager
  kubeconfig "$root/scheduler.kubeconfig" scheduler
  kubeconfig "$root/kwok.kubeconfig" kwok
  # node-monitor-grace-period: a node whose kubelet stopped is NotReady after 20 s (the default 40 s), its pods'
  # eviction after a further 30 s (the taint-based default 300 s), so node-loss tests take under a minute
  start_daemon kube-controller-manager "$bin/kube-controller-manager" \
    --kubeconfig "$root/controller-manager.kubeconfig" --authentication-kubeconfig "$root/controller-manager.kubeconfig" \
    --authorization-kubeconfig "$root/controller-manager.kubeconfig" \
    --service-account-private-key-file "$pki/sa.key" --root-ca-file "$pki/ca.crt" \
    --cluster-signing-cert-file "$pki/ca.crt" --cluster-signing-key-file "$pki/ca.key" \
    --use-service-account-credentials --leader-elect=false --bind-address 127.0.0.1 --secure-port 0 \
    --node-monitor-grace-period 20s --controllers '*,-nodeipam,-service-lb-controller,-cloud-node-lifecycle' \
    --concurrent-job-syncs 20 --kube-api-qps 100 --kube-api-burst 200 --v 1
  start_daemon kube-scheduler "$bin/kube-scheduler" --kubeconfig "$root/scheduler.kubeconfig" \
    --authentication-kubeconfig "$root/scheduler.kubeconfig" --authorization-kubeconfig "$root/scheduler.kubeconfig" \
    --leader-elect=false --bind-address 127.0.0.1 --secure-port 0 --kube-api-qps 200 --kube-api-burst 400 --v 1
  [ "$fake_nodes" != 0 ] || return 0
  kwok_stages >"$root/kwok-stages.yaml"
  start_daemon kwok "$bin/kwok" --kubeconfig "$root/kwok.kubeconfig" --config "$root/kwok-stages.yaml" \
    --manage-nodes-with-label-selector type=kwok --server-address "127.0.0.1:$(cat "$root/kwok-port")" \
    --node-lease-duration-seconds 40 --cidr 10.207.0.0/16 --node-ip 10.206.0.2
}

apply() {  # a manifest (stdin) through the API, as the admin: server-side apply of each object
  local py="$here/.venv/bin/python"; [ -x "$py" ] || py=python3
  KUBECONFIG="$root/kubeconfig" "$py" "$here/scripts/k8s/apply.py"
}

fake_nodes_manifest() {
  local i
  for ((i = 1; i <= fake_nodes; i++)); do
    cat <<EOF
---
apiVersion: v1
kind: Node
metadata:
  name: kwok-$i
  annotations: {node.alpha.kubernetes.io/ttl: "0", kwok.x-k8s.io/node: fake}
  labels:
    type: kwok
    kubernetes.io/hostname: kwok-$i
    kubernetes.io/role: agent
    gpusched.io/simulated-gpu: "true"
    nvidia.com/gpu.product: SIMULATED-80GB
spec:
  taints: [{key: kwok.x-k8s.io/node, value: fake, effect: NoSchedule}]
status:
  allocatable: {cpu: "64", memory: 512Gi, pods: "110", nvidia.com/gpu: "$fake_gpus"}
  capacity: {cpu: "64", memory: 512Gi, pods: "110", nvidia.com/gpu: "$fake_gpus"}
  nodeInfo: {kubeletVersion: fake, kubeProxyVersion: fake, architecture: amd64, operatingSystem: linux}
  phase: Running
EOF
  done
}

nodes_ready() {  # every node this cluster should have is Ready, and has its GPUs (a real node's plugin registered)
  local want=$((fake_nodes + real_nodes))
  [ "$(api /api/v1/nodes | python3 -c '
import json, sys
nodes = json.load(sys.stdin)["items"]
gpus = int(sys.argv[1])
print(sum(
    1 for n in nodes for c in n["status"].get("conditions", [])
    if c["type"] == "Ready" and c["status"] == "True"
    and (gpus == 0 or int(n["status"].get("allocatable", {}).get("nvidia.com/gpu", "0")) > 0)
))
' "${GPUSCHED_K8S_NODE_GPUS:-4}")" -ge "$want" ]
}

up() {
  need_root up
  command -v openssl >/dev/null || { log "openssl is needed (apt-get install openssl)"; exit 1; }
  mkdir -p "$root" && chmod 700 "$root"
  if pid_alive "$root/run/kube-apiserver.pid"; then
    log "already running (KUBECONFIG=$root/kubeconfig)"
  else
    [ -f "$root/net" ] && [ ! -f "$root/run/kube-apiserver.pid" ] && down_quiet
    make_bridge
    reserve_ports
    make_pki
    start_control_plane
  fi
  wait_for "the default service account" 60 api /api/v1/namespaces/default/serviceaccounts/default
  [ "$fake_nodes" = 0 ] || fake_nodes_manifest | apply
  if [ "$real_nodes" != 0 ]; then
    GPUSCHED_K8S_ROOT="$root" GPUSCHED_K8S_HEAD="$(head_addr)" bash "$here/scripts/k8s-nodes.sh" up "$real_nodes"
  fi
  wait_for "the nodes" 120 nodes_ready
  log "up: $(api /api/v1/nodes | python3 -c '
import json, sys
print(" ".join(n["metadata"]["name"] + "(" + n["status"]["allocatable"].get("nvidia.com/gpu", "0") + " GPUs)" for n in json.load(sys.stdin)["items"]))
') (KUBECONFIG=$root/kubeconfig)"
}

down_quiet() {
  if [ -x "$here/scripts/k8s-nodes.sh" ] || [ -f "$here/scripts/k8s-nodes.sh" ]; then
    GPUSCHED_K8S_ROOT="$root" bash "$here/scripts/k8s-nodes.sh" down || true
  fi
  local name
  for name in kwok kube-scheduler kube-controller-manager kube-apiserver etcd; do stop_pidfile "$root/run/$name.pid"; done
  remove_bridge
  rm -f "/run/gpusched-k8s-ports/$(printf '%s' "$root" | sha256sum | cut -c1-12)"
}

down() {
  need_root down
  down_quiet
  rm -rf "$root"
  log "down: $root removed"
}

status() {
  local f
  for f in "$root"/run/*.pid; do
    [ -f "$f" ] || continue
    if pid_alive "$f"; then echo "$(basename "$f" .pid) $(cat "$f")"; else echo "$(basename "$f" .pid) dead"; fi
  done
  [ -f "$root/apiserver-port" ] && api /api/v1/nodes | python3 -c '
import json, sys
for n in json.load(sys.stdin)["items"]:
    ready = [c["status"] for c in n["status"].get("conditions", []) if c["type"] == "Ready"]
    print(n["metadata"]["name"], "Ready=" + (ready[0] if ready else "?"), n["status"]["allocatable"].get("nvidia.com/gpu", "0"), "GPUs")
' || true
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  env) echo "export KUBECONFIG=$root/kubeconfig" ;;
  status) status ;;
  *) echo "usage: $0 up|down|env|status" >&2; exit 2 ;;
esac
