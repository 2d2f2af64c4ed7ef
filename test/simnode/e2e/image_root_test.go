package e2e

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"nvdra.local/test/simnode/harness"
)

// checkImageRoot: the chart's plugin containers run from the image folder
// laid out as the real image (issue #28 point 4): in the gpus container
// the programs resolve to /usr/bin/<name> (the image's usr/bin over the
// machine's /usr) with the machine's shell beside them, and /templates is
// the image's; each plugin found nvidia-cdi-hook beside itself in
// /usr/bin, as in the real image, and installed it into its plugin folder
// on the node (the path its CDI specs' hooks name), byte for byte the
// image's copy.
func checkImageRoot(ctx context.Context, t *testing.T, env *environment, image string, pods map[string]string) {
	t.Helper()
	want, err := os.ReadFile(filepath.Join(image, "usr", "bin", "nvidia-cdi-hook"))
	must(t, "the image's nvidia-cdi-hook", err)
	for _, n := range env.nodes.Nodes {
		out, err := harness.ExecSync(ctx, n, chartNamespace, pods[n.Config.Name], "gpus", "sh", "-c",
			"for p in gpu-kubelet-plugin nvidia-cdi-hook sh; do command -v $p; done; ls /templates")
		if err != nil {
			t.Fatalf("exec in the gpus container on %s: %v\n%s", n.Config.Name, err, out)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) < 4 || lines[0] != "/usr/bin/gpu-kubelet-plugin" || lines[1] != "/usr/bin/nvidia-cdi-hook" ||
			!strings.HasSuffix(lines[2], "/sh") || !strings.Contains(out, cdTemplateFile) {
			t.Errorf("gpus container on %s: %q, want the image's /usr/bin/gpu-kubelet-plugin and /usr/bin/nvidia-cdi-hook, "+
				"a shell, and %s in /templates", n.Config.Name, out, cdTemplateFile)
		}
		for _, driver := range []string{gpuDriverName, cdDriverName} {
			installed := filepath.Join(n.Config.Dir, "var", "lib", "kubelet", "plugins", driver, "nvidia-cdi-hook")
			got, err := os.ReadFile(installed)
			if err != nil {
				t.Errorf("%s plugin on %s installed no nvidia-cdi-hook: %v", driver, n.Config.Name, err)
				continue
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s: %d bytes, not the image's nvidia-cdi-hook (%d bytes)", installed, len(got), len(want))
			}
		}
	}
}
