// Command simnode runs simulated Kubernetes nodes against a real control
// plane: each node is a real kubelet (with the real DRA manager) in its own
// process, talking to a simulated CRI runtime. See test/simnode/README.md.
//
//	simnode up    --dir D [--kubeconfig K] --nodes N [--profile P | --profiles NODE=P,...]
//	              [--image NAME=PROGRAM|FOLDER]... [--mocknvml LIB] [--simimex DIR] [--simsysfs BIN]
//	              [--imex-node-files] [-v N]
//	simnode run   ...same flags, in the foreground
//	simnode fault --dir D <restart-kubelet|kill-container|reboot|partition|heal|delete> NODE [NS/POD/CONTAINER]
//	simnode fault --dir D xid NODE GPU XID
//	simnode fault --dir D <gpu-lost|gpu-recovered|fabric-unhealthy|fabric-healthy> NODE GPU
//	simnode down  --dir D [--clean]
//	simnode node --config D/NODE/node.json    (one node; started by up/run)
package main

import (
	"fmt"
	"os"
	"runtime"
)

func init() {
	// Children's death signal is tied to the thread that forked them; nodes
	// are started from main, which keeps this thread for the process' life.
	runtime.LockOSThread()
}

func main() {
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "container-init":
		err = containerInit(os.Args[2:])
	case "node":
		err = runNode(os.Args[2:])
	case "up", "run", "down", "fault":
		err = clusterCommand(os.Args[1], os.Args[2:])
	default:
		usage()
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "simnode %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprint(os.Stderr, `usage: simnode <up|run|fault|down|node> [flags]

  up     start simulated nodes (and, without --kubeconfig, a control plane) in
         the background; returns when all are Ready
  run    the same in the foreground; SIGINT/SIGTERM stops every node
  fault  apply a fault to a node of a running up/run: restart-kubelet,
         kill-container (NS/POD/CONTAINER), reboot, partition, heal, delete;
         or to a GPU of a GPU node (GPU: an index into the node's profile
         GPUs or a UUID), through its mock NVML: xid (GPU XID), gpu-lost,
         gpu-recovered, fabric-unhealthy, fabric-healthy (GPU)
  down   stop what up started (and remove the folder with --clean)
  node   run one node from its node.json (started by up and run)

Run "simnode up -h" for up's flags.
`)
}
