//! Where resource-declared URLs may lead (git remotes, webhooks, MCP over HTTP, Telegram,
//! Mattermost and Slack base URLs, VictoriaMetrics): never to link-local addresses (the
//! cloud metadata services among them), the other known metadata addresses, unspecified or
//! multicast addresses, nor an IPv6 address that embeds a refused IPv4 one (mapped,
//! compatible, NAT64, 6to4, Teredo); in operator mode never to loopback or the pod's own
//! addresses either, unless the `egress_allow` setting names the network or the host.
//! Checked twice: on the URL when the resource is read (an IP literal or `localhost` that
//! is refused makes it `Ready=False`), and on every address when a connection is made
//! ([`guard`]), so a name that later resolves elsewhere (DNS rebinding) is refused too.
//!
//! A proxy would resolve the destination itself, out of sight, so the clients [`guard`]
//! builds never follow `HTTP_PROXY`/`HTTPS_PROXY`/`ALL_PROXY`; the only proxy they use is
//! the operator's `egress_proxy`, and it is handed a destination only after the policy
//! resolved it and allowed every address.

use std::collections::{BTreeSet, HashMap};
use std::hash::{Hash, Hasher};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, LazyLock, Mutex, RwLock};

/// Condition reason of a resource whose URL leads where the policy refuses.
pub const EGRESS_NOT_ALLOWED: &str = "EgressNotAllowed";
/// Condition reason of a resource whose credential would travel over plain http.
pub const CLEARTEXT_CREDENTIAL: &str = "CleartextCredential";

/// Metadata and platform endpoints outside the link-local ranges, refused in every mode:
/// they answer with the machine's credentials or configuration. (169.254.169.254 and the
/// other link-local ones are refused as link-local.)
const METADATA_V4: [(Ipv4Addr, &str); 3] = [
    (Ipv4Addr::new(100, 100, 100, 200), "Alibaba Cloud's metadata service"),
    (Ipv4Addr::new(192, 0, 0, 192), "Oracle Cloud's metadata service"),
    (Ipv4Addr::new(168, 63, 129, 16), "Azure's WireServer, a platform metadata endpoint"),
];
/// The unique-local (not link-local) IPv6 addresses of metadata and credential services.
const METADATA_V6: [(Ipv6Addr, &str); 3] = [
    (Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254), "AWS's metadata service (IPv6)"),
    (Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x23), "AWS's EKS Pod Identity credentials endpoint (IPv6)"),
    (Ipv6Addr::new(0xfd20, 0xce, 0, 0, 0, 0, 0, 0x254), "Google Cloud's metadata service (IPv6)"),
];

/// Host names under this suffix name a route the client's proxy hook chose ([`guard`]);
/// `.invalid` never resolves anywhere else (RFC 6761).
const ROUTE_SUFFIX: &str = ".route.egress.akritas.invalid";

static POLICY: RwLock<Option<Arc<Egress>>> = RwLock::new(None);

/// The variable that hands the policy to a bundled MCP server the host starts (`akritas
/// mcp victoriametrics`), so the child judges the addresses it connects to as well.
pub const CHILD_ENV: &str = "AKRITAS_CHILD_EGRESS";

/// Why a destination is refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EgressError {
    /// The URL cannot be parsed or is not http(s).
    #[error("{0}")]
    Invalid(String),
    /// Every address of the destination is in a refused range.
    #[error(
        "{host} leads to {address} ({range}), which resources may not reach; add the address or network (CIDR) \
         or the host name to the egress_allow setting if this is intended"
    )]
    Refused {
        /// The host as written.
        host: String,
        /// The first refused address.
        address: IpAddr,
        /// What the address is.
        range: String,
    },
    /// A credential would travel over plain http to a host not allowed for that.
    #[error(
        "{host} is reached over plain http, so the credential would travel in clear; use https, or add {host} to \
         the cleartext_credential_hosts setting (loopback is always allowed)"
    )]
    Cleartext {
        /// The host.
        host: String,
    },
    /// The name did not resolve.
    #[error("{host} does not resolve: {message}")]
    Unresolved {
        /// The host.
        host: String,
        /// The resolver's error.
        message: String,
    },
}

impl EgressError {
    /// The condition reason of a resource refused for this.
    pub fn reason(&self) -> &'static str {
        match self {
            EgressError::Cleartext { .. } => CLEARTEXT_CREDENTIAL,
            _ => EGRESS_NOT_ALLOWED,
        }
    }
}

