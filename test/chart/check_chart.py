#!/usr/bin/env python3
"""Renders the Helm chart with `helm template` in several configurations and
checks the objects: which exist, names, the plugin containers' commands and
environment (against the variables our binaries read), RBAC, the
ValidatingAdmissionPolicy's user, DeviceClass API versions and CEL, the
webhook's generated certificate, and that bad values fail naming the value.

  check_chart.py --helm PATH --chart DIR --source-dir DIR [--upstream-values FILE] [-k SUBSTRING]

Exit status 0 when every check passes; each failure is printed with its case.
"""

import argparse
import base64
import json
import os
import re
import subprocess
import sys
import tempfile

import yaml

NAMESPACE = "nvidia-dra"
RELEASE = "nvdra"
KUBE_VERSION = "1.34.0"
NAME = "dra-driver-nvidia-gpu"
PLUGIN_SA = f"{RELEASE}-{NAME}-service-account-kubeletplugin"
CONTROLLER_SA = f"{RELEASE}-{NAME}-service-account-controller"
BASE = ["--set", "gpuResourcesEnabledOverride=true"]

# Variables the chart sets that no binary of ours reads, on purpose: for the
# NVIDIA container runtime (no GPUs into the plugin containers), the bash
# wrapper, and -v (passed on the command line as $(LOG_VERBOSITY)).
ENV_NOT_FOR_BINARIES = {"NVIDIA_VISIBLE_DEVICES", "NVIDIA_MIG_CONFIG_DEVICES", "LOG_VERBOSITY",
                        "MASK_NVIDIA_DRIVER_PARAMS"}


