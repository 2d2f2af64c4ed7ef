package harness

import "path/filepath"

// EnvAuditLog, set to "1" in the test process before StartControlPlane,
// makes the launcher it starts (which inherits the variable) write the API
// server's audit log: one JSON line per request (audit.k8s.io/v1 Event at
// level Metadata: user, user agent, verb, resource, status). Off by default,
// since it costs the API server a line per request; benchmarks use it to say
// which client made which request.
const EnvAuditLog = "CLUSTER_AUDIT_LOG"

// AuditLogPath is the API server's audit log (see EnvAuditLog): logs/ of the
// launcher's folder, which also holds the admin kubeconfig.
func (cp *ControlPlane) AuditLogPath() string {
	return filepath.Join(filepath.Dir(cp.Kubeconfig), "logs", "audit.log")
}