/// The policy: allowed networks and host names, and whether this machine counts as
/// reachable (standalone mode).
#[derive(Clone, Debug, Default)]
pub struct Egress {
    entries: Vec<String>,
    networks: Vec<(IpAddr, u8)>,
    hosts: BTreeSet<String>,
    local_allowed: bool,
    cleartext_networks: Vec<(IpAddr, u8)>,
    cleartext_hosts: BTreeSet<String>,
    proxy: Option<url::Url>,
}

impl Egress {
    /// From `egress_allow` entries (checked by the settings: a CIDR, an address or a host
    /// name); `local_allowed` lets loopback and this machine's addresses through.
    pub fn new(entries: &[String], local_allowed: bool) -> Self {
        let (networks, hosts) = split_entries(entries);
        Egress { entries: entries.to_vec(), networks, hosts, local_allowed, ..Egress::default() }
    }

    /// Resource-declared URLs go through the proxy at `proxy` (the `egress_proxy` setting,
    /// `http://host:port`), each destination judged first; `None` reaches them directly.
    pub fn with_proxy(mut self, proxy: Option<&str>) -> Self {
        self.proxy = proxy.and_then(|p| url::Url::parse(p).ok());
        self
    }

    /// The [`CHILD_ENV`] entry that gives a child this policy (its egress part).
    pub fn child_env(&self) -> (String, String) {
        let proxy = self.proxy.as_ref().map(url::Url::as_str);
        let value = serde_json::json!({"local": self.local_allowed, "allow": self.entries, "proxy": proxy});
        (CHILD_ENV.to_string(), value.to_string())
    }

    /// The policy a parent handed over in [`CHILD_ENV`], if any.
    pub fn from_child_env(value: &str) -> Option<Egress> {
        let value: serde_json::Value = serde_json::from_str(value).ok()?;
        let entries: Vec<String> = serde_json::from_value(value.get("allow")?.clone()).ok()?;
        let proxy = value.get("proxy").and_then(serde_json::Value::as_str);
        Some(Egress::new(&entries, value.get("local")?.as_bool()?).with_proxy(proxy))
    }

    /// Whether a policy was installed in this process.
    pub fn installed() -> bool {
        POLICY.read().unwrap_or_else(|p| p.into_inner()).is_some()
    }

    /// Also lets credentials travel over plain http to these networks or host names
    /// (the `cleartext_credential_hosts` setting); loopback always may.
    pub fn with_cleartext(mut self, entries: &[String]) -> Self {
        (self.cleartext_networks, self.cleartext_hosts) = split_entries(entries);
        self
    }

    /// Whether a credential may be sent to `url`: over https always; over plain http only
    /// to loopback or a host of `cleartext_credential_hosts`. The egress check still applies.
    pub fn check_credential_url(&self, url: &str) -> Result<(), EgressError> {
        self.check_url(url)?;
        let parsed = url::Url::parse(url).map_err(|e| EgressError::Invalid(format!("not a URL: {e}")))?;
        if parsed.scheme() == "https" {
            return Ok(());
        }
        let host = parsed.host_str().unwrap_or_default().trim_start_matches('[').trim_end_matches(']').to_string();
        let allowed = match host.parse::<IpAddr>() {
            Ok(address) => {
                address.is_loopback() || self.cleartext_networks.iter().any(|(n, bits)| contains(*n, *bits, address))
            }
            Err(_) => {
                let name = host.trim_end_matches('.').to_ascii_lowercase();
                name == "localhost" || self.cleartext_hosts.contains(&name)
            }
        };
        if allowed { Ok(()) } else { Err(EgressError::Cleartext { host }) }
    }

    /// Makes `policy` the process's policy (the service does this at start).
    pub fn install(policy: Egress) {
        *POLICY.write().unwrap_or_else(|p| p.into_inner()) = Some(Arc::new(policy));
    }

    /// The process's policy; before [`Egress::install`], the standalone one with no entries.
    pub fn current() -> Arc<Egress> {
        POLICY.read().unwrap_or_else(|p| p.into_inner()).clone().unwrap_or_else(|| Arc::new(Egress::new(&[], true)))
    }

