#!/usr/bin/env bash
# The test cluster's real nodes (called by scripts/k8s-cluster.sh; root): each a kubelet with its own containerd
# (Debian's 1.6 and runc), CNI bridge and simulated-GPU device plugin, in a network namespace of its own on the
# cluster's bridge (10.206.X.1x), a UTS namespace (its hostname) and a mount namespace where /var/lib/kubelet,
# /var/log/pods, /var/log/containers and /etc/hosts are the node's own folders (two kubelets on one host would
# otherwise share the device plugins' socket folder, which the kubelet does not let one move).
#
#   GPUSCHED_K8S_ROOT=... GPUSCHED_K8S_HEAD=10.206.X.1 bash scripts/k8s-nodes.sh up N
#   GPUSCHED_K8S_ROOT=... bash scripts/k8s-nodes.sh down
#   GPUSCHED_K8S_ROOT=... bash scripts/k8s-nodes.sh kill NAME | start NAME   (a node that dies and comes back)
#
# Nodes are named node-1.. with GPUSCHED_K8S_NODE_GPUS (default 4) simulated nvidia.com/gpu each (label
# gpusched.io/simulated-gpu=true; each container gets CUDA_VISIBLE_DEVICES for the devices it was given). The images
# (scripts/k8s/images.sh) are imported into every node. The host settings a kubelet changes (vm.overcommit_memory,
# vm.panic_on_oom, kernel.panic, kernel.panic_on_oops) are saved at the first node's start and restored by down.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
root="$(realpath -m "${GPUSCHED_K8S_ROOT:?GPUSCHED_K8S_ROOT is the cluster\'s folder}")"
gpus="${GPUSCHED_K8S_NODE_GPUS:-4}"
log() { echo "[k8s-nodes] $*" >&2; }
pki="$root/pki"
SYSCTLS=(vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops)

pid_alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }
x() { cat "$root/net"; }
node_ns() { echo "gsk$(x)n$1"; }
node_addr() { echo "10.206.$(x).$(( $1 + 10 ))"; }
node_dir() { echo "$root/nodes/node-$1"; }

install_packages() {
  local missing=()
  command -v containerd >/dev/null || missing+=(containerd)
  command -v runc >/dev/null || missing+=(runc)
  [ -x /usr/lib/cni/bridge ] || missing+=(containernetworking-plugins)
  command -v debootstrap >/dev/null || missing+=(debootstrap)
  command -v conntrack >/dev/null || missing+=(conntrack)
  if [ "${#missing[@]}" != 0 ]; then
    log "installing ${missing[*]} with apt-get (once per machine)"
    GPUSCHED_APT_NO_START=1 bash "$here/scripts/apt-install.sh" "${missing[@]}"
  fi
}

node_cert() {  # node i: the kubelet's client certificate (system:node:NAME) and its serving certificate
  local i="$1" name="node-$1" d; d="$(node_dir "$1")"
  [ -f "$d/kubelet.crt" ] && return
  openssl genrsa -out "$d/kubelet.key" 2048 2>/dev/null
  openssl req -new -key "$d/kubelet.key" -subj "/O=system:nodes/CN=system:node:$name" -out "$d/kubelet.csr" 2>/dev/null
  printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth,clientAuth\nsubjectAltName=IP:%s,DNS:%s\n' \
    "$(node_addr "$i")" "$name" >"$d/kubelet.ext"
  openssl x509 -req -in "$d/kubelet.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial -days 30 \
    -extfile "$d/kubelet.ext" -out "$d/kubelet.crt" 2>/dev/null
  rm -f "$d/kubelet.csr" "$d/kubelet.ext"
  chmod 600 "$d/kubelet.key"
}

