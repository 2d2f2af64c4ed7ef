package harness

import (
	"encoding/binary"
	"fmt"
	"net"
	"os"
)

// PodNetworkEnv names the pod network a harness draws pod addresses from
// (CIDR, at least a /12). run-go-tests sets it inside the network namespace
// it makes for the tests, where the network is routed to the loopback
// interface. Unset, pods get loopback addresses: reachable from every
// process of this machine, but refused by EndpointSlices, so nothing reaches
// a pod through its Service.
const PodNetworkEnv = "NVDRA_SIMNODE_POD_NETWORK"

// loopbackPodBase is where loopback pod addresses start (127.20.0.0).
var loopbackPodBase = net.IPv4(127, 20, 0, 0).To4()

// podNetwork says where pod addresses come from: node i of address block b
// gets its own /24, the (4*256*b + i)-th from the base, so a block holds
// 1,024 nodes of 253 pods each.
type podNetwork struct {
	base    net.IP     // 4 bytes
	network *net.IPNet // nil: loopback addresses
}

// podNetworkFromEnv reads PodNetworkEnv and, when it is set, checks that
// packets to the network cannot leave this network namespace: the
// namespace has no interface but loopback, and the network is routed to it.
func podNetworkFromEnv() (podNetwork, error) {
	cidr := os.Getenv(PodNetworkEnv)
	if cidr == "" {
		return podNetwork{base: loopbackPodBase}, nil
	}
	_, network, err := net.ParseCIDR(cidr)
	if err != nil || network.IP.To4() == nil {
		return podNetwork{}, fmt.Errorf("%s=%q: not an IPv4 CIDR (such as 10.128.0.0/9)", PodNetworkEnv, cidr)
	}
	if ones, _ := network.Mask.Size(); ones > 12 {
		return podNetwork{}, fmt.Errorf("%s=%q: a /%d is too small; the harness needs a /12 or larger (a /24 per node, 1,024 nodes per address block)", PodNetworkEnv, cidr, ones)
	}
	if err := checkPodNetworkStaysHere(network); err != nil {
		return podNetwork{}, err
	}
	return podNetwork{base: network.IP.To4(), network: network}, nil
}

// checkPodNetworkStaysHere refuses a namespace through which a packet to a
// pod address could leave: any interface but loopback (whatever its routes
// say now, a pod address could be routed through it), or a network not
// routed here (net.Listen on its first pod address fails).
func checkPodNetworkStaysHere(network *net.IPNet) error {
	ifaces, err := net.Interfaces()
	if err != nil {
		return fmt.Errorf("pod network %s: list network interfaces: %w", network, err)
	}
	for _, ifc := range ifaces {
		if ifc.Flags&net.FlagLoopback == 0 {
			return fmt.Errorf("pod network %s: this network namespace has interface %s, through which packets to pod addresses could leave it; "+
				"run the tests through test/simnode/run-go-tests (it makes a namespace of its own) or unset %s", network, ifc.Name, PodNetworkEnv)
		}
	}
	first := podNetwork{base: network.IP.To4(), network: network}.podIP(0, 0, 2)
	l, err := net.Listen("tcp", net.JoinHostPort(first, "0"))
	if err != nil {
		return fmt.Errorf("pod network %s is not routed to this namespace's loopback interface (ip route add local %s dev lo): %w", network, network, err)
	}
	l.Close()
	return nil
}

// prefix is the three octets of node i's /24 in address block b.
func (p podNetwork) prefix(block, i int) (string, error) {
	ip := p.offset(uint32(4*256*block+i) << 8)
	if p.network != nil && !p.network.Contains(ip) {
		return "", fmt.Errorf("node %d of address block %d: its pod addresses %s/24 lie outside the pod network %s", i, block, ip, p.network)
	}
	return fmt.Sprintf("%d.%d.%d", ip[0], ip[1], ip[2]), nil
}

// podIP is address n of node i's /24.
func (p podNetwork) podIP(block, i, n int) string {
	return p.offset(uint32(4*256*block+i)<<8 + uint32(n)).String()
}

func (p podNetwork) offset(by uint32) net.IP {
	ip := make(net.IP, 4)
	binary.BigEndian.PutUint32(ip, binary.BigEndian.Uint32(p.base)+by)
	return ip
}

// Private reports whether pods get addresses of a pod network that stays in
// this network namespace (PodNetworkEnv), so that Services reach them.
func (c *Cluster) Private() bool { return c.pods.network != nil }