    /// Whether `address` may be reached: neither it nor an IPv4 address it embeds is in a
    /// refused range, unless `egress_allow` names its network.
    pub fn check_ip(&self, host: &str, address: IpAddr) -> Result<(), EgressError> {
        let address = match address {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
            v4 => v4,
        };
        let allowed = |address: IpAddr| self.networks.iter().any(|(network, bits)| contains(*network, *bits, address));
        let refused = |range: String| EgressError::Refused { host: host.to_string(), address, range };
        if let Some(range) = refused_range(address, self.local_allowed)
            && !allowed(address)
        {
            return Err(refused(range.to_string()));
        }
        let IpAddr::V6(v6) = address else { return Ok(()) };
        for (form, embedded) in embedded_ipv4(v6) {
            if let Some(range) = refused_range(IpAddr::V4(embedded), self.local_allowed)
                && !allowed(IpAddr::V4(embedded))
                && !allowed(address)
            {
                return Err(refused(format!("the {form} form of {embedded}: {range}")));
            }
        }
        Ok(())
    }

    /// Checks a URL without resolving it: its scheme, and its host when it is an address
    /// or `localhost`. A host name in `egress_allow` passes whatever it resolves to.
    pub fn check_url(&self, url: &str) -> Result<(), EgressError> {
        let parsed = url::Url::parse(url).map_err(|e| EgressError::Invalid(format!("not a URL: {e}")))?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(EgressError::Invalid(format!("scheme {:?} is not http or https", parsed.scheme())));
        }
        match parsed.host() {
            Some(url::Host::Ipv4(v4)) => self.check_ip(&v4.to_string(), IpAddr::V4(v4)),
            Some(url::Host::Ipv6(v6)) => self.check_ip(&v6.to_string(), IpAddr::V6(v6)),
            Some(url::Host::Domain(name)) => {
                let name = name.trim_end_matches('.').to_ascii_lowercase();
                if self.hosts.contains(&name) {
                    return Ok(());
                }
                if name == "localhost" || name.ends_with(".localhost") {
                    return self.check_ip(&name, IpAddr::V4(Ipv4Addr::LOCALHOST));
                }
                Ok(())
            }
            None => Err(EgressError::Invalid("the URL has no host".into())),
        }
    }

    /// The addresses of `host` that may be reached; an error when none may.
    pub fn filter(&self, host: &str, addresses: Vec<SocketAddr>) -> Result<Vec<SocketAddr>, EgressError> {
        if self.hosts.contains(&host.trim_end_matches('.').to_ascii_lowercase()) {
            return Ok(addresses);
        }
        let mut first_refusal = None;
        let allowed: Vec<SocketAddr> = addresses
            .into_iter()
            .filter(|address| match self.check_ip(host, address.ip()) {
                Ok(()) => true,
                Err(refusal) => {
                    first_refusal.get_or_insert(refusal);
                    false
                }
            })
            .collect();
        match (allowed.is_empty(), first_refusal) {
            (true, Some(refusal)) => Err(refusal),
            (true, None) => {
                Err(EgressError::Unresolved { host: host.to_string(), message: "no addresses".to_string() })
            }
            _ => Ok(allowed),
        }
    }

    /// Whether a proxy may be handed `host`: it resolves it again itself and may pick any
    /// address, so every address must be allowed (a host name in `egress_allow` is not
    /// resolved here at all).
    async fn check_for_proxy(&self, host: &str, port: u16) -> Result<(), EgressError> {
        let name = host.trim_start_matches('[').trim_end_matches(']');
        if self.hosts.contains(&name.trim_end_matches('.').to_ascii_lowercase()) {
            return Ok(());
        }
        let found: Vec<SocketAddr> = tokio::net::lookup_host((name, port))
            .await
            .map_err(|e| EgressError::Unresolved { host: name.to_string(), message: e.to_string() })?
            .collect();
        if found.is_empty() {
            return Err(EgressError::Unresolved { host: name.to_string(), message: "no addresses".to_string() });
        }
        found.iter().try_for_each(|address| self.check_ip(name, address.ip()))
    }
}

/// Puts a client for resource-declared URLs under the process's egress policy (see
/// [`Resolver::guard`]).
pub fn guard(builder: reqwest::ClientBuilder) -> reqwest::ClientBuilder {
    Resolver::default().guard(builder)
}

