// A device plugin that advertises SIMULATED GPUs as nvidia.com/gpu on a test node (no GPU exists on these
// machines): the kubelet counts them, the scheduler places pods by them, and each container gets the devices it was
// given in CUDA_VISIBLE_DEVICES (as NVIDIA's plugin sets NVIDIA_VISIBLE_DEVICES), with GPUSCHED_SIMULATED_GPU=1
// saying that they are simulated. Built by scripts/k8s-build.sh; started by scripts/k8s-nodes.sh in each node's
// namespaces, where /var/lib/kubelet is that node's own folder.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

type plugin struct {
	pluginapi.UnimplementedDevicePluginServer
	devices []*pluginapi.Device
	model   string
}

func (p *plugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{}, nil
}

func (p *plugin) ListAndWatch(_ *pluginapi.Empty, stream grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
	if err := stream.Send(&pluginapi.ListAndWatchResponse{Devices: p.devices}); err != nil {
		return err
	}
	<-stream.Context().Done() // the devices never change: the list stands until the kubelet hangs up
	return nil
}

func (p *plugin) GetPreferredAllocation(context.Context, *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	return &pluginapi.PreferredAllocationResponse{}, nil
}

func (p *plugin) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	resp := &pluginapi.AllocateResponse{}
	for _, c := range req.ContainerRequests {
		ids := make([]string, 0, len(c.DevicesIds))
		for _, id := range c.DevicesIds {
			ids = append(ids, strings.TrimPrefix(id, "gpu-"))
		}
		sort.Strings(ids)
		log.Printf("allocate %v", ids)
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerAllocateResponse{
			Envs: map[string]string{
				"CUDA_VISIBLE_DEVICES":   strings.Join(ids, ","),
				"NVIDIA_VISIBLE_DEVICES": strings.Join(ids, ","),
				"GPUSCHED_SIMULATED_GPU": "1",
				"GPUSCHED_GPU_MODEL":     p.model,
			},
		})
	}
	return resp, nil
}

func (p *plugin) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}

func main() {
	count := flag.Int("gpus", 4, "how many simulated GPUs the node advertises")
	model := flag.String("model", "simulated", "the model name given to containers (GPUSCHED_GPU_MODEL)")
	dir := flag.String("dir", pluginapi.DevicePluginPath, "the kubelet's device-plugin folder")
	resource := flag.String("resource", "nvidia.com/gpu", "the extended resource name")
	flag.Parse()

	p := &plugin{model: *model}
	for i := 0; i < *count; i++ {
		p.devices = append(p.devices, &pluginapi.Device{ID: fmt.Sprintf("gpu-%d", i), Health: pluginapi.Healthy})
	}
	name := "gpusched-fake-gpu.sock"
	sock := filepath.Join(*dir, name)
	_ = os.Remove(sock)
	lis, err := net.Listen("unix", sock)
	if err != nil {
		log.Fatalf("listen on %s: %v", sock, err)
	}
	server := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(server, p)
	go func() {
		if err := server.Serve(lis); err != nil {
			log.Fatalf("serve: %v", err)
		}
	}()
	kubelet := filepath.Join(*dir, filepath.Base(pluginapi.KubeletSocket))
	register := func() error {
		conn, err := grpc.NewClient("unix://"+kubelet, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return err
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
			Version: pluginapi.Version, Endpoint: name, ResourceName: *resource,
		})
		return err
	}
	// register, and again whenever the kubelet restarts (it removes every socket in the folder when it starts)
	registered := false
	for {
		if _, err := os.Stat(sock); err != nil {
			log.Printf("the kubelet removed %s (it restarted): serving and registering again", sock)
			server.Stop()
			lis, err = net.Listen("unix", sock)
			if err != nil {
				log.Fatalf("listen on %s: %v", sock, err)
			}
			server = grpc.NewServer()
			pluginapi.RegisterDevicePluginServer(server, p)
			go func(l net.Listener, s *grpc.Server) { _ = s.Serve(l) }(lis, server)
			registered = false
		}
		if !registered {
			if err := register(); err != nil {
				log.Printf("register with %s: %v (trying again)", kubelet, err)
			} else {
				registered = true
				log.Printf("registered %d simulated %s on %s", *count, *resource, kubelet)
			}
		}
		time.Sleep(time.Second)
	}
}
