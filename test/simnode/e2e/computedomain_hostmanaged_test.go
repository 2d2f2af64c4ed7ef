package e2e

// ComputeDomains with a host-managed IMEX domain and channel isolation
// (--imex-mode=hostManaged, --imex-isolation=channel) on simulated GB200
// nodes. Environment: computedomain_env_test.go, then reconfigured here.

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"nvdra.local/test/simnode/harness"
	"nvdra.local/test/simnode/internal/cri"
)

const (
	hostIMEXNamespace = "cd-e2e-host"
	hostChannelCount  = 8
	// The chart's default for imex.hostSocketPath, inside the driver root.
	hostIMEXSocket = "etc/nvidia-imex/imex_ctrl.sock"
)

// TestComputeDomainHostManagedChannels: two gb200-tray nodes whose hosts run
// nvidia-imex (the simulated one, started by the test as the host's service,
// one IMEX domain over both nodes, quorum FULL) and the plugin in hostManaged
// mode with channel isolation. The test plays the controller: it gives each
// ComputeDomain its channel (status.imexChannelID) and adds the matching
// `id == <n>` selector to the domain's workload claim template; the
// channel DeviceClass is the chart's for channel isolation (no id == 0).
//  1. publishing: channel-0..channel-7 on each node and no daemon-0;
//  2. with only node 0's host nvidia-imex up (no quorum: WAITING_FOR_PEERS)
//     a worker's prepare fails with the host daemon's state in the kubelet's
//     error; once node 1's nvidia-imex joins, the kubelet's retry prepares it;
//  3. two domains, one worker each on both nodes: every worker gets exactly
//     its domain's channel device, and the two domains' channels differ;
//  4. a claim of domain A allocated a channel that is not A's fails
//     permanently with the plugin's "owns channel" reason.
func TestComputeDomainHostManagedChannels(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	env := startCDEnvironment(ctx, t, 2, false)

	env.reconfigureCDPlugin(ctx, t, map[string]string{
		"IMEX_MODE":          "hostManaged",
		"IMEX_ISOLATION":     "channel",
		"IMEX_CHANNEL_COUNT": fmt.Sprint(hostChannelCount),
		"FEATURE_GATES":      "HostManagedIMEXDaemon=true",
	})
	var want []string
	for i := 0; i < hostChannelCount; i++ {
		want = append(want, fmt.Sprintf("channel-%d", i))
	}
	env.waitForCDDevices(ctx, t, want)
	env.setChannelClassForChannelIsolation(ctx, t)

	// 2. Node 0's host daemon alone has no quorum.
	port := freeTCPPort(t, env.node(t, env.fabric[0]).Config.IP)
	var peers []string
	for _, name := range env.fabric {
		peers = append(peers, env.node(t, name).Config.IP)
	}
	startHostIMEX(t, env.node(t, env.fabric[0]), peers, port)

	must(t, "namespace", create(ctx, env.client.CoreV1().Namespaces(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: hostIMEXNamespace}}))
	// hostManaged: the controller runs no daemons, only the domains, their
	// channel ids and workload templates.
	a := env.createBareComputeDomain(ctx, t, hostIMEXNamespace, "host-a", 1)
	b := env.createBareComputeDomain(ctx, t, hostIMEXNamespace, "host-b", 2)

	env.createWorker(ctx, t, hostIMEXNamespace, "a-0", env.fabric[0], a.channelTemplate)
	waitCtx, waitCancel := context.WithTimeout(ctx, 6*time.Minute)
	defer waitCancel()
	line := env.waitForPrepareFailure(waitCtx, t, env.fabric[0], hostIMEXNamespace, "a-0", "is not ready")
	t.Logf("kubelet on %s: %s", env.fabric[0], line)
	if !strings.Contains(line, "WAITING_FOR_PEERS") {
		t.Errorf("the prepare failure does not carry the host daemon's state WAITING_FOR_PEERS: %s", line)
	}
	startHostIMEX(t, env.node(t, env.fabric[1]), peers, port)
	waitForPodIn(waitCtx, t, env.client, hostIMEXNamespace, "a-0", func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })

	// 3. The other workers.
	workers := map[string]int64{"a-0": 1}
	for i, node := range env.fabric {
		if i > 0 {
			name := fmt.Sprintf("a-%d", i)
			env.createWorker(ctx, t, hostIMEXNamespace, name, node, a.channelTemplate)
			workers[name] = 1
		}
		name := fmt.Sprintf("b-%d", i)
		env.createWorker(ctx, t, hostIMEXNamespace, name, node, b.channelTemplate)
		workers[name] = 2
	}
	for name, channel := range workers {
		pod := waitForPodIn(waitCtx, t, env.client, hostIMEXNamespace, name, func(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning })
		env.checkChannelView(ctx, t, pod, channel)
	}

	// 4. Domain A's config on a channel that is not A's (channel 2, B's, is
	// allocated on both nodes now: a free one, 5).
	tmpl := cdClaimTemplate(hostIMEXNamespace, "a-on-channel-5", a.uid, "Workload", "channel", cdChannelClass,
		map[string]any{"kind": "ComputeDomainChannelConfig", "domainID": string(a.uid), "allocationMode": "Single"})
	tmpl.Finalizers = nil
	tmpl.Spec.Spec.Devices.Requests[0].Exactly.Selectors = channelSelector(5)
	must(t, "template a-on-channel-5", create(ctx, env.client.ResourceV1().ResourceClaimTemplates(hostIMEXNamespace), tmpl))
	env.createWorker(ctx, t, hostIMEXNamespace, "intruder", env.fabric[0], "a-on-channel-5")
	line = env.waitForPrepareFailure(waitCtx, t, env.fabric[0], hostIMEXNamespace, "intruder", "channel isolation")
	t.Logf("kubelet on %s: %s", env.fabric[0], line)
	if !strings.Contains(line, "owns channel 1") {
		t.Errorf("the reason does not name domain A's channel 1: %s", line)
	}
	for name := range workers {
		must(t, "delete "+name, env.client.CoreV1().Pods(hostIMEXNamespace).Delete(ctx, name, metav1.DeleteOptions{}))
	}
	must(t, "delete intruder", env.client.CoreV1().Pods(hostIMEXNamespace).Delete(ctx, "intruder", metav1.DeleteOptions{}))
	for name := range workers {
		waitForPodGone(waitCtx, t, env.client, hostIMEXNamespace, name)
	}
}