/// A `reqwest` resolver that drops the addresses the policy refuses, at connect time; a
/// name with none left fails the request with the policy's message. It also resolves the
/// routes [`Resolver::guard`]'s proxy hook names. The default one follows the process's
/// policy ([`Egress::install`]).
#[derive(Clone, Debug, Default)]
pub struct Resolver {
    policy: Option<Arc<Egress>>,
}

impl Resolver {
    /// A resolver that applies `policy` instead of the process's.
    pub fn with(policy: Egress) -> Self {
        Resolver { policy: Some(Arc::new(policy)) }
    }

    fn policy(&self) -> Arc<Egress> {
        self.policy.clone().unwrap_or_else(Egress::current)
    }

    /// `builder` with this resolver and a proxy hook that sees every destination before a
    /// connection is made: an address literal the policy refuses fails there (it never
    /// reaches a resolver); with `egress_proxy`, a destination goes to the proxy only once
    /// the policy has resolved it and allowed every address, and idle connections are not
    /// kept (each request is judged again). `HTTP(S)_PROXY` and `ALL_PROXY` are never
    /// followed, nor a proxy set on `builder` before: the hook is the client's only proxy.
    pub fn guard(self, builder: reqwest::ClientBuilder) -> reqwest::ClientBuilder {
        let proxied = self.policy().proxy.is_some();
        let resolver = self.clone();
        let builder = builder
            .no_proxy()
            .proxy(reqwest::Proxy::custom(move |url| route(&resolver.policy(), url)))
            .dns_resolver(self);
        if proxied { builder.pool_max_idle_per_host(0) } else { builder }
    }
}