class Checker:
    def __init__(self, args):
        self.helm = args.helm
        self.chart = args.chart
        self.source_dir = args.source_dir
        self.upstream_values = args.upstream_values
        self.failures = []
        self.case = ""
        self.env_read = self._env_read_by_binaries()

    # --- helpers ------------------------------------------------------------
    def _env_read_by_binaries(self):
        """Environment variables our binaries accept: the env twins declared
        with WithEnv/add(..., "NAME") in src/, plus direct getenv calls."""
        names = set()
        pattern = re.compile(r'\{"([A-Z][A-Z0-9_]+)"(?:,\s*"([A-Z][A-Z0-9_]+)")?\}|getenv\("([A-Z][A-Z0-9_]+)"\)'
                             r'|,\s*"([A-Z][A-Z0-9_]{2,})"\);')
        for folder, _, files in os.walk(os.path.join(self.source_dir, "src")):
            for f in files:
                if f.endswith((".cc", ".h")):
                    with open(os.path.join(folder, f), encoding="utf-8") as fh:
                        for m in pattern.finditer(fh.read()):
                            names.update(g for g in m.groups() if g)
        return names

    def render(self, *extra, api_versions=("resource.k8s.io/v1",), expect_fail=False):
        cmd = [self.helm, "template", RELEASE, self.chart, "--namespace", NAMESPACE,
               "--kube-version", KUBE_VERSION]
        for v in api_versions:
            cmd += ["--api-versions", v]
        cmd += list(extra)
        p = subprocess.run(cmd, capture_output=True, text=True)
        if expect_fail:
            if p.returncode == 0:
                self.fail(f"rendering succeeded, expected a failure: {' '.join(extra)}")
            return p.stderr
        if p.returncode != 0:
            self.fail(f"helm template failed: {p.stderr.strip()}")
            return []
        return [d for d in yaml.safe_load_all(p.stdout) if d]

    def fail(self, message):
        self.failures.append(f"[{self.case}] {message}")
        print(f"FAIL [{self.case}] {message}")

    def expect(self, condition, message):
        if not condition:
            self.fail(message)

    @staticmethod
    def find(objs, kind, name=None):
        return [o for o in objs if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]

    def one(self, objs, kind, name):
        found = self.find(objs, kind, name)
        if len(found) != 1:
            self.fail(f"want one {kind} {name}, found {len(found)}")
            return None
        return found[0]

    def containers(self, objs):
        ds = self.find(objs, "DaemonSet", f"{NAME}-kubelet-plugin")
        if not ds:
            return {}
        return {c["name"]: c for c in ds[0]["spec"]["template"]["spec"]["containers"]}

    @staticmethod
    def env(container):
        return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}

    # --- common checks of any successful render -----------------------------
    def check_common(self, objs):
        names = set()
        for o in objs:
            key = (o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"])
            self.expect(key not in names, f"duplicate object {key}")
            names.add(key)
            self.expect("apiVersion" in o, f"{key} has no apiVersion")
        # Every binding names a role and service accounts that the chart renders.
        service_accounts = {(o["metadata"]["namespace"], o["metadata"]["name"]) for o in self.find(objs, "ServiceAccount")}
        roles = {(o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"])
                 for o in objs if o["kind"] in ("Role", "ClusterRole")}
        for b in self.find(objs, "RoleBinding") + self.find(objs, "ClusterRoleBinding"):
            ref = b["roleRef"]
            ns = b["metadata"].get("namespace", "") if ref["kind"] == "Role" else ""
            if not ref["name"].startswith("system:"):
                self.expect((ref["kind"], ns, ref["name"]) in roles, f"{b['metadata']['name']} binds missing {ref}")
            for s in b["subjects"]:
                self.expect((s["namespace"], s["name"]) in service_accounts,
                            f"{b['metadata']['name']} binds service account {s} that the chart does not create")
        # No wildcard in any rule.
        for r in self.find(objs, "Role") + self.find(objs, "ClusterRole"):
            for rule in r["rules"]:
                for field in ("apiGroups", "resources", "verbs"):
                    self.expect("*" not in rule.get(field, []), f"{r['metadata']['name']} has '*' in {field}")
        # Pods run as the service accounts the chart creates (when it creates them).
        for o in self.find(objs, "DaemonSet") + self.find(objs, "Deployment"):
            sa = o["spec"]["template"]["spec"].get("serviceAccountName")
            self.expect((NAMESPACE, sa) in service_accounts, f"{o['metadata']['name']} runs as {sa}, not created")
        # The plugin containers' environment is what our binaries read.
        for c in list(self.containers(objs).values()) + [
                c for d in self.find(objs, "Deployment", f"{NAME}-controller")
                for c in d["spec"]["template"]["spec"]["containers"]]:
            for name in self.env(c):
                self.expect(name in self.env_read or name in ENV_NOT_FOR_BINARIES,
                            f"container {c['name']} sets {name}, which none of our binaries reads")
        # The VAP restricts the service account the plugins really run as.
        ds = self.find(objs, "DaemonSet")
        policies = [f"resourceslices-policy-{NAME}"]
        if "compute-domains" in self.containers(objs):
            policies.append(f"nodes-policy-{NAME}")  # the CD plugin may update only its own Node
        plugin_policies = list(policies)
        if self.find(objs, "Deployment", f"{NAME}-controller"):
            policies.append(f"controller-nodes-policy-{NAME}")  # only its label on Nodes
        daemon_accounts = sorted(s["metadata"]["namespace"] for s in self.find(objs, "ServiceAccount")
                                 if s["metadata"]["name"] == "compute-domain-daemon-service-account")
        if daemon_accounts:
            policies += [f"daemon-pods-policy-{NAME}", f"daemon-status-policy-{NAME}"]  # own pod, own domain
        for name in policies[len(plugin_policies):]:
            vap = self.find(objs, "ValidatingAdmissionPolicy", name)
            binding = self.find(objs, "ValidatingAdmissionPolicyBinding", name)
            self.expect(vap and binding and binding[0]["spec"]["validationActions"] == ["Deny"], f"{name} or binding")
            if vap and name.startswith("daemon-"):
                cond = vap[0]["spec"]["matchConditions"][0]["expression"]
                for ns in daemon_accounts:
                    self.expect(f'"system:serviceaccount:{ns}:compute-domain-daemon-service-account"' in cond,
                                f"{name} does not match the daemons of namespace {ns}: {cond!r}")
        if ds:
            self.expect(sorted(o["metadata"]["name"] for o in self.find(objs, "ValidatingAdmissionPolicy")) ==
                        sorted(policies), f"policies, want {policies}")
            for name in plugin_policies:
                vap = self.find(objs, "ValidatingAdmissionPolicy", name)
                if not vap:
                    continue
                sa = ds[0]["spec"]["template"]["spec"]["serviceAccountName"]
                cond = vap[0]["spec"]["matchConditions"][0]["expression"]
                self.expect(f'"system:serviceaccount:{NAMESPACE}:{sa}"' in cond,
                            f"{name} matches {cond!r}, not the plugins' account {sa}")
                binding = self.find(objs, "ValidatingAdmissionPolicyBinding", name)
                self.expect(binding and binding[0]["spec"]["policyName"] == name
                            and binding[0]["spec"]["validationActions"] == ["Deny"], f"{name} binding wrong")

    # --- cases ----------------------------------------------------------------
    def case_default(self):
        objs = self.render(*BASE)
        self.check_common(objs)
        c = self.containers(objs)
        self.expect(sorted(c) == ["compute-domains", "gpus"], f"containers {sorted(c)}")
        if "gpus" in c:
            self.expect(c["gpus"]["command"] == ["gpu-kubelet-plugin", "-v", "$(LOG_VERBOSITY)"],
                        f"gpus command {c['gpus'].get('command')}")
            env = self.env(c["gpus"])
            for k, v in {"NVIDIA_DRIVER_ROOT": "/", "CDI_ROOT": "/var/run/cdi", "HEALTHCHECK_PORT": "51516",
                         "HTTP_ENDPOINT": ":8080", "IMAGE_NAME": f"nvdra.local/{NAME}:v0.1.0",
                         "KUBELET_PLUGINS_DIRECTORY_PATH": "/var/lib/kubelet/plugins"}.items():
                self.expect(env.get(k) == v, f"gpus env {k}={env.get(k)!r}, want {v!r}")
            self.expect(env.get("NODE_NAME") == {"fieldRef": {"fieldPath": "spec.nodeName"}}, "gpus NODE_NAME")
            self.expect(c["gpus"]["resources"]["requests"]["memory"] == "32Mi", "gpus memory request")
            self.expect(c["gpus"]["startupProbe"]["grpc"]["port"] == 51516, "gpus startup probe port")
        if "compute-domains" in c:
            env = self.env(c["compute-domains"])
            for k, v in {"IMEX_MODE": "driverManaged", "IMEX_ISOLATION": "domain", "HTTP_ENDPOINT": ":8081",
                         "HEALTHCHECK_PORT": "51515", "GPU_CLIQUE_LABEL_ENABLED": "false"}.items():
                self.expect(env.get(k) == v, f"compute-domains env {k}={env.get(k)!r}, want {v!r}")
            self.expect("IMAGE_NAME" not in env, "compute-domains gets IMAGE_NAME (gpu plugin only)")
        classes = {o["metadata"]["name"]: o for o in self.find(objs, "DeviceClass")}
        self.expect(sorted(classes) == sorted(["gpu.nvidia.com", "mig.nvidia.com", "vfio.gpu.nvidia.com",
                                               "compute-domain-default-channel.nvidia.com",
                                               "compute-domain-daemon.nvidia.com"]), f"classes {sorted(classes)}")
        for o in classes.values():
            self.expect(o["apiVersion"] == "resource.k8s.io/v1", f"{o['metadata']['name']} {o['apiVersion']}")
        if "gpu.nvidia.com" in classes:
            self.expect(classes["gpu.nvidia.com"]["spec"].get("extendedResourceName") == "nvidia.com/gpu",
                        "gpu class without extendedResourceName on v1")
            self.expect(classes["gpu.nvidia.com"]["spec"]["selectors"][0]["cel"]["expression"] ==
                        "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'",
                        "gpu class CEL")
        ch = classes.get("compute-domain-default-channel.nvidia.com")
        if ch:
            self.expect(ch["spec"]["selectors"][0]["cel"]["expression"].endswith(
                "['compute-domain.nvidia.com'].id == 0"), "default channel class must select channel 0 in domain isolation")
        self.one(objs, "Deployment", f"{NAME}-controller")
        self.expect(any(s["name"] == PLUGIN_SA for s in
                        self.one(objs, "ClusterRoleBinding", f"{NAME}-clusterrole-binding-kubeletplugin")["subjects"]),
                    "plugin binding subject")
        plugin_rules = self.one(objs, "ClusterRole", f"{NAME}-clusterrole-kubeletplugin")["rules"]
        self.expect(not any("pods" in r["resources"] for r in plugin_rules), "plugins get pods access they do not use")
        self.check_webhook_generated(objs)

    def check_webhook_generated(self, objs):
        vwc = self.one(objs, "ValidatingWebhookConfiguration", f"{NAME}-webhook-config")
        secret = self.one(objs, "Secret", f"{NAME}-webhook-cert")
        deploy = self.one(objs, "Deployment", f"{NAME}-webhook")
        self.one(objs, "Service", f"{NAME}-webhook")
        if not (vwc and secret and deploy):
            return
        hook = vwc["webhooks"][0]
        self.expect(hook["clientConfig"].get("caBundle") == secret["data"]["ca.crt"], "caBundle is not the Secret's CA")
        self.expect(hook["failurePolicy"] == "Fail" and hook["sideEffects"] == "None", "webhook policy")
        self.expect(sorted(hook["rules"][0]["resources"]) == ["resourceclaims", "resourceclaimtemplates"], "rules")
        self.expect(deploy["spec"]["template"]["spec"]["volumes"][0]["secret"]["secretName"] == f"{NAME}-webhook-cert",
                    "webhook mounts another secret")
        # Highly available by default: two replicas spread over nodes, one
        # down at a time, a PodDisruptionBudget, a bounded wait, and only
        # claims naming our drivers or classes sent (chart.cluster checks
        # the matchConditions against a real API server).
        spec = deploy["spec"]
        self.expect(spec["replicas"] == 2 and spec["strategy"]["rollingUpdate"]["maxUnavailable"] == 1,
                    f"webhook replicas/strategy {spec['replicas']} {spec['strategy']}")
        spread = spec["template"]["spec"].get("topologySpreadConstraints", [])
        self.expect(len(spread) == 1 and spread[0]["topologyKey"] == "kubernetes.io/hostname"
                    and spread[0]["labelSelector"]["matchLabels"] == spec["selector"]["matchLabels"],
                    f"webhook spread {spread}")
        pdb = self.one(objs, "PodDisruptionBudget", f"{NAME}-webhook")
        self.expect(pdb and pdb["spec"]["maxUnavailable"] == 1
                    and pdb["spec"]["selector"]["matchLabels"] == spec["selector"]["matchLabels"], f"webhook PDB {pdb}")
        self.expect(hook.get("timeoutSeconds") == 10, f"webhook timeoutSeconds {hook.get('timeoutSeconds')}")
        conditions = hook.get("matchConditions", [])
        self.expect(len(conditions) == 1 and all(f"'{c}'" in conditions[0]["expression"] for c in
                                                 ("gpu.nvidia.com", "compute-domain.nvidia.com", "mig.nvidia.com",
                                                  "vfio.gpu.nvidia.com", "compute-domain-daemon.nvidia.com",
                                                  "compute-domain-default-channel.nvidia.com")),
                    f"webhook matchConditions {conditions}")
        # The certificate is for the Service's DNS name and signed by the CA.
        with tempfile.TemporaryDirectory() as tmp:
            crt, ca = os.path.join(tmp, "tls.crt"), os.path.join(tmp, "ca.crt")
            for path, key in ((crt, "tls.crt"), (ca, "ca.crt")):
                with open(path, "wb") as f:
                    f.write(base64.b64decode(secret["data"][key]))
            text = subprocess.run(["openssl", "x509", "-in", crt, "-noout", "-text"], capture_output=True, text=True).stdout
            self.expect(f"DNS:{NAME}-webhook.{NAMESPACE}.svc" in text, "certificate lacks the Service DNS name")
            verify = subprocess.run(["openssl", "verify", "-CAfile", ca, crt], capture_output=True, text=True)
            self.expect(verify.returncode == 0, f"certificate does not verify against ca.crt: {verify.stdout}{verify.stderr}")

    def case_upstream_values(self):
        if not self.upstream_values:
            return
        objs = self.render("-f", self.upstream_values)
        self.check_common(objs)
        self.expect(not self.find(objs, "ValidatingWebhookConfiguration"), "webhook rendered with upstream's enabled=false")
        self.expect(sorted(self.containers(objs)) == ["compute-domains", "gpus"], "containers with upstream values")
        c = self.containers(objs).get("gpus")
        if c:
            self.expect(c["image"] == f"registry.k8s.io/dra-driver-nvidia/{NAME}:v0.1.0", f"image {c['image']}")
            gates = self.env(c).get("FEATURE_GATES", "")
            self.expect("ContextualLogging=true" in gates and "LoggingAlphaOptions=false" in gates, f"gates {gates}")
            # Upstream's resources: {} keeps our measured requests (Helm merges maps).
            self.expect(c.get("resources", {}).get("requests", {}).get("memory") == "32Mi", "requests lost")
        # `helm template` always offers its built-in API versions (v1 among
        # them), so detection itself is checked against the API server
        # (chart_cluster_test); here the override.
        for v in ("v1beta2", "v1beta1"):
            objs = self.render("-f", self.upstream_values, "--set", f"resourceApiVersion=resource.k8s.io/{v}")
            classes = self.find(objs, "DeviceClass")
            self.expect(len(classes) == 5 and all(o["apiVersion"] == f"resource.k8s.io/{v}" for o in classes),
                        f"DeviceClass version with resourceApiVersion {v}")
            self.expect(not any("extendedResourceName" in o["spec"] for o in classes), f"extendedResourceName on {v}")

    def case_gpus_off(self):
        objs = self.render("--set", "resources.gpus.enabled=false")
        self.check_common(objs)
        self.expect(sorted(self.containers(objs)) == ["compute-domains"], "containers with gpus off")
        classes = [o["metadata"]["name"] for o in self.find(objs, "DeviceClass")]
        self.expect(not any(c in classes for c in ("gpu.nvidia.com", "mig.nvidia.com", "vfio.gpu.nvidia.com")),
                    f"gpu classes with gpus off: {classes}")

    def case_compute_domains_off(self):
        objs = self.render(*BASE, "--set", "resources.computeDomains.enabled=false")
        self.check_common(objs)
        self.expect(sorted(self.containers(objs)) == ["gpus"], "containers with computeDomains off")
        self.expect(not self.find(objs, "Deployment", f"{NAME}-controller"), "controller with computeDomains off")
        self.expect(not self.find(objs, "ClusterRole", "compute-domain-daemon-role")
                    and not self.find(objs, "Role", "compute-domain-daemon-role"), "daemon RBAC with CDs off")
        self.expect(not any(o["metadata"]["name"].startswith("compute-domain") for o in self.find(objs, "DeviceClass")),
                    "compute-domain classes with computeDomains off")
        rules = self.one(objs, "ClusterRole", f"{NAME}-clusterrole-kubeletplugin")["rules"]
        nodes = [r for r in rules if "nodes" in r["resources"]]
        self.expect(nodes and nodes[0]["verbs"] == ["get"], f"GPU-only plugin node verbs {nodes}")

    def case_both_off(self):
        objs = self.render("--set", "resources.gpus.enabled=false", "--set", "resources.computeDomains.enabled=false")
        self.check_common(objs)
        self.expect(not self.find(objs, "DaemonSet") and not self.find(objs, "ValidatingAdmissionPolicy"),
                    "plugins or policy with both parts off")

    def case_webhook_off(self):
        objs = self.render(*BASE, "--set", "webhook.enabled=false")
        self.check_common(objs)
        for kind in ("ValidatingWebhookConfiguration", "Secret", "Service"):
            self.expect(not self.find(objs, kind), f"{kind} with the webhook off")
        self.expect(not self.find(objs, "Deployment", f"{NAME}-webhook"), "webhook Deployment with the webhook off")

    def case_webhook_availability_options(self):
        objs = self.render(*BASE, "--set", "webhook.replicas=3", "--set", "webhook.spreadOverNodes=false",
                           "--set", "webhook.podDisruptionBudget.enabled=false", "--set", "webhook.timeoutSeconds=5")
        self.check_common(objs)
        deploy = self.one(objs, "Deployment", f"{NAME}-webhook")
        if deploy:
            self.expect(deploy["spec"]["replicas"] == 3, "webhook.replicas")
            self.expect("topologySpreadConstraints" not in deploy["spec"]["template"]["spec"], "spread with spreadOverNodes=false")
        self.expect(not self.find(objs, "PodDisruptionBudget"), "PDB with podDisruptionBudget.enabled=false")
        vwc = self.one(objs, "ValidatingWebhookConfiguration", f"{NAME}-webhook-config")
        if vwc:
            self.expect(vwc["webhooks"][0]["timeoutSeconds"] == 5, "webhook.timeoutSeconds")
        objs = self.render(*BASE, "--set", "webhook.metrics.enabled=true", "--set", "webhook.metrics.httpEndpoint=:9090")
        deploy = self.one(objs, "Deployment", f"{NAME}-webhook")
        if deploy:
            c = deploy["spec"]["template"]["spec"]["containers"][0]
            self.expect("--http-endpoint=:9090" in c["args"] and "--metrics-path=/metrics" in c["args"],
                        f"webhook metrics args {c['args']}")
            self.expect({"name": "metrics-webhook", "containerPort": 9090} in c["ports"], f"webhook metrics port {c['ports']}")
        objs = self.render(*BASE)
        deploy = self.one(objs, "Deployment", f"{NAME}-webhook")
        if deploy:
            c = deploy["spec"]["template"]["spec"]["containers"][0]
            self.expect(not any(a.startswith("--http-endpoint") for a in c["args"]), "webhook metrics on by default")
        objs = self.render(*BASE, "--set", "webhook.podDisruptionBudget.maxUnavailable=50%")
        pdb = self.one(objs, "PodDisruptionBudget", f"{NAME}-webhook")
        self.expect(pdb and pdb["spec"]["maxUnavailable"] == "50%", f"PDB percentage {pdb}")
        err = self.render(*BASE, "--set", "webhook.timeoutSeconds=60", expect_fail=True)
        self.expect("/webhook/timeoutSeconds" in err, f"timeoutSeconds 60 accepted: {err.strip()[:200]}")

    def case_monitoring(self):
        objs = self.render(*BASE)
        for kind in ("PodMonitor", "PrometheusRule"):
            self.expect(not self.find(objs, kind), f"{kind} rendered by default")
        self.expect(not [o for o in self.find(objs, "ConfigMap") if o["metadata"]["name"].endswith("-dashboard")],
                    "dashboard rendered by default")
        objs = self.render(*BASE, "--set", "monitoring.podMonitor.enabled=true", "--set",
                           "monitoring.prometheusRule.enabled=true", "--set", "monitoring.dashboard.enabled=true",
                           "--set", "monitoring.podMonitor.labels.release=prom", "--set", "webhook.metrics.enabled=true")
        self.check_common(objs)
        pm = self.find(objs, "PodMonitor")
        self.expect(len(pm) == 1 and pm[0]["metadata"]["labels"].get("release") == "prom", f"PodMonitor {pm}")
        if pm:
            ports = [e["port"] for e in pm[0]["spec"]["podMetricsEndpoints"]]
            self.expect(ports == ["metrics-ctrl", "metrics-gpu", "metrics-cd", "metrics-webhook"], f"endpoints {ports}")
            # Every scraped port name exists on a container.
            named = {p["name"] for c in self.containers(objs).values() for p in c.get("ports", [])}
            named |= {p["name"] for d in self.find(objs, "Deployment")
                      for c in d["spec"]["template"]["spec"]["containers"] for p in c.get("ports", [])}
            self.expect(set(ports) <= named, f"ports {sorted(set(ports) - named)} on no container")
        rules = self.find(objs, "PrometheusRule")
        alerts = [r["alert"] for r in rules[0]["spec"]["groups"][0]["rules"]] if rules else []
        self.expect(alerts == ["NvidiaDraPrepareErrors", "NvidiaDraComputeDomainsNotReady",
                               "NvidiaDraWebhookCertificateExpiring"], f"alerts {alerts}")
        dash = [o for o in self.find(objs, "ConfigMap") if o["metadata"]["name"].endswith("-dashboard")]
        self.expect(len(dash) == 1 and dash[0]["metadata"]["labels"].get("grafana_dashboard") == "1"
                    and json.loads(dash[0]["data"]["dra-driver-nvidia-gpu.json"])["uid"] == "nvdra-driver",
                    "dashboard ConfigMap")
        # Without the webhook's metrics, no alert that could never fire.
        objs = self.render(*BASE, "--set", "monitoring.prometheusRule.enabled=true")
        rules = self.find(objs, "PrometheusRule")
        self.expect(rules and len(rules[0]["spec"]["groups"][0]["rules"]) == 2, "certificate alert without webhook metrics")
        ctrl = self.find(objs, "Deployment", f"{NAME}-controller")
        self.expect(ctrl and not any(k.startswith("CD_DAEMON_HTTP") for k in
                                     self.env(ctrl[0]["spec"]["template"]["spec"]["containers"][0])),
                    "daemon metrics endpoint set by default")

        # The compute-domain daemons' metrics: the controller is told the
        # endpoint; a PodMonitor of their own selects the controller's daemon
        # pods by their domain label, on the port name the controller gives
        # them (kDaemonMetricsPortName in src/computedomain/config.h); and an
        # alert reads their readiness.
        objs = self.render(*BASE, "--set", "computeDomainDaemon.metrics.enabled=true", "--set",
                           "computeDomainDaemon.metrics.httpEndpoint=:9400", "--set",
                           "computeDomainDaemon.metrics.metricsPath=/m", "--set", "monitoring.podMonitor.enabled=true",
                           "--set", "monitoring.prometheusRule.enabled=true")
        self.check_common(objs)
        ctrl = self.one(objs, "Deployment", f"{NAME}-controller")
        env = self.env(ctrl["spec"]["template"]["spec"]["containers"][0]) if ctrl else {}
        self.expect(env.get("CD_DAEMON_HTTP_ENDPOINT") == ":9400" and env.get("CD_DAEMON_METRICS_PATH") == "/m",
                    f"controller env for the daemons' metrics: {env}")
        with open(os.path.join(self.source_dir, "src", "computedomain", "config.h"), encoding="utf-8") as f:
            port_name = re.search(r'kDaemonMetricsPortName = "([^"]+)"', f.read())
        self.expect(port_name, "kDaemonMetricsPortName not found in src/computedomain/config.h")
        daemon_pm = self.one(objs, "PodMonitor", f"{RELEASE}-{NAME}-compute-domain-daemons")
        if daemon_pm and port_name:
            self.expect(daemon_pm["spec"]["selector"] == {"matchExpressions": [
                {"key": "resource.nvidia.com/computeDomain", "operator": "Exists"}]}, f"daemon selector {daemon_pm}")
            self.expect(daemon_pm["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}, "daemon namespace")
            self.expect([(e["port"], e["path"]) for e in daemon_pm["spec"]["podMetricsEndpoints"]]
                        == [(port_name.group(1), "/m")], f"daemon endpoints {daemon_pm['spec']}")
        rules = self.find(objs, "PrometheusRule")
        alerts = [r["alert"] for r in rules[0]["spec"]["groups"][0]["rules"]] if rules else []
        self.expect("NvidiaDraImexDaemonNotReady" in alerts, f"no daemon alert: {alerts}")
        # No daemons to scrape without driver-managed IMEX.
        objs = self.render(*BASE, "--set", "computeDomainDaemon.metrics.enabled=true", "--set",
                           "monitoring.podMonitor.enabled=true", "--set", "featureGates.HostManagedIMEXDaemon=true",
                           "--set", "resources.computeDomains.imex.mode=hostManaged")
        self.expect(not self.find(objs, "PodMonitor", f"{RELEASE}-{NAME}-compute-domain-daemons"),
                    "daemon PodMonitor with hostManaged IMEX")

    def case_webhook_modes(self):
        objs = self.render(*BASE, "--set", "webhook.tls.mode=secret", "--set", "webhook.tls.secret.name=mine",
                           "--set", "webhook.tls.secret.caBundle=Q0E=")
        self.check_common(objs)
        self.expect(not self.find(objs, "Secret"), "a Secret rendered in mode secret")
        vwc = self.find(objs, "ValidatingWebhookConfiguration")
        self.expect(vwc and vwc[0]["webhooks"][0]["clientConfig"]["caBundle"] == "Q0E=", "secret-mode caBundle")
        d = self.one(objs, "Deployment", f"{NAME}-webhook")
        self.expect(d and d["spec"]["template"]["spec"]["volumes"][0]["secret"]["secretName"] == "mine", "secret name")
        objs = self.render(*BASE, "--set", "webhook.tls.mode=cert-manager")
        self.one(objs, "Certificate", f"{NAME}-webhook-cert")
        self.expect(len(self.find(objs, "Issuer")) == 1, "selfsigned Issuer")
        vwc = self.find(objs, "ValidatingWebhookConfiguration")
        self.expect(vwc and vwc[0]["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] ==
                    f"{NAMESPACE}/{NAME}-webhook-cert", "inject-ca-from")

    def case_channel_isolation(self):
        objs = self.render(*BASE, "--set", "resources.computeDomains.imex.isolation=channel",
                           "--set", "resources.computeDomains.imex.channelCount=64")
        self.check_common(objs)
        ch = self.one(objs, "DeviceClass", "compute-domain-default-channel.nvidia.com")
        if ch:
            expr = ch["spec"]["selectors"][0]["cel"]["expression"]
            self.expect("id ==" not in expr and "type == 'channel'" in expr, f"channel-isolation CEL {expr}")
        c = self.containers(objs).get("compute-domains")
        self.expect(c and self.env(c).get("IMEX_ISOLATION") == "channel", "plugin IMEX_ISOLATION")
        d = self.one(objs, "Deployment", f"{NAME}-controller")
        self.expect(d and self.env(d["spec"]["template"]["spec"]["containers"][0]).get("IMEX_ISOLATION") == "channel",
                    "controller IMEX_ISOLATION")
        # Plugin and controller must agree on the channel range.
        self.expect(c and self.env(c).get("IMEX_CHANNEL_COUNT") == "64", "plugin IMEX_CHANNEL_COUNT")
        self.expect(d and self.env(d["spec"]["template"]["spec"]["containers"][0]).get("IMEX_CHANNEL_COUNT") == "64",
                    "controller IMEX_CHANNEL_COUNT")

    def case_host_managed(self):
        objs = self.render(*BASE, "--set", "resources.computeDomains.imex.mode=hostManaged",
                           "--set", "featureGates.HostManagedIMEXDaemon=true")
        self.check_common(objs)
        self.expect(not self.find(objs, "DeviceClass", "compute-domain-daemon.nvidia.com"), "daemon class in hostManaged")
        self.expect(not self.find(objs, "ClusterRole", "compute-domain-daemon-role")
                    and not self.find(objs, "Role", "compute-domain-daemon-role"), "daemon RBAC in hostManaged")

    def case_options(self):
        objs = self.render(*BASE, "--set", "maskNvidiaDriverParams=true", "--set", "nvidiaDriverRoot=/run/nvidia/driver",
                           "--set", "featureGates.PassthroughSupport=true", "--set", "featureGates.MPSSupport=true",
                           "--set", "altProcDevices=/var/lib/mock/proc-devices",
                           "--set-json", 'imagePullSecrets=[{"name":"a"},{"name":"b"}]',
                           "--set-json", 'controller.containers.computeDomain.env=[{"name":"ADDITIONAL_NAMESPACES","value":"x, y,x"}]',
                           "--set", "kubeletPlugin.containers.init.enabled=false")
        self.check_common(objs)
        c = self.containers(objs)
        gpus = c.get("gpus", {})
        self.expect(gpus.get("command") == ["bash", "-c"] and "exec gpu-kubelet-plugin" in gpus.get("args", [""])[0],
                    "masking wrapper")
        env = self.env(gpus)
        self.expect(env.get("HOST_ROOT") == "/host-root" and env.get("IMAGE_PULL_SECRETS") == "a,b"
                    and env.get("ALT_PROC_DEVICES_PATH") == "/alt-proc-devices", f"gpus env {env}")
        ds = self.find(objs, "DaemonSet")[0]["spec"]["template"]["spec"]
        self.expect("initContainers" not in ds, "init container rendered with init.enabled=false")
        vols = {v["name"]: v for v in ds["volumes"]}
        self.expect(vols["driver-root-parent"]["hostPath"]["path"] == "/run/nvidia", "driver-root parent")
        self.expect("host-root" in vols and "sysfs" in vols, "passthrough volumes")
        mounts = {m["mountPath"]: m for m in gpus.get("volumeMounts", [])}
        self.expect(mounts.get("/host-root", {}).get("readOnly") is True
                    and mounts.get("/host-root/sys", {}).get("name") == "sysfs"
                    and not mounts.get("/host-root/sys", {}).get("readOnly", False),
                    f"host root read-only with its sysfs writable: {sorted(mounts)}")
        roles = self.find(objs, "Role", f"{NAME}-role-controller")
        self.expect(sorted(r["metadata"]["namespace"] for r in roles) == sorted([NAMESPACE, "x", "y"]),
                    f"controller roles in {[r['metadata']['namespace'] for r in roles]}")
        self.expect(len([s for s in self.find(objs, "ServiceAccount") if s["metadata"]["name"] ==
                         "compute-domain-daemon-service-account"]) == 3, "daemon accounts per namespace")
        plugin_role = [r for r in self.find(objs, "Role", f"{NAME}-role-kubeletplugin") if r["metadata"]["namespace"] == NAMESPACE]
        self.expect(plugin_role and any("deployments" in r["resources"] for r in plugin_role[0]["rules"]), "MPS rule")

    def case_failures(self):
        cases = [
            ((), "gpuResourcesEnabledOverride"),
            ((*BASE, "--set", "resources.computeDomains.imex.mode=hostManaged"), "HostManagedIMEXDaemon"),
            ((*BASE, "--set", "resources.computeDomains.imex.mode=other"), "resources.computeDomains.imex.mode"),
            ((*BASE, "--set", "resources.computeDomains.imex.isolation=node"), "resources.computeDomains.imex.isolation"),
            ((*BASE, "--set", "webhook.tls.mode=none"), "webhook.tls.mode"),
            ((*BASE, "--set", "webhook.tls.mode=secret"), "webhook.tls.secret.name"),
            ((*BASE, "--set", "webhook.tls.mode=secret", "--set", "webhook.tls.secret.name=x"), "webhook.tls.secret.caBundle"),
            ((*BASE, "--set", "webhook.tls.mode=cert-manager", "--set", "webhook.tls.certManager.issuerType=issuer"),
             "webhook.tls.certManager.issuerName"),
            ((*BASE, "--set", "nvidiaCtkPath=/usr/bin/nvidia-ctk"), "nvidiaCtkPath"),
            ((*BASE, "--set", "namespace=x"), "namespace"),
            # values.schema.json: a misspelled key, a wrong type, an unknown choice.
            ((*BASE, "--set", "webhook.replcas=2"), "additional properties 'replcas' not allowed"),
            ((*BASE, "--set", "resources.gpus.enabeld=true"), "additional properties 'enabeld' not allowed"),
            ((*BASE, "--set", "kubeletPlugin.containers.gpus.healthchekPort=1"), "'healthchekPort' not allowed"),
            ((*BASE, "--set", "webhook.replicas=two"), "/webhook/replicas"),
            ((*BASE, "--set", "webhook.failurePolicy=Sometimes"), "/webhook/failurePolicy"),
            ((*BASE, "--set", "featureGates.DynamicMIG=yes"), "/featureGates/DynamicMIG"),
            # The daemons' container port must be fixed.
            ((*BASE, "--set", "computeDomainDaemon.metrics.httpEndpoint=:0"), "/computeDomainDaemon/metrics/httpEndpoint"),
            ((*BASE, "--set", "computeDomainDaemon.metrics.httpEndpoint=8082"),
             "/computeDomainDaemon/metrics/httpEndpoint"),
            ((*BASE, "--set", "computeDomainDaemon.metrics.metricsPath=metrics"),
             "/computeDomainDaemon/metrics/metricsPath"),
            ((*BASE, "--set", "computeDomainDaemon.metrcs.enabled=true"), "additional properties 'metrcs' not allowed"),
        ]
        for extra, needle in cases:
            err = self.render(*extra, expect_fail=True)
            self.expect(needle in err, f"failure for {extra} does not name {needle}: {err.strip()[:300]}")
        # The default namespace is refused unless allowed.
        p = subprocess.run([self.helm, "template", RELEASE, self.chart, "--namespace", "default", "--kube-version",
                            KUBE_VERSION, "--api-versions", "resource.k8s.io/v1", *BASE], capture_output=True, text=True)
        self.expect(p.returncode != 0 and "allowDefaultNamespace" in p.stderr, "default namespace accepted")

    def case_docs(self):
        """Every value of values.yaml has a row in docs/configuration.md."""
        with open(os.path.join(self.chart, "values.yaml"), encoding="utf-8") as f:
            values = yaml.safe_load(f)
        with open(os.path.join(self.source_dir, "docs", "configuration.md"), encoding="utf-8") as f:
            doc = f.read()
        # Maps documented as one row (free-form Kubernetes fields).
        whole = {"resources", "securityContext", "affinity", "strategy", "updateStrategy", "featureGates",
                 "selectorLabelsOverride", "podAnnotations", "podSecurityContext", "nodeSelector", "annotations",
                 "labels"}

        def leaves(node, path):
            if isinstance(node, dict) and node and not (path and path[-1] in whole and path[0] != "resources"
                                                        or path == ["featureGates"]):
                for k, v in node.items():
                    yield from leaves(v, path + [k])
            else:
                yield ".".join(path)
        keys = list(leaves(values, []))
        self.expect(len(keys) > 80, f"only {len(keys)} values found in values.yaml")
        for key in keys:
            self.expect(f"| `{key}` |" in doc, f"docs/configuration.md has no row for `{key}`")

    def run(self, only):
        for name in sorted(n for n in dir(self) if n.startswith("case_")):
            if only and only not in name:
                continue
            self.case = name[len("case_"):]
            before = len(self.failures)
            getattr(self, name)()
            print(f"{'ok  ' if len(self.failures) == before else 'FAIL'} {self.case}")
        return not self.failures


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--helm", required=True)
    parser.add_argument("--chart", required=True)
    parser.add_argument("--source-dir", required=True)
    parser.add_argument("--upstream-values")
    parser.add_argument("-k", default="", help="only cases whose name contains this")
    args = parser.parse_args()
    ok = Checker(args).run(args.k)
    print("all chart checks passed" if ok else "chart checks FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