// reconfigureCDPlugin sets env variables of the plugin DaemonSet's container
// (the chart's values turned into env) and lets every pod restart at once.
func (e *cdEnvironment) reconfigureCDPlugin(ctx context.Context, t *testing.T, vars map[string]string) {
	t.Helper()
	ds, err := e.client.AppsV1().DaemonSets(cdDriverNamespace).Get(ctx, cdPluginDaemonSet, metav1.GetOptions{})
	must(t, "plugin daemonset", err)
	c := &ds.Spec.Template.Spec.Containers[0]
	for key, value := range vars {
		found := false
		for i := range c.Env {
			if c.Env[i].Name == key {
				c.Env[i] = corev1.EnvVar{Name: key, Value: value}
				found = true
			}
		}
		if !found {
			c.Env = append(c.Env, corev1.EnvVar{Name: key, Value: value})
		}
	}
	all := intstr.FromString("100%")
	ds.Spec.UpdateStrategy = appsv1.DaemonSetUpdateStrategy{
		Type:          appsv1.RollingUpdateDaemonSetStrategyType,
		RollingUpdate: &appsv1.RollingUpdateDaemonSet{MaxUnavailable: &all},
	}
	_, err = e.client.AppsV1().DaemonSets(cdDriverNamespace).Update(ctx, ds, metav1.UpdateOptions{})
	must(t, "update plugin daemonset", err)
}