impl reqwest::dns::Resolve for Resolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let host = name.as_str().to_string();
        let policy = self.policy();
        Box::pin(async move {
            if let Some(label) = host.strip_suffix(ROUTE_SUFFIX) {
                return resolve_route(&policy, label).await.map_err(|e| Box::new(e) as _);
            }
            let found: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0))
                .await
                .map_err(|e| Box::new(EgressError::Unresolved { host: host.clone(), message: e.to_string() }))?
                .collect();
            let allowed = policy.filter(&host, found).map_err(Box::new)?;
            Ok(Box::new(allowed.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

/// Where the proxy hook sent a destination: the name of the route is the host of the
/// "proxy" reqwest connects to, which [`Resolver`] resolves.
#[derive(Clone, Debug)]
enum Route {
    /// Refused: resolving the route fails with this.
    Refused(EgressError),
    /// Through the operator's proxy, once the destination passes.
    Proxied { destination: String, port: u16, proxy: url::Url },
}

/// The routes the hook named lately; a route is named by a hash of what it holds, so
/// the same destination keeps its name and the table stays small.
static ROUTES: LazyLock<Mutex<HashMap<String, Route>>> = LazyLock::new(Mutex::default);
/// Routes kept at most; past it the table starts afresh (a request whose route was
/// dropped in between fails and is retried like any connection error).
const MAX_ROUTES: usize = 4096;

/// The proxy hook: `None` connects directly (the resolver judges a name's addresses);
/// otherwise the URL of a route for [`Resolver`] to resolve.
fn route(policy: &Egress, url: &url::Url) -> Option<url::Url> {
    let host = url.host_str()?.to_string();
    let literal = match url.host()? {
        url::Host::Ipv4(v4) => Some(IpAddr::V4(v4)),
        url::Host::Ipv6(v6) => Some(IpAddr::V6(v6)),
        url::Host::Domain(_) => None,
    };
    if let Some(address) = literal
        && let Err(refusal) = policy.check_ip(&address.to_string(), address)
    {
        // Any port: resolving the route fails, nothing connects.
        return named(Route::Refused(refusal), 9);
    }
    let proxy = policy.proxy.clone()?;
    let port = url.port_or_known_default().unwrap_or(80);
    let proxy_port = proxy.port_or_known_default().unwrap_or(80);
    named(Route::Proxied { destination: host, port, proxy }, proxy_port)
}

/// Registers `route` and returns the proxy URL that names it.
fn named(route: Route, port: u16) -> Option<url::Url> {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    format!("{route:?}").hash(&mut hasher);
    let label = format!("r{:016x}", hasher.finish());
    let mut routes = ROUTES.lock().unwrap_or_else(|p| p.into_inner());
    if routes.len() >= MAX_ROUTES {
        routes.clear();
    }
    routes.insert(label.clone(), route);
    // Always a valid URL: a hex label, a constant suffix and a port.
    url::Url::parse(&format!("http://{label}{ROUTE_SUFFIX}:{port}")).ok()
}

/// The addresses to connect to for a route: the proxy's, once the destination passes.
async fn resolve_route(policy: &Egress, label: &str) -> Result<reqwest::dns::Addrs, EgressError> {
    let route = ROUTES.lock().unwrap_or_else(|p| p.into_inner()).get(label).cloned();
    match route {
        None => Err(EgressError::Invalid("the connection's egress route expired; retry".to_string())),
        Some(Route::Refused(refusal)) => Err(refusal),
        Some(Route::Proxied { destination, port, proxy }) => {
            policy.check_for_proxy(&destination, port).await?;
            // The operator's own proxy: not subject to the policy.
            let proxy_host = proxy.host_str().unwrap_or_default().trim_start_matches('[').trim_end_matches(']');
            let found: Vec<SocketAddr> =
                tokio::net::lookup_host((proxy_host, proxy.port_or_known_default().unwrap_or(80)))
                    .await
                    .map_err(|e| EgressError::Unresolved {
                        host: format!("the egress_proxy {proxy_host}"),
                        message: e.to_string(),
                    })?
                    .collect();
            Ok(Box::new(found.into_iter()))
        }
    }
}

/// What a refused address is, or `None` when it may be reached (an IPv4 address an IPv6
/// one embeds is judged by [`Egress::check_ip`]).
fn refused_range(address: IpAddr, local_allowed: bool) -> Option<&'static str> {
    let local = |range| if local_allowed { None } else { Some(range) };
    match address {
        IpAddr::V4(v4) => {
            if let Some((_, service)) = METADATA_V4.iter().find(|(known, _)| *known == v4) {
                Some(service)
            } else if v4.is_link_local() {
                Some("link-local, where cloud metadata services answer")
            } else if v4.is_unspecified() || v4.octets()[0] == 0 {
                Some("unspecified")
            } else if v4.is_multicast() || v4.is_broadcast() {
                Some("multicast or broadcast")
            } else if v4.is_loopback() {
                local("loopback")
            } else if is_own(address) {
                local("an address of this host")
            } else {
                None
            }
        }
        IpAddr::V6(v6) => {
            if let Some((_, service)) = METADATA_V6.iter().find(|(known, _)| *known == v6) {
                Some(service)
            } else if (v6.segments()[0] & 0xffc0) == 0xfe80 {
                Some("link-local")
            } else if v6.is_unspecified() {
                Some("unspecified")
            } else if v6.is_multicast() {
                Some("multicast")
            } else if v6.is_loopback() {
                local("loopback")
            } else if is_own(address) {
                local("an address of this host")
            } else {
                None
            }
        }
    }
}

/// The IPv4 addresses an IPv6 one carries, with the name of the form: IPv4-compatible
/// (`::a.b.c.d`) and -translated (`::ffff:0:a.b.c.d`), NAT64 (`64:ff9b::/96`, and the
/// local-use `64:ff9b:1::/48` at each RFC 6052 prefix length), 6to4 (`2002::/16`) and
/// Teredo (`2001::/32`: the server, and the client's obfuscated address). IPv4-mapped
/// addresses are turned into IPv4 ones before.
fn embedded_ipv4(v6: Ipv6Addr) -> Vec<(&'static str, Ipv4Addr)> {
    let o = v6.octets();
    let at = |i: [usize; 4]| Ipv4Addr::new(o[i[0]], o[i[1]], o[i[2]], o[i[3]]);
    let s = v6.segments();
    let mut found = Vec::new();
    if s[..6] == [0; 6] && !(s[6] == 0 && s[7] <= 1) {
        found.push(("IPv4-compatible", at([12, 13, 14, 15])));
    }
    if s[..6] == [0, 0, 0, 0, 0xffff, 0] {
        found.push(("IPv4-translated", at([12, 13, 14, 15])));
    }
    if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        found.push(("NAT64", at([12, 13, 14, 15])));
    }
    if s[..3] == [0x64, 0xff9b, 1] {
        // RFC 6052: the address follows the prefix, skipping bits 64-71.
        for i in [[6, 7, 9, 10], [7, 9, 10, 11], [9, 10, 11, 12], [12, 13, 14, 15]] {
            found.push(("NAT64", at(i)));
        }
    }
    if s[0] == 0x2002 {
        found.push(("6to4", at([2, 3, 4, 5])));
    }
    if s[..2] == [0x2001, 0] {
        found.push(("Teredo (server)", at([4, 5, 6, 7])));
        let client = at([12, 13, 14, 15]);
        found.push(("Teredo", Ipv4Addr::from(!u32::from(client))));
    }
    found
}

