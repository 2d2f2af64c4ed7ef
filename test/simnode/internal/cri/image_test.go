package cri

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// An image folder over this machine's root: each system folder an overlay
// with the image's folder of that name on top, the image's other folders
// overlays of their own, its files bound, dev/ left out.
func TestRootBinds(t *testing.T) {
	dir := t.TempDir()
	for _, d := range []string{"usr/bin", "templates", "dev"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "startup.sh"), nil, 0o755); err != nil {
		t.Fatal(err)
	}
	got := map[string]bind{}
	for _, b := range rootBinds(dir) {
		got[b.Target] = b
	}
	if b := got["/usr"]; !reflect.DeepEqual(b.Lower, []string{filepath.Join(dir, "usr"), "/usr"}) {
		t.Errorf("/usr: %+v, want the image's usr over this machine's", b)
	}
	if b := got["/templates"]; !reflect.DeepEqual(b.Lower, []string{filepath.Join(dir, "templates")}) {
		t.Errorf("/templates: %+v", b)
	}
	if b := got["/startup.sh"]; b.Source != filepath.Join(dir, "startup.sh") || !b.ReadOnly {
		t.Errorf("/startup.sh: %+v", b)
	}
	if _, ok := got["/dev"]; ok {
		t.Errorf("the image's dev/ was laid out: %+v", got["/dev"])
	}
	// Without an image: this machine's folders alone (links stay links).
	for _, b := range rootBinds("") {
		if b.Symlink {
			continue
		}
		if len(b.Lower) != 1 || b.Lower[0] != b.Target {
			t.Errorf("no image: %+v, want %s alone", b, b.Target)
		}
	}
}

// Issue #28 point 4: a container of an image folder gets the image's files
// at their image paths over this machine's root (usr/bin/x at /usr/bin/x,
// a start-up script at /startup.sh, templates/ at /templates) and still
// this machine's /usr/bin/sh; a volume mounted at a path of /usr/bin that
// neither has lands there; what the container writes stays its own (not in
// the image folder, not on this machine).
func TestImageFolderIsTheContainerRoot(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("containers need mount namespaces: run as root")
	}
	node := t.TempDir()
	image := filepath.Join(node, "image")
	files := map[string]string{
		"usr/bin/image-tool": "#!/bin/sh\necho image-tool ran\n",
		"startup.sh":         "#!/bin/sh\necho startup ran; /usr/bin/image-tool\n",
		"templates/t.yaml":   "template\n",
	}
	for p, body := range files {
		full := filepath.Join(image, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	vol := filepath.Join(node, "vol")
	if err := os.MkdirAll(vol, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(vol, "mounted-tool"), []byte("#!/bin/sh\necho mounted ran\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	const marker = "/usr/bin/simnode-image-test-written"
	if fileExists(marker) {
		t.Fatalf("%s exists on this machine already", marker)
	}
	r, sandbox, sb := runTestSandbox(t, Options{NodeName: "n", NodeDir: node, NodeIP: "127.0.0.1",
		ContainersDir: filepath.Join(node, "containers"), Images: map[string]string{"example.test/image": image}})
	ctx := context.Background()
	config := &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "c"},
		Image:    &runtimeapi.ImageSpec{Image: "example.test/image:v1"},
		Command:  []string{"/startup.sh"},
		Mounts:   []*runtimeapi.Mount{{ContainerPath: "/usr/bin/mounted-tool", HostPath: filepath.Join(vol, "mounted-tool"), Readonly: true}},
		LogPath:  "c/0.log",
	}
	cc, err := r.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: sb.PodSandboxId, Config: config, SandboxConfig: sandbox})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: cc.ContainerId}); err != nil {
		t.Fatal(err)
	}
	// The start-up script ran at its image path, and it ran the image's tool.
	logPath := filepath.Join(node, "logs", "c/0.log")
	deadline := time.Now().Add(30 * time.Second)
	var log []byte
	for time.Now().Before(deadline) {
		log, _ = os.ReadFile(logPath)
		if strings.Contains(string(log), "image-tool ran") {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !strings.Contains(string(log), "startup ran") || !strings.Contains(string(log), "image-tool ran") {
		t.Fatalf("container log:\n%s\nwant the image's /startup.sh and /usr/bin/image-tool to have run", log)
	}
	// A second container of the image, still running, to look inside.
	config.Metadata = &runtimeapi.ContainerMetadata{Name: "look"}
	config.Command = []string{"sleep", "600"}
	config.LogPath = "look/0.log"
	look, err := r.CreateContainer(ctx, &runtimeapi.CreateContainerRequest{PodSandboxId: sb.PodSandboxId, Config: config, SandboxConfig: sandbox})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.StartContainer(ctx, &runtimeapi.StartContainerRequest{ContainerId: look.ContainerId}); err != nil {
		t.Fatal(err)
	}
	var resp *runtimeapi.ExecSyncResponse
	for deadline = time.Now().Add(30 * time.Second); ; {
		resp, err = r.ExecSync(ctx, &runtimeapi.ExecSyncRequest{ContainerId: look.ContainerId, Timeout: 10, Cmd: []string{"sh", "-c",
			"command -v image-tool; mounted-tool; cat /templates/t.yaml; test -x /usr/bin/sh && echo host-sh; touch " + marker + " && echo wrote"}})
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatal(err)
	}
	want := "/usr/bin/image-tool\nmounted ran\ntemplate\nhost-sh\nwrote\n"
	if string(resp.Stdout) != want || resp.ExitCode != 0 {
		t.Errorf("in the container: stdout %q stderr %q code %d, want %q", resp.Stdout, resp.Stderr, resp.ExitCode, want)
	}
	for _, p := range []string{marker, filepath.Join(image, marker), filepath.Join(image, "usr/bin/mounted-tool")} {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("%s exists: the container wrote outside its own layer", p)
			_ = os.Remove(p)
		}
	}
}
