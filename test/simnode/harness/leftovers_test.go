package harness

import (
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"testing"
)

// A fake /proc: pids whose root link lies below the node's folder are
// found (also with a removed root), a neighbour node whose name extends
// this one's, the host's root and the node folder itself are not.
func TestLeftoverProcesses(t *testing.T) {
	proc := t.TempDir()
	node := "/tmp/sn1/sim-node-1"
	roots := map[string]string{
		"101":  node + "/containers/a/rootfs",
		"102":  node + "/containers/b/rootfs (deleted)",
		"103":  "/tmp/sn1/sim-node-10/containers/c/rootfs",
		"104":  "/",
		"105":  node,
		"self": node + "/containers/a/rootfs",
	}
	for pid, root := range roots {
		dir := filepath.Join(proc, pid)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(root, filepath.Join(dir, "root")); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(proc, "106"), 0o755); err != nil { // no root link
		t.Fatal(err)
	}
	got := leftoverProcesses(proc, node+"/")
	sort.Ints(got)
	if want := []int{101, 102}; !reflect.DeepEqual(got, want) {
		t.Errorf("leftoverProcesses = %v, want %v", got, want)
	}
}