/// Whether `address` is one of this host's: only a local address can be bound.
fn is_own(address: IpAddr) -> bool {
    std::net::UdpSocket::bind(SocketAddr::new(address, 0)).is_ok()
}

/// Entries of a setting as networks and (lowercase, without a final dot) host names.
fn split_entries(entries: &[String]) -> (Vec<(IpAddr, u8)>, BTreeSet<String>) {
    let mut networks = Vec::new();
    let mut hosts = BTreeSet::new();
    for entry in entries {
        match parse_network(entry) {
            Some(network) => networks.push(network),
            None => {
                hosts.insert(entry.trim_end_matches('.').to_ascii_lowercase());
            }
        }
    }
    (networks, hosts)
}

/// `a.b.c.d/n`, `a.b.c.d`, `x::y/n` or `x::y`; `None` for anything else (a host name).
pub fn parse_network(entry: &str) -> Option<(IpAddr, u8)> {
    let (address, bits) = match entry.split_once('/') {
        Some((address, bits)) => (address, Some(bits)),
        None => (entry, None),
    };
    let address: IpAddr = address.parse().ok()?;
    let max = if address.is_ipv4() { 32 } else { 128 };
    let bits = match bits {
        Some(bits) => bits.parse::<u8>().ok().filter(|b| *b <= max)?,
        None => max,
    };
    Some((address, bits))
}