// waitForCDDevices waits until every node's slices of the driver (all of
// them together) hold exactly the devices `want`.
func (e *cdEnvironment) waitForCDDevices(ctx context.Context, t *testing.T, want []string) {
	t.Helper()
	sort.Strings(want)
	waitCtx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return e.client.ResourceV1().ResourceSlices().List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			return e.client.ResourceV1().ResourceSlices().Watch(ctx, o)
		},
	}
	slices := map[string]*resourceapi.ResourceSlice{} // slice name -> slice
	have := map[string]string{}
	_, err := until(waitCtx, lw, &resourceapi.ResourceSlice{}, func(ev watch.Event) (bool, error) {
		s, ok := ev.Object.(*resourceapi.ResourceSlice)
		if !ok || s.Spec.Driver != cdDriverName || s.Spec.NodeName == nil {
			return false, nil
		}
		if ev.Type == watch.Deleted {
			delete(slices, s.Name)
		} else {
			slices[s.Name] = s
		}
		byNode := map[string][]string{}
		for _, s := range slices {
			for _, d := range s.Spec.Devices {
				byNode[*s.Spec.NodeName] = append(byNode[*s.Spec.NodeName], d.Name)
			}
		}
		have = map[string]string{}
		for node, names := range byNode {
			sort.Strings(names)
			have[node] = strings.Join(names, ",")
		}
		for _, n := range e.nodes.Nodes {
			if have[n.Config.Name] != strings.Join(want, ",") {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("waiting for every node to publish exactly %v (have %v): %v", want, have, err)
	}
}

// setChannelClassForChannelIsolation makes the default-channel DeviceClass
// what the chart renders with imex.isolation=channel: any channel.
func (e *cdEnvironment) setChannelClassForChannelIsolation(ctx context.Context, t *testing.T) {
	t.Helper()
	class, err := e.client.ResourceV1().DeviceClasses().Get(ctx, cdChannelClass, metav1.GetOptions{})
	must(t, "channel class", err)
	class.Spec.Selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: fmt.Sprintf(
		"device.driver == '%s' && device.attributes['%s'].type == 'channel'", cdDriverName, cdDriverName)}}}
	_, err = e.client.ResourceV1().DeviceClasses().Update(ctx, class, metav1.UpdateOptions{})
	must(t, "update channel class", err)
}

func channelSelector(id int64) []resourceapi.DeviceSelector {
	return []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
		Expression: fmt.Sprintf("device.attributes['%s'].id == %d", cdDriverName, id)}}}
}

// waitForPrepareFailure waits for the kubelet's "Failed to prepare dynamic
// resources" line of ns/pod that contains `reason` and returns it. Kubemark's
// kubelet records events with a fake recorder: its log is where the error
// shows.
func (e *cdEnvironment) waitForPrepareFailure(ctx context.Context, t *testing.T, node, ns, pod, reason string) string {
	t.Helper()
	var last string
	err := waitForFile(ctx, e.node(t, node).LogPath(), func(data []byte) bool {
		for _, line := range klogRecords(string(data)) {
			if strings.Contains(line, `"Failed to prepare dynamic resources"`) && strings.Contains(line, `pod="`+ns+"/"+pod+`"`) {
				last = line
				if strings.Contains(line, reason) {
					return true
				}
			}
		}
		return false
	})
	if err != nil {
		t.Fatalf("the kubelet on %s never failed %s/%s's prepare with %q (last: %q): %v", node, ns, pod, reason, last, err)
	}
	return last
}

// klogRecords splits a klog file into records: a multi-line value (err=<
// ... >) continues on lines that start with a tab or " >".
func klogRecords(text string) []string {
	var records []string
	for _, line := range strings.Split(text, "\n") {
		if len(records) > 0 && (strings.HasPrefix(line, "\t") || strings.HasPrefix(line, " >")) {
			records[len(records)-1] += " " + strings.TrimSpace(line)
			continue
		}
		records = append(records, line)
	}
	return records
}

