package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"nvdra.local/test/simnode/harness"
)

// TestScaleFootprint is issue 5's scale benchmark, printed, not asserted: for
// each N in SIMNODE_SCALE_NODES (e.g. "18,72"), a fresh control plane and N
// idle nodes (no pods): the time from starting the nodes to all Ready, the
// PSS summed over every process of the nodes (each node process and its
// descendants, from /proc/<pid>/smaps_rollup), and their CPU over an idle
// window. The machine's own load over the window is printed beside them, so
// that figures taken while others use the machine can be read. Writes JSON to
// SIMNODE_SCALE_OUT when set (bench/collect.py reads it).
func TestScaleFootprint(t *testing.T) {
	spec := os.Getenv("SIMNODE_SCALE_NODES")
	if spec == "" {
		t.Skip("set SIMNODE_SCALE_NODES=18,72 to measure idle simulated nodes at scale")
	}
	if os.Geteuid() != 0 {
		t.Skip("simulated containers need mount namespaces: run as root")
	}
	settle, window := 15*time.Second, 30*time.Second
	if v, err := time.ParseDuration(os.Getenv("SIMNODE_SCALE_WINDOW")); err == nil && v > 0 {
		window = v
	}
	var runs []scaleRun
	for _, f := range strings.Split(spec, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			t.Fatalf("SIMNODE_SCALE_NODES=%q: want numbers", spec)
		}
		r := measureScale(t, n, settle, window)
		runs = append(runs, r)
		fmt.Printf("simnode scale: %d idle nodes Ready in %.1fs; PSS %.0f MiB in all, %.1f MiB per node (RSS %.1f); "+
			"CPU %.2f %% of a core per node (%.1f %% in all); harness process PSS %.0f MiB; machine: %.0f %% of its %d cores busy, load %s\n",
			r.Nodes, r.StartupSeconds, r.PSSTotalMiB, r.PSSPerNodeMiB, r.RSSPerNodeMiB,
			r.CPUPerNodePercent, r.CPUTotalPercent, r.HarnessPSSMiB, r.MachineBusyPercent, r.Cores, r.LoadAvg)
	}
	if out := os.Getenv("SIMNODE_SCALE_OUT"); out != "" {
		data, _ := json.MarshalIndent(map[string]any{"runs": runs, "settle_s": settle.Seconds(), "window_s": window.Seconds()}, "", "  ")
		if err := os.WriteFile(out, append(data, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

type scaleRun struct {
	Nodes              int     `json:"nodes"`
	StartupSeconds     float64 `json:"startup_s"`
	Processes          int     `json:"processes"`
	PSSTotalMiB        float64 `json:"pss_total_mib"`
	PSSPerNodeMiB      float64 `json:"pss_per_node_mib"`
	RSSPerNodeMiB      float64 `json:"rss_per_node_mib"`
	CPUTotalPercent    float64 `json:"cpu_total_pct"`
	CPUPerNodePercent  float64 `json:"cpu_per_node_pct"`
	MachineBusyPercent float64 `json:"machine_busy_pct"` // all processes, over the window
	Cores              int     `json:"cores"`
	LoadAvg            string  `json:"loadavg"`
	// HarnessPSSMiB is this test process' PSS: it holds the nodes' API
	// proxies (and the test binary), not counted above.
	HarnessPSSMiB float64 `json:"harness_pss_mib"`
}

func measureScale(t *testing.T, n int, settle, window time.Duration) scaleRun {
	root, err := os.MkdirTemp("", "sn")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(root)
	cp, err := harness.StartControlPlane(filepath.Join(root, "cp"))
	if err != nil {
		t.Fatal(err)
	}
	defer cp.Stop()
	start := time.Now()
	cluster, err := harness.Start(harness.Options{Dir: root, Kubeconfig: cp.Kubeconfig, Nodes: n})
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	if err := cluster.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	r := scaleRun{Nodes: n, StartupSeconds: time.Since(start).Seconds()}

	// A measuring window, not a synchronisation: the nodes are Ready; the
	// settle time lets their start-up work (first syncs, image lists) end.
	time.Sleep(settle)
	pids := func() []int {
		var roots []int
		for _, node := range cluster.Nodes {
			roots = append(roots, node.Pid())
		}
		return withDescendants(roots)
	}
	before := map[int]float64{}
	for _, pid := range pids() {
		before[pid] = procCPUSeconds(pid)
	}
	busy0, total0 := machineCPU()
	time.Sleep(window)
	busy1, total1 := machineCPU()
	var cpu float64
	for _, pid := range pids() {
		rss, pss, ok := procSmapsRollup(pid)
		if !ok {
			continue
		}
		r.Processes++
		r.PSSTotalMiB += pss
		r.RSSPerNodeMiB += rss
		cpu += procCPUSeconds(pid) - before[pid]
	}
	r.RSSPerNodeMiB /= float64(n)
	r.PSSPerNodeMiB = r.PSSTotalMiB / float64(n)
	r.CPUTotalPercent = cpu / window.Seconds() * 100
	r.CPUPerNodePercent = r.CPUTotalPercent / float64(n)
	r.Cores = numCPU()
	_, r.HarnessPSSMiB, _ = procSmapsRollup(os.Getpid())
	if total1 > total0 {
		r.MachineBusyPercent = (busy1 - busy0) / (total1 - total0) * 100
	}
	if data, err := os.ReadFile("/proc/loadavg"); err == nil {
		r.LoadAvg = strings.Join(strings.Fields(string(data))[:3], " ")
	}
	return r
}

// withDescendants returns roots and every process below them (from the ppid
// field of /proc/<pid>/stat).
func withDescendants(roots []int) []int {
	children := map[int][]int{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if fields := procStatFields(pid); len(fields) > 1 {
			ppid, _ := strconv.Atoi(fields[1])
			children[ppid] = append(children[ppid], pid)
		}
	}
	var out []int
	queue := append([]int(nil), roots...)
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		out = append(out, pid)
		queue = append(queue, children[pid]...)
	}
	return out
}

// procStatFields returns the fields of /proc/<pid>/stat after the command
// name: [0] is the state, [1] the ppid, [11] utime, [12] stime.
func procStatFields(pid int) []string {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil
	}
	s := string(data)
	return strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
}

func procCPUSeconds(pid int) float64 {
	f := procStatFields(pid)
	if len(f) < 13 {
		return 0
	}
	utime, _ := strconv.ParseFloat(f[11], 64)
	stime, _ := strconv.ParseFloat(f[12], 64)
	return (utime + stime) / 100 // USER_HZ
}

// procSmapsRollup returns RSS and PSS in MiB.
func procSmapsRollup(pid int) (rss, pss float64, ok bool) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return 0, 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 {
			continue
		}
		kb, _ := strconv.ParseFloat(fields[1], 64)
		switch fields[0] {
		case "Rss:":
			rss, ok = kb/1024, true
		case "Pss:":
			pss = kb / 1024
		}
	}
	return rss, pss, ok
}

// machineCPU returns busy and total jiffies of all cores from /proc/stat.
func machineCPU() (busy, total float64) {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line := strings.SplitN(string(data), "\n", 2)[0]
	for i, f := range strings.Fields(line)[1:] {
		v, _ := strconv.ParseFloat(f, 64)
		total += v
		if i != 3 && i != 4 { // idle, iowait
			busy += v
		}
	}
	return busy, total
}

func numCPU() int {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	n := 0
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "cpu") && len(line) > 3 && line[3] >= '0' && line[3] <= '9' {
			n++
		}
	}
	return n
}