fn contains(network: IpAddr, bits: u8, address: IpAddr) -> bool {
    match (network, address) {
        (IpAddr::V4(n), IpAddr::V4(a)) => {
            let mask = if bits == 0 { 0 } else { u32::MAX << (32 - u32::from(bits)) };
            (u32::from(n) & mask) == (u32::from(a) & mask)
        }
        (IpAddr::V6(n), IpAddr::V6(a)) => {
            let mask = if bits == 0 { 0 } else { u128::MAX << (128 - u32::from(bits)) };
            (u128::from(n) & mask) == (u128::from(a) & mask)
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(policy: &Egress, url: &str) -> String {
        match policy.check_url(url) {
            Err(EgressError::Refused { range, .. }) => range,
            other => panic!("{url}: {other:?}"),
        }
    }

    #[test]
    fn metadata_link_local_and_unspecified_are_refused_in_every_mode() {
        for local in [true, false] {
            let policy = Egress::new(&[], local);
            assert!(refused(&policy, "http://169.254.169.254/latest/meta-data/").contains("metadata"));
            assert_eq!(refused(&policy, "http://[fd00:ec2::254]/"), "AWS's metadata service (IPv6)");
            assert_eq!(refused(&policy, "http://[fe80::1]:8080/"), "link-local");
            assert_eq!(refused(&policy, "http://0.0.0.0:8090/"), "unspecified");
            assert!(refused(&policy, "http://[::ffff:169.254.169.254]/").contains("link-local"));
            assert!(policy.check_url("https://hooks.example.com/x").is_ok());
            assert!(policy.check_url("http://10.96.0.12:9093/").is_ok(), "cluster services are reachable");
        }
    }

    #[test]
    fn loopback_and_own_addresses_are_refused_in_operator_mode_only() {
        let operator = Egress::new(&[], false);
        assert_eq!(refused(&operator, "http://127.0.0.1:8090/api/v1/resources"), "loopback");
        assert_eq!(refused(&operator, "http://localhost:8090/"), "loopback");
        assert_eq!(refused(&operator, "http://[::1]:8090/"), "loopback");
        let standalone = Egress::new(&[], true);
        assert!(standalone.check_url("http://127.0.0.1:8090/").is_ok());
        let message = operator.check_url("http://127.0.0.1:1/").unwrap_err().to_string();
        assert!(message.contains("egress_allow"), "{message}");
    }

    #[test]
    fn egress_allow_names_networks_addresses_and_hosts() {
        let policy = Egress::new(
            &["127.0.0.1".into(), "169.254.10.0/24".into(), "Metadata.Internal.".into(), "fe80::/10".into()],
            false,
        );
        assert!(policy.check_url("http://127.0.0.1:9/").is_ok());
        assert_eq!(refused(&policy, "http://127.0.0.2:9/"), "loopback");
        assert!(policy.check_url("http://169.254.10.7/").is_ok());
        assert!(refused(&policy, "http://169.254.169.254/").contains("link-local"));
        assert!(policy.check_url("http://[fe80::2]/").is_ok());
        let resolved = vec![SocketAddr::from(([169, 254, 169, 254], 80))];
        assert_eq!(policy.filter("metadata.internal", resolved.clone()).unwrap(), resolved);
        let refusal = policy.filter("rebinding.example", resolved).unwrap_err();
        assert!(matches!(refusal, EgressError::Refused { .. }), "{refusal}");
    }

    #[test]
    fn a_name_keeps_its_allowed_addresses_and_fails_with_none() {
        let policy = Egress::new(&[], false);
        let mixed = vec![SocketAddr::from(([127, 0, 0, 1], 80)), SocketAddr::from(([93, 184, 215, 14], 80))];
        assert_eq!(policy.filter("mixed.example", mixed).unwrap(), vec![SocketAddr::from(([93, 184, 215, 14], 80))]);
        assert!(policy.check_url("ftp://x/").is_err());
        assert_eq!(parse_network("10.0.0.0/33"), None);
        assert_eq!(parse_network("git.internal"), None);
    }

    #[test]
    fn a_child_receives_the_same_policy() {
        let policy = Egress::new(&["169.254.10.0/24".into(), "vm.internal".into()], false)
            .with_proxy(Some("http://proxy.internal:3128"));
        let (name, value) = policy.child_env();
        assert_eq!(name, CHILD_ENV);
        let child = Egress::from_child_env(&value).unwrap();
        assert!(child.check_url("http://169.254.10.1/").is_ok() && child.check_url("http://127.0.0.1/").is_err());
        assert!(child.filter("vm.internal", vec![SocketAddr::from(([169, 254, 169, 254], 80))]).is_ok());
        assert_eq!(child.proxy.as_ref().map(url::Url::as_str), Some("http://proxy.internal:3128/"));
        assert!(Egress::from_child_env("not json").is_none());
    }

    #[test]
    fn credentials_travel_in_clear_only_to_loopback_and_named_hosts() {
        let policy = Egress::new(&[], true).with_cleartext(&["git.lab.internal".into(), "10.1.0.0/16".into()]);
        assert!(policy.check_credential_url("https://hooks.example.com/x").is_ok());
        assert!(policy.check_credential_url("http://127.0.0.1:9/x").is_ok());
        assert!(policy.check_credential_url("http://[::1]:9/x").is_ok());
        assert!(policy.check_credential_url("http://localhost:9/x").is_ok());
        assert!(policy.check_credential_url("http://git.lab.internal/infra.git").is_ok());
        assert!(policy.check_credential_url("http://10.1.2.3/hook").is_ok());
        let refused = policy.check_credential_url("http://hooks.example.com/x").unwrap_err();
        assert_eq!(refused, EgressError::Cleartext { host: "hooks.example.com".into() });
        assert!(refused.to_string().contains("cleartext_credential_hosts"), "{refused}");
        assert_eq!(refused.reason(), "CleartextCredential");
        assert!(policy.check_credential_url("http://10.2.0.1/hook").is_err());
        assert!(policy.check_credential_url("https://169.254.169.254/").is_err(), "egress still applies");
    }

    /// Every known metadata address, and the IPv6 forms that carry a refused IPv4 address
    /// to it, are refused in every mode; their neighbours and public forms are not.
    #[test]
    fn metadata_addresses_and_the_ipv6_forms_of_refused_ipv4_addresses_are_refused() {
        let table = [
            ("http://100.100.100.200/latest/meta-data/", "Alibaba Cloud's metadata service"),
            ("http://192.0.0.192/latest/", "Oracle Cloud's metadata service"),
            ("http://168.63.129.16/machine", "Azure's WireServer, a platform metadata endpoint"),
            ("http://169.254.170.2/v2/credentials/", "link-local, where cloud metadata services answer"),
            ("http://[fd00:ec2::254]/", "AWS's metadata service (IPv6)"),
            ("http://[fd00:ec2::23]/", "AWS's EKS Pod Identity credentials endpoint (IPv6)"),
            ("http://[fd20:ce::254]/", "Google Cloud's metadata service (IPv6)"),
            ("http://[::ffff:169.254.169.254]/", "link-local, where cloud metadata services answer"),
            ("http://[::ffff:100.100.100.200]/", "Alibaba Cloud's metadata service"),
            (
                "http://[64:ff9b::a9fe:a9fe]/",
                "the NAT64 form of 169.254.169.254: link-local, where cloud metadata services answer",
            ),
            ("http://[64:ff9b::6464:64c8]/", "the NAT64 form of 100.100.100.200: Alibaba Cloud's metadata service"),
            (
                "http://[64:ff9b:1:a9fe:a9:fe00::]/",
                "the NAT64 form of 169.254.169.254: link-local, where cloud metadata services answer",
            ),
            (
                "http://[2002:a9fe:a9fe::1]/",
                "the 6to4 form of 169.254.169.254: link-local, where cloud metadata services answer",
            ),
            (
                "http://[::a9fe:a9fe]/",
                "the IPv4-compatible form of 169.254.169.254: link-local, where cloud metadata services answer",
            ),
            (
                "http://[::ffff:0:a9fe:a9fe]/",
                "the IPv4-translated form of 169.254.169.254: link-local, where cloud metadata services answer",
            ),
            (
                "http://[2001:0:4136:e378:8000:63bf:5601:5601]/",
                "the Teredo form of 169.254.169.254: link-local, where cloud metadata services answer",
            ),
            ("http://[64:ff9b::e000:1]/", "the NAT64 form of 224.0.0.1: multicast or broadcast"),
        ];
        for local in [true, false] {
            let policy = Egress::new(&[], local);
            for (url, range) in table {
                assert_eq!(refused(&policy, url), range, "{url}");
            }
            for url in [
                "http://100.100.100.201/",
                "http://168.63.129.17/",
                "http://[fd00:ec2::255]/",
                "http://[64:ff9b::5db8:d70e]/",
                "http://[2002:5db8:d70e::1]/",
                "http://[2001:db8::a9fe:a9fe]/",
                "http://[::1]:8090/",
            ] {
                assert_eq!(policy.check_url(url).is_ok(), local || url != "http://[::1]:8090/", "{url}");
            }
        }
        // Loopback in its IPv6 forms is refused where loopback is.
        let operator = Egress::new(&[], false);
        assert_eq!(refused(&operator, "http://[64:ff9b::7f00:1]/"), "the NAT64 form of 127.0.0.1: loopback");
        assert!(Egress::new(&[], true).check_url("http://[64:ff9b::7f00:1]/").is_ok());
        // An operator who opens the IPv4 network opens its IPv6 forms too.
        let opened = Egress::new(&["169.254.10.0/24".into()], false);
        assert!(opened.check_url("http://[64:ff9b::a9fe:a07]/").is_ok());
        let message = operator.check_url("http://[2002:a9fe:a9fe::1]/").unwrap_err().to_string();
        assert!(message.contains("2002:a9fe:a9fe::1") && message.contains("egress_allow"), "{message}");
    }

    #[tokio::test]
    async fn the_resolver_refuses_a_name_that_resolves_to_loopback_at_connect_time() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let app = axum::Router::new().route("/", axum::routing::get(|| async { "ok" }));
        tokio::spawn(async move { axum::serve(listener, app).await });
        // The connection is judged on the addresses the name resolves to when it is made.
        let url = format!("http://localhost:{port}/");
        crate::install_crypto_provider();
        let refusing = Resolver::with(Egress::new(&[], false)).guard(reqwest::Client::builder()).build().unwrap();
        let error = refusing.get(&url).send().await.unwrap_err();
        let chain = std::iter::successors(Some(&error as &dyn std::error::Error), |e| e.source())
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(": ");
        assert!(chain.contains("loopback") && chain.contains("egress_allow"), "{chain}");
        let allowing = Resolver::with(Egress::new(&["127.0.0.0/8".into(), "::1".into()], false))
            .guard(reqwest::Client::builder())
            .build()
            .unwrap();
        assert_eq!(allowing.get(&url).send().await.unwrap().text().await.unwrap(), "ok");
    }
}
