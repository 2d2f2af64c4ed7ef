package harness

import (
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
)

func TestPodAddressesPerNode(t *testing.T) {
	loop := podNetwork{base: loopbackPodBase}
	for _, tc := range []struct {
		block, node int
		want        string
	}{{0, 0, "127.20.0"}, {0, 255, "127.20.255"}, {0, 256, "127.21.0"}, {2, 1, "127.28.1"}} {
		got, err := loop.prefix(tc.block, tc.node)
		if err != nil || got != tc.want {
			t.Errorf("loopback prefix(%d, %d) = %q, %v; want %q", tc.block, tc.node, got, err, tc.want)
		}
	}
	_, network, _ := net.ParseCIDR("10.128.0.0/9")
	private := podNetwork{base: network.IP.To4(), network: network}
	if got, _ := private.prefix(1, 300); got != "10.133.44" {
		t.Errorf("private prefix(1, 300) = %q, want 10.133.44", got)
	}
	if got := private.podIP(0, 0, 2); got != "10.128.0.2" {
		t.Errorf("first pod address %q, want 10.128.0.2", got)
	}
	_, small, _ := net.ParseCIDR("10.128.0.0/16")
	if _, err := (podNetwork{base: small.IP.To4(), network: small}).prefix(0, 256); err == nil || !strings.Contains(err.Error(), "outside the pod network") {
		t.Errorf("node 256 of a /16: %v, want an error saying its addresses lie outside", err)
	}
}

func TestPodNetworkFromEnvRefusesBadValues(t *testing.T) {
	for value, want := range map[string]string{
		"10.128.0.0":    "not an IPv4 CIDR",
		"fd00::/8":      "not an IPv4 CIDR",
		"10.128.0.0/16": "too small",
	} {
		t.Setenv(PodNetworkEnv, value)
		if _, err := podNetworkFromEnv(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s=%s: %v, want an error saying %q", PodNetworkEnv, value, err, want)
		}
	}
}

// In the namespace run-go-tests makes: the pod network passes the check; a
// network not routed here, or any interface but loopback, fails it.
func TestPodNetworkStaysInItsNamespace(t *testing.T) {
	cidr := os.Getenv(PodNetworkEnv)
	if cidr == "" {
		t.Skipf("%s is unset: not in run-go-tests' network namespace", PodNetworkEnv)
	}
	_, network, err := net.ParseCIDR(cidr)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkPodNetworkStaysHere(network); err != nil {
		t.Fatalf("the namespace run-go-tests made: %v", err)
	}
	_, unrouted, _ := net.ParseCIDR("172.16.0.0/12")
	if err := checkPodNetworkStaysHere(unrouted); err == nil || !strings.Contains(err.Error(), "not routed") {
		t.Errorf("unrouted %s: %v, want an error saying it is not routed here", unrouted, err)
	}
	// An interface through which a packet could leave: a bridge, made
	// and removed in this (private) namespace only.
	if out, err := exec.Command("ip", "link", "add", "nvdra-leak0", "type", "bridge").CombinedOutput(); err != nil {
		t.Skipf("cannot add a bridge interface here: %v %s", err, out)
	}
	defer exec.Command("ip", "link", "del", "nvdra-leak0").Run()
	if err := checkPodNetworkStaysHere(network); err == nil || !strings.Contains(err.Error(), "interface nvdra-leak0") {
		t.Errorf("with a bridge interface: %v, want an error naming nvdra-leak0", err)
	}
}
