package main

// Certificates for a throw-away test cluster: one CA signs the API server's
// serving certificate and every client certificate; a separate key signs
// ServiceAccount tokens. Keys are ECDSA P-256: quick to generate, accepted by
// every Kubernetes component.

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

type keyPair struct {
	cert    *x509.Certificate
	key     *ecdsa.PrivateKey
	certPEM []byte
	keyPEM  []byte
}

func newSerial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
}

func encodeKey(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}

func newCA(commonName string) (*keyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: commonName},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(10 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	return finishPair(der, key)
}

func finishPair(der []byte, key *ecdsa.PrivateKey) (*keyPair, error) {
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return nil, err
	}
	return &keyPair{
		cert:    cert,
		key:     key,
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		keyPEM:  keyPEM,
	}, nil
}

// certRequest describes a leaf certificate: a client identity (CN is the user,
// O the groups), a server identity (DNS names and IPs), or both.
type certRequest struct {
	commonName   string
	organization []string
	dnsNames     []string
	ips          []net.IP
	server       bool
	client       bool
}

func (ca *keyPair) issue(req certRequest) (*keyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, err := newSerial()
	if err != nil {
		return nil, err
	}
	var usages []x509.ExtKeyUsage
	if req.server {
		usages = append(usages, x509.ExtKeyUsageServerAuth)
	}
	if req.client {
		usages = append(usages, x509.ExtKeyUsageClientAuth)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: req.commonName, Organization: req.organization},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  usages,
		DNSNames:     req.dnsNames,
		IPAddresses:  req.ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return nil, err
	}
	return finishPair(der, key)
}

// write stores the pair as <dir>/<name>.crt and <dir>/<name>.key.
func (p *keyPair) write(dir, name string) (certPath, keyPath string, err error) {
	certPath = filepath.Join(dir, name+".crt")
	keyPath = filepath.Join(dir, name+".key")
	if err = os.WriteFile(certPath, p.certPEM, 0o644); err != nil {
		return "", "", err
	}
	if err = os.WriteFile(keyPath, p.keyPEM, 0o600); err != nil {
		return "", "", err
	}
	return certPath, keyPath, nil
}

// pki is every credential file the control plane reads, by role.
type pki struct {
	caCert, caKey                   string
	serverCert, serverKey           string
	saKey, saPub                    string
	frontProxyCA                    string
	frontProxyCert, frontProxyKey   string
	kubeletClientCert, kubeletKey   string
	admin, controllerMgr, scheduler *keyPair
	ca                              *keyPair
}

func createPKI(dir string) (*pki, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	p := &pki{}
	var err error
	if p.ca, err = newCA("nvdra-test-cluster-ca"); err != nil {
		return nil, fmt.Errorf("cluster CA: %w", err)
	}
	if p.caCert, p.caKey, err = p.ca.write(dir, "ca"); err != nil {
		return nil, err
	}
	server, err := p.ca.issue(certRequest{
		commonName: "kube-apiserver",
		dnsNames: []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
			"kubernetes.default.svc.cluster.local"},
		ips:    []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1"), net.ParseIP(serviceClusterIP)},
		server: true,
	})
	if err != nil {
		return nil, fmt.Errorf("API server certificate: %w", err)
	}
	if p.serverCert, p.serverKey, err = server.write(dir, "apiserver"); err != nil {
		return nil, err
	}
	kubeletClient, err := p.ca.issue(certRequest{commonName: "kube-apiserver-kubelet-client",
		organization: []string{"kubeadm:cluster-admins"}, client: true})
	if err != nil {
		return nil, err
	}
	if p.kubeletClientCert, p.kubeletKey, err = kubeletClient.write(dir, "apiserver-kubelet-client"); err != nil {
		return nil, err
	}
	// The aggregation layer authenticates the API server to extension servers
	// with this front-proxy identity.
	frontCA, err := newCA("nvdra-test-front-proxy-ca")
	if err != nil {
		return nil, err
	}
	if p.frontProxyCA, _, err = frontCA.write(dir, "front-proxy-ca"); err != nil {
		return nil, err
	}
	frontClient, err := frontCA.issue(certRequest{commonName: "front-proxy-client", client: true})
	if err != nil {
		return nil, err
	}
	if p.frontProxyCert, p.frontProxyKey, err = frontClient.write(dir, "front-proxy-client"); err != nil {
		return nil, err
	}
	// Identities of the clients that get a kubeconfig. system:masters is the
	// admin group; the controller manager and scheduler have bootstrap RBAC
	// roles bound to these user names.
	if p.admin, err = p.ca.issue(certRequest{commonName: "admin", organization: []string{"system:masters"}, client: true}); err != nil {
		return nil, err
	}
	if p.controllerMgr, err = p.ca.issue(certRequest{commonName: "system:kube-controller-manager", client: true}); err != nil {
		return nil, err
	}
	if p.scheduler, err = p.ca.issue(certRequest{commonName: "system:kube-scheduler", client: true}); err != nil {
		return nil, err
	}
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	saKeyPEM, err := encodeKey(saKey)
	if err != nil {
		return nil, err
	}
	pubDER, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return nil, err
	}
	p.saKey = filepath.Join(dir, "sa.key")
	p.saPub = filepath.Join(dir, "sa.pub")
	if err := os.WriteFile(p.saKey, saKeyPEM, 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(p.saPub, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER}), 0o644); err != nil {
		return nil, err
	}
	return p, nil
}
