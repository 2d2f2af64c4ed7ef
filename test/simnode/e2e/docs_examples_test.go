package e2e

// The docs' YAML examples, read from the Markdown so that what the tests
// apply is what the docs show. Each block a test applies is marked
// `<!-- e2e: NAME -->` on the line before its fence; chart.docs_examples
// (test/chart/check_docs_examples.py) fails on any yaml block of docs/ or
// the README that has no marker, or whose NAME no test here names.

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// docsPath is a file of docs/ seen from this package's folder.
func docsPath(file string) string {
	return filepath.Join("..", "..", "..", "docs", file)
}

// docsExample writes the YAML block that follows `<!-- e2e: name -->` in a
// docs file, unchanged, to a temporary file and returns its path.
func docsExample(t *testing.T, doc, name string) string {
	t.Helper()
	data, err := os.ReadFile(doc)
	must(t, "docs", err)
	marker := []byte("<!-- e2e: " + name + " -->\n```yaml\n")
	start := bytes.Index(data, marker)
	if start < 0 {
		t.Fatalf("%s has no block %q", doc, marker)
	}
	body := data[start+len(marker):]
	end := bytes.Index(body, []byte("\n```"))
	if end < 0 {
		t.Fatalf("%s: block %s does not end", doc, name)
	}
	path := filepath.Join(t.TempDir(), name+".yaml")
	must(t, "example", os.WriteFile(path, body[:end+1], 0o644))
	return path
}
