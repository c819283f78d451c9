//! A real Kubernetes API server for integration tests: etcd and kube-apiserver built from their Go
//! modules by `e2e/kube/build.sh`, started on loopback with RBAC and static bearer tokens.
//!
//! The binaries are looked up in `$AKRITAS_E2E_BIN/<key>` (default `<cache>/e2e-bin/<key>`, the
//! cache being [`crate::cache_dir`]; the
//! key is `e2e/kube/VERSION`). A missing binary FAILS the test (nothing is skipped): run
//! `e2e/kube/build.sh`. `kubectl` is `$KUBECTL` or the one build.sh makes from the same release;
//! `openssl` makes the keys.
//!
//! Identities (static token file; the API server adds `system:authenticated` to each):
//! - `admin`: user `admin`, group `system:masters`;
//! - `operator`: `system:serviceaccount:akritas-system:akritas` with the service-account groups;
//! - `other`: `system:serviceaccount:default:other`, a bystander for "forbidden" checks.
//!
//! Real service-account tokens work too ([`KubeApi::service_account_token`]).
//!
//! Every request is recorded in the API server's audit log (level `Metadata`: who,
//! verb, resource, name, namespace; never bodies), read with [`KubeApi::audit_events`].
use std::{
    io::Write,
    net::TcpListener,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use base64::Engine as _;
use tempfile::TempDir;

/// The namespace the operator runs in (chart default).
pub const OPERATOR_NAMESPACE: &str = "akritas-system";
/// The operator's service account.
pub const OPERATOR_SERVICE_ACCOUNT: &str = "akritas";
/// The user name the operator token authenticates as.
pub const OPERATOR_USER: &str = "system:serviceaccount:akritas-system:akritas";
/// The user name of the bystander token.
pub const OTHER_USER: &str = "system:serviceaccount:default:other";

/// A running etcd + kube-apiserver pair; both are killed on drop.
pub struct KubeApi {
    /// `https://127.0.0.1:PORT`
    pub url: String,
    /// Kubeconfig for `admin` (`system:masters`), with the generated CA.
    pub admin_kubeconfig: PathBuf,
    /// Bearer token of `admin`.
    pub admin_token: String,
    /// PEM of the CA that signed the serving certificate.
    pub ca_pem: String,
    /// Time from spawning kube-apiserver to `/readyz` OK.
    pub startup: Duration,
    /// Temporary directory with keys, tokens, kubeconfigs, logs and etcd's data.
    pub dir: TempDir,
    operator_token: String,
    other_token: String,
    etcd: Child,
    apiserver: Child,
}

/// Returns `N` distinct, currently free loopback ports.
fn free_ports<const N: usize>() -> [u16; N] {
    let listeners: Vec<TcpListener> =
        (0..N).map(|_| TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0")).collect();
    std::array::from_fn(|i| listeners[i].local_addr().expect("local addr").port())
}

/// The directory `e2e/kube/build.sh` puts the binaries in.
pub fn bin_dir() -> PathBuf {
    let key = std::fs::read_to_string(crate::root().join("e2e/kube/VERSION")).expect("read e2e/kube/VERSION");
    let base = std::env::var_os("AKRITAS_E2E_BIN").map_or_else(|| crate::cache_dir().join("e2e-bin"), PathBuf::from);
    base.join(key.trim())
}

/// Path of a binary built by `e2e/kube/build.sh` (`kube-apiserver`, `etcd` or `helm`); panics
/// with the command to run when it is missing.
pub fn e2e_binary(name: &str) -> PathBuf {
    let path = bin_dir().join(name);
    assert!(
        path.is_file(),
        "{} is missing: run `e2e/kube/build.sh` (builds etcd, kube-apiserver and helm from their Go modules; \
         about 12 minutes the first time) or point AKRITAS_E2E_BIN at its output",
        path.display()
    );
    path
}

/// The `kubectl` to run: `$KUBECTL`, or the one `e2e/kube/build.sh` built from the same release.
pub fn kubectl_binary() -> PathBuf {
    std::env::var_os("KUBECTL").map_or_else(|| e2e_binary("kubectl"), PathBuf::from)
}

fn random_token() -> String {
    format!("{:032x}", rand::random::<u128>())
}

fn run_checked(command: &mut Command) {
    let output = command.output().unwrap_or_else(|e| panic!("cannot run {command:?}: {e}"));
    assert!(output.status.success(), "{command:?} failed: {}", String::from_utf8_lossy(&output.stderr));
}

/// Last `n` lines of a log file (for failure messages).
fn tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

const OPENSSL_CONFIG: &str = "\
[req]
distinguished_name = dn
[dn]
[v3_ca]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign
subjectKeyIdentifier = hash
[v3_server]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature,keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,IP:10.96.0.1
authorityKeyIdentifier = keyid
";

/// Generates a CA, a serving certificate for 127.0.0.1 signed by it, and the service-account
/// signing key pair (all ECDSA P-256, which is fast to generate).
fn generate_pki(dir: &Path) {
    let openssl = || {
        let mut command = Command::new("openssl");
        command.current_dir(dir).stdin(Stdio::null());
        command
    };
    std::fs::write(dir.join("openssl.cnf"), OPENSSL_CONFIG).unwrap();
    let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
    run_checked(
        openssl().args(["req", "-x509", "-new", "-config", "openssl.cnf", "-extensions", "v3_ca"]).args(ec).args([
            "-keyout",
            "ca.key",
            "-out",
            "ca.crt",
            "-days",
            "3650",
            "-subj",
            "/CN=akritas-e2e-ca",
        ]),
    );
    run_checked(openssl().args(["req", "-new", "-config", "openssl.cnf"]).args(ec).args([
        "-keyout",
        "apiserver.key",
        "-out",
        "apiserver.csr",
        "-subj",
        "/CN=kube-apiserver",
    ]));
    run_checked(openssl().args([
        "x509",
        "-req",
        "-in",
        "apiserver.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-set_serial",
        &format!("0x{:x}", rand::random::<u64>()),
        "-days",
        "3650",
        "-extfile",
        "openssl.cnf",
        "-extensions",
        "v3_server",
        "-out",
        "apiserver.crt",
    ]));
    run_checked(openssl().args(["ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", "sa.key"]));
    run_checked(openssl().args(["ec", "-in", "sa.key", "-pubout", "-out", "sa.pub"]));
}

/// A kubeconfig for `url` trusting `ca_pem`, authenticating with `token`.
pub fn kubeconfig_yaml(url: &str, ca_pem: &str, user: &str, token: &str, namespace: &str) -> String {
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: e2e
  cluster:
    server: {url}
    certificate-authority-data: {ca}
users:
- name: {user}
  user:
    token: {token}
contexts:
- name: {user}
  context:
    cluster: e2e
    user: {user}
    namespace: {namespace}
current-context: {user}
"
    )
}

impl KubeApi {
    /// Generates keys and tokens, starts etcd and kube-apiserver on free loopback ports and waits
    /// for `/readyz`. Retries with new ports when a port was taken meanwhile.
    pub async fn start() -> KubeApi {
        akritas::install_crypto_provider();
        let etcd_bin = e2e_binary("etcd");
        let apiserver_bin = e2e_binary("kube-apiserver");
        let mut last_error = String::new();
        for _attempt in 0..3 {
            match Self::try_start(&etcd_bin, &apiserver_bin).await {
                Ok(api) => return api,
                Err(e) => {
                    eprintln!("kube harness: start failed, retrying: {e}");
                    last_error = e;
                }
            }
        }
        panic!("the test API server did not start: {last_error}");
    }

    async fn try_start(etcd_bin: &Path, apiserver_bin: &Path) -> Result<KubeApi, String> {
        let dir = tempfile::Builder::new().prefix("akritas-kube-").tempdir().expect("tempdir");
        let d = dir.path();
        generate_pki(d);
        let ca_pem = std::fs::read_to_string(d.join("ca.crt")).unwrap();

        let admin_token = random_token();
        let operator_token = random_token();
        let other_token = random_token();
        std::fs::write(
            d.join("tokens.csv"),
            format!(
                "{admin_token},admin,admin-uid,\"system:masters\"\n\
                 {operator_token},{OPERATOR_USER},akritas-uid,\"system:serviceaccounts,system:serviceaccounts:{OPERATOR_NAMESPACE},system:authenticated\"\n\
                 {other_token},{OTHER_USER},other-uid,\"system:serviceaccounts,system:serviceaccounts:default,system:authenticated\"\n"
            ),
        )
        .unwrap();

        // etcd, fsync off: the data is thrown away with the test.
        let [client_port, peer_port, port] = free_ports();
        let client_url = format!("http://127.0.0.1:{client_port}");
        let peer_url = format!("http://127.0.0.1:{peer_port}");
        let etcd_log = std::fs::File::create(d.join("etcd.log")).unwrap();
        let mut etcd = Command::new(etcd_bin)
            .arg("--name=e2e")
            .arg(format!("--data-dir={}", d.join("etcd").display()))
            .arg(format!("--listen-client-urls={client_url}"))
            .arg(format!("--advertise-client-urls={client_url}"))
            .arg(format!("--listen-peer-urls={peer_url}"))
            .arg(format!("--initial-advertise-peer-urls={peer_url}"))
            .arg(format!("--initial-cluster=e2e={peer_url}"))
            .arg("--unsafe-no-fsync")
            .arg("--log-level=warn")
            .stdin(Stdio::null())
            .stdout(etcd_log.try_clone().unwrap())
            .stderr(etcd_log)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", etcd_bin.display()));

        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(5))
            .tls_certs_only([reqwest::Certificate::from_pem(ca_pem.as_bytes()).unwrap()])
            .build()
            .unwrap();

        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(Some(status)) = etcd.try_wait() {
                return Err(format!("etcd exited with {status}:\n{}", tail(&d.join("etcd.log"), 20)));
            }
            if let Ok(resp) = http.get(format!("{client_url}/health")).send().await
                && resp.status().is_success()
            {
                break;
            }
            if Instant::now() > deadline {
                let _ = etcd.kill();
                let _ = etcd.wait();
                return Err(format!("etcd not healthy within 20 s:\n{}", tail(&d.join("etcd.log"), 20)));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }

        let url = format!("https://127.0.0.1:{port}");
        let path = |name: &str| d.join(name).display().to_string();
        std::fs::write(
            d.join("audit-policy.yaml"),
            "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\nrules:\n  - level: Metadata\n",
        )
        .unwrap();
        let apiserver_log = std::fs::File::create(d.join("kube-apiserver.log")).unwrap();
        let started = Instant::now();
        let mut apiserver = Command::new(apiserver_bin)
            .arg(format!("--etcd-servers={client_url}"))
            .arg("--bind-address=127.0.0.1")
            .arg("--advertise-address=127.0.0.1")
            .arg(format!("--secure-port={port}"))
            // Serving certificate from our own CA (instead of --cert-dir's self-signed one), so
            // kubeconfigs can verify TLS.
            .arg(format!("--tls-cert-file={}", path("apiserver.crt")))
            .arg(format!("--tls-private-key-file={}", path("apiserver.key")))
            .arg("--authorization-mode=RBAC")
            .arg(format!("--token-auth-file={}", path("tokens.csv")))
            .arg("--service-account-issuer=https://kubernetes.default.svc.cluster.local")
            .arg("--api-audiences=https://kubernetes.default.svc.cluster.local")
            .arg(format!("--service-account-key-file={}", path("sa.pub")))
            .arg(format!("--service-account-signing-key-file={}", path("sa.key")))
            .arg("--service-cluster-ip-range=10.96.0.0/16")
            .arg("--allow-privileged=false")
            // No controller-manager: nothing creates the `default` service accounts pods would need,
            // and the `kubernetes` Endpoints cannot point at a loopback address.
            .arg("--disable-admission-plugins=ServiceAccount")
            .arg("--endpoint-reconciler-type=none")
            // `pods/log` is proxied to the Node's kubelet (see `kubelet.rs`): dial its InternalIP
            // (127.0.0.1) rather than its Hostname. No --kubelet-certificate-authority: the API
            // server does not verify the kubelet's (self-signed) serving certificate.
            .arg("--kubelet-preferred-address-types=InternalIP")
            .arg(format!("--audit-policy-file={}", path("audit-policy.yaml")))
            .arg(format!("--audit-log-path={}", path("audit.log")))
            .arg("--audit-log-mode=blocking")
            .arg("--profiling=false")
            .arg("--v=0")
            .stdin(Stdio::null())
            .stdout(apiserver_log.try_clone().unwrap())
            .stderr(apiserver_log)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", apiserver_bin.display()));

        let deadline = started + Duration::from_secs(90);
        let mut last;
        loop {
            if let Ok(Some(status)) = apiserver.try_wait() {
                let _ = etcd.kill();
                let _ = etcd.wait();
                return Err(format!(
                    "kube-apiserver exited with {status}:\n{}",
                    tail(&d.join("kube-apiserver.log"), 30)
                ));
            }
            match http.get(format!("{url}/readyz")).bearer_auth(&admin_token).send().await {
                Ok(resp) if resp.status().is_success() => break,
                Ok(resp) => last = format!("{} {}", resp.status(), resp.text().await.unwrap_or_default()),
                Err(e) => last = e.to_string(),
            }
            if Instant::now() > deadline {
                for child in [&mut apiserver, &mut etcd] {
                    let _ = child.kill();
                    let _ = child.wait();
                }
                return Err(format!(
                    "kube-apiserver not ready within 90 s (last: {last}):\n{}",
                    tail(&d.join("kube-apiserver.log"), 30)
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let startup = started.elapsed();

        let admin_kubeconfig = d.join("admin.kubeconfig");
        std::fs::write(&admin_kubeconfig, kubeconfig_yaml(&url, &ca_pem, "admin", &admin_token, "default")).unwrap();
        let api = KubeApi {
            url,
            admin_kubeconfig,
            admin_token,
            ca_pem,
            startup,
            dir,
            operator_token,
            other_token,
            etcd,
            apiserver,
        };
        api.kubeconfig_with_token("operator", &api.operator_token, OPERATOR_NAMESPACE);
        api.kubeconfig_with_token("other", &api.other_token, "default");
        Ok(api)
    }

    /// Bearer token of the operator identity (`system:serviceaccount:akritas-system:akritas`).
    pub fn operator_token(&self) -> String {
        self.operator_token.clone()
    }

    /// Kubeconfig of the operator identity (default namespace `akritas-system`).
    pub fn operator_kubeconfig(&self) -> PathBuf {
        self.dir.path().join("operator.kubeconfig")
    }

    /// Bearer token of the bystander `system:serviceaccount:default:other`.
    pub fn other_token(&self) -> String {
        self.other_token.clone()
    }

    /// Kubeconfig of the bystander identity.
    pub fn other_kubeconfig(&self) -> PathBuf {
        self.dir.path().join("other.kubeconfig")
    }

    /// Writes `<name>.kubeconfig` in the temp dir for `token` and returns its path.
    pub fn kubeconfig_with_token(&self, name: &str, token: &str, namespace: &str) -> PathBuf {
        let path = self.dir.path().join(format!("{name}.kubeconfig"));
        std::fs::write(&path, kubeconfig_yaml(&self.url, &self.ca_pem, name, token, namespace)).unwrap();
        path
    }

    /// Runs kubectl with the admin kubeconfig: (exit code, stdout, stderr).
    pub fn kubectl(&self, args: &[&str]) -> (i32, String, String) {
        self.kubectl_as(&self.admin_kubeconfig, args, None)
    }

    /// Runs kubectl with the admin kubeconfig; panics unless it exits 0; returns stdout.
    pub fn kubectl_ok(&self, args: &[&str]) -> String {
        let (code, out, err) = self.kubectl(args);
        assert_eq!(code, 0, "kubectl {args:?} failed:\n{out}{err}");
        out
    }

    /// `kubectl apply -f -` of `yaml` as admin; panics on failure; returns stdout.
    pub fn apply(&self, yaml: &str) -> String {
        let (code, out, err) = self.kubectl_as(&self.admin_kubeconfig, &["apply", "-f", "-"], Some(yaml));
        assert_eq!(code, 0, "kubectl apply failed:\n{out}{err}\n--- input ---\n{yaml}");
        out
    }

    /// Merges `status` (the object's `status` field) into the status subresource of
    /// `kind/name` as admin: what a controller or the kubelet would have written.
    pub fn patch_status(&self, kind: &str, name: &str, namespace: &str, status: &serde_json::Value) {
        let patch = serde_json::json!({ "status": status }).to_string();
        self.kubectl_ok(&["patch", kind, name, "-n", namespace, "--subresource=status", "--type=merge", "-p", &patch]);
    }

    /// Runs kubectl with `kubeconfig`, optionally feeding `stdin`: (exit code, stdout, stderr).
    pub fn kubectl_as(&self, kubeconfig: &Path, args: &[&str], stdin: Option<&str>) -> (i32, String, String) {
        let mut child = Command::new(kubectl_binary())
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .arg("--request-timeout=30s")
            .args(args)
            .env_remove("KUBECONFIG")
            .stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run kubectl ({}): {e}", kubectl_binary().display()));
        if let Some(input) = stdin {
            child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
        }
        let output = child.wait_with_output().unwrap();
        (
            output.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    }

    /// Creates a namespace (idempotent).
    pub fn create_namespace(&self, name: &str) {
        self.apply(&format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {name}\n"));
    }

    /// Creates the operator's namespace `akritas-system` and its service account `akritas`.
    pub fn create_operator_namespace(&self) {
        self.create_namespace(OPERATOR_NAMESPACE);
        self.apply(&format!(
            "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: {OPERATOR_SERVICE_ACCOUNT}\n  namespace: {OPERATOR_NAMESPACE}\n"
        ));
    }

    /// Applies every CRD in `dir` (e.g. the repo's `crds/`) and waits until all are Established.
    /// Warnings the API server returns (deprecated or unknown schema parts) are printed.
    pub fn install_crds(&self, dir: &Path) {
        let (code, out, err) = self.kubectl(&["apply", "-f", &dir.display().to_string()]);
        assert_eq!(code, 0, "applying the CRDs in {} failed:\n{out}{err}", dir.display());
        if !err.trim().is_empty() {
            eprintln!("kubectl apply -f {}: {}", dir.display(), err.trim());
        }
        self.kubectl_ok(&["wait", "--for=condition=Established", "crd", "--all", "--timeout=60s"]);
    }

    /// A real, signed service-account token (TokenRequest API, one hour) for an existing
    /// service account.
    pub fn service_account_token(&self, namespace: &str, name: &str) -> String {
        self.kubectl_ok(&["create", "token", name, "-n", namespace, "--duration=1h"]).trim().to_string()
    }

    /// A `kube::Client` for `kubeconfig` (e.g. [`Self::operator_kubeconfig`]).
    pub async fn client(&self, kubeconfig: &Path) -> kube::Client {
        let kubeconfig = kube::config::Kubeconfig::read_from(kubeconfig).expect("read kubeconfig");
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &kube::config::KubeConfigOptions::default())
            .await
            .expect("kube config");
        kube::Client::try_from(config).expect("kube client")
    }

    /// Every audit event so far (`audit.k8s.io/v1` Event objects, one per request
    /// that completed or started a long-running watch).
    pub fn audit_events(&self) -> Vec<serde_json::Value> {
        let text = std::fs::read_to_string(self.dir.path().join("audit.log")).unwrap_or_default();
        text.lines().filter_map(|line| serde_json::from_str(line).ok()).collect()
    }

    /// The last `n` lines of kube-apiserver's log.
    pub fn apiserver_log_tail(&self, n: usize) -> String {
        tail(&self.dir.path().join("kube-apiserver.log"), n)
    }
}

impl Drop for KubeApi {
    fn drop(&mut self) {
        for child in [&mut self.apiserver, &mut self.etcd] {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The chart's RBAC (`templates/rbac.yaml`) for the operator in [`OPERATOR_NAMESPACE`]
/// watching `namespaces`, rendered by the helm that `e2e/kube/build.sh` builds.
pub fn chart_rbac(namespaces: &[&str]) -> String {
    let output = Command::new(e2e_binary("helm"))
        .args(["template", "akritas", "charts/akritas", "--namespace", OPERATOR_NAMESPACE])
        .args(["--set", &format!("watchNamespaces={{{}}}", namespaces.join(","))])
        .args(["--show-only", "templates/rbac.yaml"])
        .current_dir(crate::root())
        .output()
        .unwrap();
    assert!(output.status.success(), "helm template: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout).unwrap()
}
