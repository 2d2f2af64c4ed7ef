package harness

import (
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"

	"k8s.io/client-go/tools/clientcmd"
)

// apiProxy is a node's way to the API server: a TCP proxy on 127.0.0.1 (an
// address the API server's certificate names) with a port of its own. The
// node's kubelet and its containers' in-cluster clients use it, so cutting it
// partitions exactly that node. It copies bytes and knows nothing of TLS.
// Thread-safe: mu guards cut, conns and refused.
type apiProxy struct {
	target   string // host:port of the API server
	listener net.Listener

	mu      sync.Mutex
	cut     bool
	conns   map[net.Conn]struct{}
	refused int
	// refusedCh is closed and replaced at each refused connection, so that
	// waiters learn of the node's failed attempts without polling.
	refusedCh chan struct{}
}

func newAPIProxy(target string) (*apiProxy, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("API proxy: %w", err)
	}
	p := &apiProxy{target: target, listener: l, conns: map[net.Conn]struct{}{}, refusedCh: make(chan struct{})}
	go p.serve()
	return p, nil
}

// Addr is host:port the proxy listens on.
func (p *apiProxy) Addr() string { return p.listener.Addr().String() }

func (p *apiProxy) serve() {
	for {
		c, err := p.listener.Accept()
		if err != nil {
			return // closed
		}
		p.mu.Lock()
		if p.cut {
			p.refused++
			close(p.refusedCh)
			p.refusedCh = make(chan struct{})
			p.mu.Unlock()
			c.Close()
			continue
		}
		p.conns[c] = struct{}{}
		p.mu.Unlock()
		go p.forward(c)
	}
}

func (p *apiProxy) forward(c net.Conn) {
	defer p.forget(c)
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	defer p.forget(up)
	p.mu.Lock()
	if p.cut { // cut while dialing
		p.mu.Unlock()
		return
	}
	p.conns[up] = struct{}{}
	p.mu.Unlock()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, up); done <- struct{}{} }()
	<-done // either side ending ends both
}

func (p *apiProxy) forget(c net.Conn) {
	c.Close()
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

// Cut closes every open connection and refuses new ones until Heal: the
// node's requests fail at once (connection reset), as they would time out
// behind a real partition, only sooner.
func (p *apiProxy) Cut() {
	p.mu.Lock()
	p.cut = true
	conns := p.conns
	p.conns = map[net.Conn]struct{}{}
	p.mu.Unlock()
	for c := range conns {
		c.Close()
	}
}

// Heal lets connections through again.
func (p *apiProxy) Heal() {
	p.mu.Lock()
	p.cut = false
	p.mu.Unlock()
}

// Refused returns how many connections were refused while cut, and a channel
// closed at the next refusal.
func (p *apiProxy) Refused() (int, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.refused, p.refusedCh
}

func (p *apiProxy) Close() {
	p.listener.Close()
	p.Cut()
}

// writeNodeKubeconfig writes a copy of kubeconfig whose clusters' server is
// the proxy (https://<proxy addr>) into dir, and returns its path.
func writeNodeKubeconfig(kubeconfig, dir, proxyAddr string) (string, error) {
	cfg, err := clientcmd.LoadFromFile(kubeconfig)
	if err != nil {
		return "", fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
	}
	for _, cluster := range cfg.Clusters {
		cluster.Server = "https://" + proxyAddr
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	path := filepath.Join(dir, "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return "", fmt.Errorf("node kubeconfig: %w", err)
	}
	return path, nil
}