node_files() {  # node i's configuration: containerd, CNI, kubelet, kubeconfig, hosts
  local i="$1" name="node-$1" d; d="$(node_dir "$1")"
  mkdir -p "$d"/{containerd,cni,cni-ipam,kubelet,pods-log,containers-log,run} && chmod 700 "$d"
  cat >"$d/containerd.toml" <<EOF
version = 2
root = "$d/containerd/root"
state = "$d/containerd/state"
[grpc]
  address = "$d/run/containerd.sock"
[plugins."io.containerd.internal.v1.opt"]
  path = "$d/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "gpusched.local/pause:1"
  # root here lacks CAP_SYS_RESOURCE (a container of the machine's own): runc could not lower a container's
  # oom_score_adj below this one's, which containerd otherwise asks for
  restrict_oom_score_adj = true
  enable_cdi = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$d/cni"
EOF
  cat >"$d/cni/10-gpusched.conflist" <<EOF
{"cniVersion": "0.4.0", "name": "gpusched", "plugins": [
  {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.244.$i.0/24"}]], "dataDir": "$d/cni-ipam"}}
]}
EOF
  cat >"$d/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $(node_addr "$i")
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
tlsCertFile: $d/kubelet.crt
tlsPrivateKeyFile: $d/kubelet.key
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $pki/ca.crt}
authorization: {mode: Webhook}
containerRuntimeEndpoint: unix://$d/run/containerd.sock
cgroupDriver: cgroupfs
# each node's pods in a cgroup tree of its own: two kubelets on one host would otherwise share /kubepods
cgroupRoot: /gpusched-k8s-$(x)-$name
failCgroupV1: false
failSwapOn: false
protectKernelDefaults: false
makeIPTablesUtilChains: false
serializeImagePulls: false
maxPods: 30
# the machine's disk is shared with everything else: evict on nothing but a nearly full memory
evictionHard: {memory.available: "200Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
nodeStatusUpdateFrequency: 5s
nodeStatusReportFrequency: 10s
syncFrequency: 10s
fileCheckFrequency: 10s
shutdownGracePeriod: 0s
EOF
  cat >"$d/kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: gpusched-test
  cluster: {certificate-authority: $pki/ca.crt, server: "https://$GPUSCHED_K8S_HEAD:$(cat "$root/apiserver-port")"}
users:
- name: $name
  user: {client-certificate: $d/kubelet.crt, client-key: $d/kubelet.key}
contexts:
- name: gpusched-test
  context: {cluster: gpusched-test, user: $name}
current-context: gpusched-test
EOF
  chmod 600 "$d/kubeconfig"
  {
    echo "127.0.0.1 localhost"
    local j
    for ((j = 1; j <= $(cat "$root/real-nodes"); j++)); do echo "$(node_addr "$j") node-$j"; done
  } >"$d/hosts"
}

make_link() {  # node i's network namespace and its link to the cluster's bridge
  local i="$1" ns; ns="$(node_ns "$1")"
  [ -e "/run/netns/$ns" ] && return
  ip netns add "$ns"
  ip link add "${ns}h" type veth peer name "${ns}"
  ip link set "${ns}" netns "$ns"
  ip link set "${ns}h" master "gsk$(x)br"
  ip link set "${ns}h" up
  ip netns exec "$ns" ip addr add "$(node_addr "$i")/24" dev "$ns"
  ip netns exec "$ns" ip link set "$ns" up
  ip netns exec "$ns" ip link set lo up
  ip netns exec "$ns" ip route add default via "$GPUSCHED_K8S_HEAD"
}

save_sysctls() {
  [ -f "$root/host-sysctls" ] && return
  local s
  for s in "${SYSCTLS[@]}"; do echo "$s=$(sysctl -n "$s")"; done >"$root/host-sysctls"
}

restore_sysctls() {
  [ -f "$root/host-sysctls" ] || return 0
  local line
  while read -r line; do sysctl -q -w "$line" >/dev/null || true; done <"$root/host-sysctls"
  rm -f "$root/host-sysctls"
}

# node i: containerd, then its images, the kubelet and the device plugin, in the node's namespaces (nsenter: the
# network namespace; unshare: its own hostname and mounts). One supervisor shell per node holds them; its pid is
# the node's (kill: the node dies).
start_node() {
  local i="$1" name="node-$1" d bin images
  d="$(node_dir "$1")"
  pid_alive "$d/node.pid" && return
  bin="${GPUSCHED_K8S_BIN:-$(bash "$here/scripts/k8s-build.sh" bin)}"; images="$(bash "$here/scripts/k8s/images.sh")"
  ip link set "$(node_ns "$i")h" up 2>/dev/null || true
  setsid nsenter --net="/run/netns/$(node_ns "$i")" unshare --uts --mount --propagation private -- \
    bash -c '
      set -e
      d="$1"; name="$2"; bin="$3"; images="$4"; gpus="$5"; labels="$6"; addr="$7"
      hostname "$name"
      mount --bind "$d/hosts" /etc/hosts
      mkdir -p /var/lib/kubelet /var/log/pods /var/log/containers
      mount --bind "$d/kubelet" /var/lib/kubelet
      mount --bind "$d/pods-log" /var/log/pods
      mount --bind "$d/containers-log" /var/log/containers
      mkdir -p /run/netns && mount -t tmpfs -o size=1m,mode=0755 tmpfs /run/netns
      containerd --config "$d/containerd.toml" >>"$d/containerd.log" 2>&1 &
      for _ in $(seq 100); do [ -S "$d/run/containerd.sock" ] && break; sleep 0.1; done
      for t in "$images"/pause.tar "$images"/python.tar; do
        ctr -a "$d/run/containerd.sock" -n k8s.io images import --no-unpack=false "$t" >>"$d/containerd.log" 2>&1
      done
      mkdir -p /var/lib/kubelet/device-plugins
      "$bin/kubelet" --config "$d/kubelet.yaml" --kubeconfig "$d/kubeconfig" --hostname-override "$name" \
        --node-ip "$addr" --root-dir /var/lib/kubelet --cert-dir "$d/kubelet-pki" --node-labels "$labels" \
        --v 1 >>"$d/kubelet.log" 2>&1 &
      "$bin/fake-gpu-plugin" --gpus "$gpus" --dir /var/lib/kubelet/device-plugins >>"$d/plugin.log" 2>&1 &
      trap "kill \$(jobs -p) 2>/dev/null; wait" TERM INT
      wait
    ' k8s-node "$d" "$name" "$bin" "$images" "$gpus" \
    "gpusched.io/simulated-gpu=true,nvidia.com/gpu.product=SIMULATED-24GB,gpusched.io/node-kind=real" \
    "$(node_addr "$i")" </dev/null >>"$d/node.log" 2>&1 &
  echo $! >"$d/node.pid"
}

stop_node() {  # node i: its processes, then (down) what they left: mounts in its namespace die with it
  local i="$1" d ns pids
  d="$(node_dir "$1")"; ns="$(node_ns "$1")"
  ip link set "${ns}h" down 2>/dev/null || true
  pids="$(ip netns pids "$ns" 2>/dev/null | tr '\n' ' ')"
  [ -z "$pids" ] || kill -9 $pids 2>/dev/null || true
  for _ in $(seq 50); do [ -z "$(ip netns pids "$ns" 2>/dev/null)" ] && break; sleep 0.1; done
  rm -f "$d/node.pid"
}

make_cgroups() {  # node i's cgroup root in each controller's hierarchy (the kubelet checks it exists)
  local top="gpusched-k8s-$(x)-node-$1" c
  for c in /sys/fs/cgroup/*/; do
    case "$c" in */unified/) continue ;; esac
    [ -d "$c" ] || continue
    mkdir -p "$c$top"
    if [ -f "${c}cpuset.cpus" ]; then  # a new cpuset has no CPUs and no memory nodes until given its parent's
      cat "${c}cpuset.cpus" >"$c$top/cpuset.cpus"
      cat "${c}cpuset.mems" >"$c$top/cpuset.mems"
    fi
  done
}

