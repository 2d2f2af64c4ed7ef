package harness

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"nvdra.local/test/simnode/nodeconfig"
)

// Mock NVML inputs of GPU nodes (Options.GPUProfiles). Each has an
// environment variable that ctest sets from the CMake build; without it the
// harness looks in the enclosing checkout.
const (
	// EnvMockNVMLLibrary is the built mock libnvidia-ml.so.1 (CMake target
	// nvdra_mocknvml). No default: the harness cannot know the build folder.
	EnvMockNVMLLibrary = "NVDRA_MOCKNVML_PATH"
	// EnvMockNVMLProfiles is the profiles folder (default
	// test/mocknvml/profiles of the checkout).
	EnvMockNVMLProfiles = "NVDRA_MOCKNVML_PROFILES"
	// EnvMakeDriverRoot is the make-driver-root script (default
	// test/mocknvml/make-driver-root of the checkout).
	EnvMakeDriverRoot = "NVDRA_MOCKNVML_MAKE_DRIVER_ROOT"
)

// mockNVML says where the mock NVML pieces are.
type mockNVML struct {
	library, profiles, makeDriverRoot string
}

func findMockNVML() (mockNVML, error) {
	m, err := findMockNVMLFiles()
	if err != nil {
		return m, err
	}
	m.library = os.Getenv(EnvMockNVMLLibrary)
	if m.library == "" {
		return m, fmt.Errorf("GPU nodes need the mock NVML library: set %s to the built libnvidia-ml.so.1 (CMake target nvdra_mocknvml)", EnvMockNVMLLibrary)
	}
	return m, nil
}

// findMockNVMLFiles finds the profiles folder and make-driver-root.
func findMockNVMLFiles() (mockNVML, error) {
	m := mockNVML{
		profiles:       os.Getenv(EnvMockNVMLProfiles),
		makeDriverRoot: os.Getenv(EnvMakeDriverRoot),
	}
	if m.profiles == "" || m.makeDriverRoot == "" {
		dir, err := FindCheckoutPath("test/mocknvml")
		if err != nil {
			return m, err
		}
		if m.profiles == "" {
			m.profiles = filepath.Join(dir, "profiles")
		}
		if m.makeDriverRoot == "" {
			m.makeDriverRoot = filepath.Join(dir, "make-driver-root")
		}
	}
	return m, nil
}

// ProfilePath resolves a profile name ("h100-sxm") to its JSON file in the
// profiles folder; a name with a slash or a .json suffix is a path already.
func ProfilePath(profile string) (string, error) {
	if isProfilePath(profile) {
		return profile, nil
	}
	m, err := findMockNVMLFiles()
	if err != nil {
		return "", err
	}
	return filepath.Join(m.profiles, profile+".json"), nil
}

func isProfilePath(profile string) bool {
	return strings.Contains(profile, "/") || strings.HasSuffix(profile, ".json")
}

// layOutDriverRoot makes cfg.DriverRoot() a mock driver root of the node's
// profile with make-driver-root (its library, profile and whatever else the
// script lays out), before the node starts.
func layOutDriverRoot(m mockNVML, cfg *nodeconfig.Config) error {
	profile := cfg.GPUProfile
	if !isProfilePath(profile) {
		profile = filepath.Join(m.profiles, profile+".json")
	}
	out, err := exec.Command(m.makeDriverRoot, cfg.DriverRoot(), profile, m.library).CombinedOutput()
	if err != nil {
		return fmt.Errorf("node %s: %s %s %s: %w\n%s", cfg.Name, m.makeDriverRoot, cfg.DriverRoot(), profile, err, out)
	}
	return nil
}

// FindCheckoutPath finds rel (e.g. "test/mocknvml") in the checkout that
// encloses the working directory, else in the one that encloses this
// executable (the simnode CLI lives in the checkout's .cache/cluster-bin).
func FindCheckoutPath(rel string) (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	starts := []string{wd}
	if self, err := os.Executable(); err == nil {
		starts = append(starts, filepath.Dir(self))
	}
	for _, start := range starts {
		for dir := start; ; dir = filepath.Dir(dir) {
			candidate := filepath.Join(dir, rel)
			if _, err := os.Stat(candidate); err == nil {
				return candidate, nil
			}
			if dir == filepath.Dir(dir) {
				break
			}
		}
	}
	return "", errors.New(rel + " not found above " + strings.Join(starts, " or "))
}
