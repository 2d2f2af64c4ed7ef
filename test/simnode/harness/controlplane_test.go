package harness

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLogTailsKeepTheLastLinesOfEachLog(t *testing.T) {
	dir := t.TempDir()
	var lines []string
	for i := 1; i <= 30; i++ {
		lines = append(lines, fmt.Sprintf("line %d", i))
	}
	if err := os.WriteFile(filepath.Join(dir, "kube-apiserver.log"), []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "etcd.log"), []byte("etcd said one thing\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got := logTails(dir, 3)
	for _, want := range []string{"kube-apiserver.log:\nline 28\nline 29\nline 30", "etcd.log:\netcd said one thing"} {
		if !strings.Contains(got, want) {
			t.Errorf("logTails lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "line 27") {
		t.Errorf("logTails kept more than 3 lines:\n%s", got)
	}
	if got := logTails(filepath.Join(dir, "absent"), 3); !strings.Contains(got, "no logs in") {
		t.Errorf("an absent folder: %q", got)
	}
}
