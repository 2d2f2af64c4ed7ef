package cri

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// An image folder: bin/ on the image's PATH folder, other top-level folders
// at the root, plain files ignored.
func TestImageFolderBinds(t *testing.T) {
	dir := t.TempDir()
	for _, d := range []string{"bin", "templates"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "README"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	got := imageFolderBinds(dir)
	want := []bind{
		{Source: filepath.Join(dir, "bin"), Target: imageBinDir, ReadOnly: true},
		{Source: filepath.Join(dir, "templates"), Target: "/templates", ReadOnly: true},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("binds %+v, want %+v", got, want)
	}
	if !isDir(dir) || isDir(filepath.Join(dir, "README")) {
		t.Fatal("isDir")
	}
}