// checkChannelView: a running worker holds exactly channel<id> (c 236:<id>)
// and its claim was allocated channel-<id> of its node.
func (e *cdEnvironment) checkChannelView(ctx context.Context, t *testing.T, pod *corev1.Pod, id int64) {
	t.Helper()
	n := e.node(t, pod.Spec.NodeName)
	view, err := cri.ReadView(cri.ViewPath(n.Config.ViewsDir(), pod.Namespace, pod.Name, "worker"))
	must(t, "worker view", err)
	var devices []string
	for _, d := range view.Devices {
		devices = append(devices, fmt.Sprintf("%s %s %d:%d", d.Path, d.Type, d.Major, d.Minor))
	}
	want := fmt.Sprintf("/dev/nvidia-caps-imex-channels/channel%d c %d:%d", id, imexChannelsMajor, id)
	if strings.Join(devices, ",") != want {
		t.Errorf("%s/%s on %s: device nodes %v, want exactly [%s]", pod.Namespace, pod.Name, n.Config.Name, devices, want)
	}
	claim := *pod.Status.ResourceClaimStatuses[0].ResourceClaimName
	c, err := e.client.ResourceV1().ResourceClaims(pod.Namespace).Get(ctx, claim, metav1.GetOptions{})
	must(t, "get claim", err)
	if r := c.Status.Allocation.Devices.Results; len(r) != 1 || r[0].Device != fmt.Sprintf("channel-%d", id) || r[0].Pool != n.Config.Name {
		t.Errorf("%s/%s: allocation %+v, want channel-%d of %s", pod.Namespace, pod.Name, r, id, n.Config.Name)
	}
}

func freeTCPPort(t *testing.T, ip string) int {
	t.Helper()
	l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	must(t, "free port", err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startHostIMEX runs the simulated nvidia-imex as node n's host service:
// config and nodes file in <driver root>/etc/nvidia-imex, peers by IP,
// quorum FULL, the command service on the unix socket the plugin's
// nvidia-imex-ctl asks (bound by a relative path: node folders are deep).
// Stopped with SIGTERM by the test's cleanup.
func startHostIMEX(t *testing.T, n *harness.Node, peers []string, port int) {
	t.Helper()
	dir := filepath.Join(n.Config.DriverRoot(), filepath.Dir(hostIMEXSocket))
	must(t, "imex folder", os.MkdirAll(dir, 0o755))
	nodes := filepath.Join(dir, "nodes_config.cfg")
	must(t, "nodes file", os.WriteFile(nodes, []byte(strings.Join(peers, "\n")+"\n"), 0o644))
	config := filepath.Join(dir, "config.cfg")
	must(t, "imex config", os.WriteFile(config, []byte(fmt.Sprintf(
		"SERVER_PORT=%d\nIMEX_NODE_CONFIG_FILE=%s\nBIND_INTERFACE_IP=%s\nIMEX_WAIT_FOR_QUORUM=FULL\n"+
			"IMEX_CMD_ENABLED=1\nIMEX_CMD_PORT=0\nIMEX_CMD_UNIX_DOMAIN_PATH=%s\nDAEMONIZE=0\nLOG_FILE_NAME=\n",
		port, nodes, n.Config.IP, filepath.Base(hostIMEXSocket))), 0o644))
	log, err := os.Create(filepath.Join(n.Config.Dir, "host-nvidia-imex.log"))
	must(t, "imex log", err)
	cmd := exec.Command(filepath.Join(os.Getenv(envSimIMEXDir), "nvidia-imex"), "-c", config)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = log, log
	must(t, "start host nvidia-imex on "+n.Config.Name, cmd.Start())
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		log.Close()
	})
	t.Logf("host nvidia-imex on %s (pid %d), peers %v, port %d", n.Config.Name, cmd.Process.Pid, peers, port)
}
