// etcd for the test cluster, at the release that kube-apiserver's go.mod pins (scripts/k8s-build.sh).
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
