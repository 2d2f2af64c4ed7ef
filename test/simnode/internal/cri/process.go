package cri

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// criLogWriter writes a container's output in the CRI log format the kubelet
// reads back for `kubectl logs`: "<RFC3339Nano> <stream> <F|P> <line>".
type criLogWriter struct {
	mu   sync.Mutex
	file *os.File
}

func openCRILog(path string) (*criLogWriter, error) {
	// The kubelet's OS interface is kubemark's fake: nobody made the folder.
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("container log folder: %w", err)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o640)
	if err != nil {
		return nil, fmt.Errorf("open container log: %w", err)
	}
	return &criLogWriter{file: f}, nil
}

// copyStream copies r line by line until EOF; a line longer than the reader's
// buffer is split into partial (P) records, as containerd does.
func (w *criLogWriter) copyStream(stream string, r io.Reader) {
	br := bufio.NewReaderSize(r, 16*1024)
	for {
		line, isPrefix, err := br.ReadLine()
		if len(line) > 0 || (err == nil && !isPrefix) {
			tag := "F"
			if isPrefix {
				tag = "P"
			}
			w.write(stream, tag, line)
		}
		if err != nil {
			return
		}
	}
}

func (w *criLogWriter) write(stream, tag string, line []byte) {
	w.mu.Lock()
	defer w.mu.Unlock()
	fmt.Fprintf(w.file, "%s %s %s %s\n", time.Now().UTC().Format(time.RFC3339Nano), stream, tag, line)
}

func (w *criLogWriter) close() { w.file.Close() }

// exitCode maps a wait result to a container exit code: the process' code, or
// 128 plus the signal that ended it, as shells and runtimes report.
func exitCode(err error) int32 {
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int32(ws.Signal())
		}
		return int32(ee.ExitCode())
	}
	return 128
}