remove_cgroups() {  # the node cgroup trees a kubelet made (each controller's hierarchy)
  local c
  for c in /sys/fs/cgroup/*/; do
    [ -d "$c" ] || continue
    find "$c" -depth -type d -name "gpusched-k8s-$(x)-node-*" 2>/dev/null | while read -r top; do
      find "$top" -depth -type d -exec rmdir {} \; 2>/dev/null || true
    done
  done
}

up() {
  local n="$1" i
  install_packages
  echo "$n" >"$root/real-nodes"
  bash "$here/scripts/k8s/images.sh" >/dev/null
  save_sysctls
  for ((i = 1; i <= n; i++)); do
    mkdir -p "$(node_dir "$i")"
    node_cert "$i"
    node_files "$i"
    make_link "$i"
    make_cgroups "$i"
    start_node "$i"
  done
}

down() {
  [ -f "$root/net" ] || return 0
  local i n
  n="$(cat "$root/real-nodes" 2>/dev/null || echo 0)"
  for ((i = 1; i <= n; i++)); do
    stop_node "$i"
    ip netns del "$(node_ns "$i")" 2>/dev/null || true
    ip link del "$(node_ns "$i")h" 2>/dev/null || true
  done
  remove_cgroups
  restore_sysctls
}

index_of() {
  local n; n="$(cat "$root/real-nodes" 2>/dev/null || echo 0)"
  case "$1" in node-[1-9]) [ "${1#node-}" -le "$n" ] && { echo "${1#node-}"; return; } ;; esac
  log "no real node $1 in this cluster"; exit 2
}

case "${1:-}" in
  up) up "${2:?how many nodes}" ;;
  down) down ;;
  kill) stop_node "$(index_of "${2:?a node name}")" ;;
  start) make_cgroups "$(index_of "${2:?a node name}")"; start_node "$(index_of "${2:?a node name}")" ;;
  *) echo "usage: $0 up N|down|kill NAME|start NAME" >&2; exit 2 ;;
esac
