//! `region add`: registers a cluster as a Region in one command. In the region, as the
//! caller (their kubeconfig, exec plugins included): the controller's ServiceAccount and
//! rights, and a bounded token for it; in the hub, as the caller: the kubeconfig Secret of
//! that token and the Region naming it. Every step prints what it did and every error
//! names its step and object; the token is never printed.

mod objects;

use std::fmt::Debug;
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig, KubeconfigError};
use kube::{Client, Config, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::args::RegionAdd;
use crate::hub::{Hub, api_error, load_config};
use crate::{CliError, EXIT_COMPLETE};
use configrollout_api::Region;
use configrollout_clusters::regions::clients::CredentialPolicy;
use objects::{
    FIELD_MANAGER, KUBECONFIG_KEY, SERVICE_ACCOUNT, SERVICE_ACCOUNT_NAMESPACE, Scope,
    cluster_access, controller_kubeconfig, kubeconfig_secret, region_object, region_rbac,
    secret_name,
};

/// How long a just-created ServiceAccount and binding may take to be honoured by the
/// region's authenticator and authorizer (both read them from caches).
const RBAC_SETTLE: Duration = Duration::from_secs(15);
/// How often the Region's status is read while waiting.
const STATUS_POLL: Duration = Duration::from_secs(1);

const STEPS: usize = 7;

fn step(number: usize, name: &str) -> String {
    format!("step {number}/{STEPS} ({name})")
}

fn say(number: usize, name: &str, line: impl std::fmt::Display) {
    println!("{}: {line}", step(number, name));
}

fn failed(number: usize, name: &str, message: impl std::fmt::Display) -> CliError {
    CliError::Message(format!("{}: {message}", step(number, name)))
}

/// Kind and `namespace/name` of an object, for messages.
fn describe<K: Resource<DynamicType = ()>>(object: &K) -> String {
    let name = object.meta().name.clone().unwrap_or_default();
    match &object.meta().namespace {
        Some(namespace) => format!("{} {namespace}/{name}", K::kind(&())),
        None => format!("{} {name}", K::kind(&())),
    }
}

impl Hub {
    /// Server-side applies `object` (forcing: the command owns what it declares).
    async fn apply<K>(&self, api: Api<K>, object: &K, what: &str) -> Result<K, CliError>
    where
        K: Resource<DynamicType = ()> + Clone + Debug + Serialize + DeserializeOwned,
    {
        let name = object.meta().name.clone().unwrap_or_default();
        let params = PatchParams::apply(FIELD_MANAGER).force();
        self.call(what, api.patch(&name, &params, &Patch::Apply(object)))
            .await
    }

    /// Whether the caller may `verb` `resource` (of `group`) in `namespace`, as the API
    /// server `client` reaches decides.
    async fn may(
        &self,
        client: &Client,
        verb: &str,
        group: &str,
        resource: &str,
        namespace: Option<&str>,
        what: &str,
    ) -> Result<bool, CliError> {
        let review = SelfSubjectAccessReview {
            spec: SelfSubjectAccessReviewSpec {
                resource_attributes: Some(ResourceAttributes {
                    verb: Some(verb.to_owned()),
                    group: Some(group.to_owned()),
                    resource: Some(resource.to_owned()),
                    namespace: namespace.map(str::to_owned),
                    ..ResourceAttributes::default()
                }),
                ..SelfSubjectAccessReviewSpec::default()
            },
            ..SelfSubjectAccessReview::default()
        };
        let api: Api<SelfSubjectAccessReview> = Api::all(client.clone());
        let answer = self
            .call(what, api.create(&PostParams::default(), &review))
            .await?;
        Ok(answer.status.is_some_and(|status| status.allowed))
    }

    /// `region add`.
    pub(super) async fn region_add(&self, args: RegionAdd) -> Result<u8, CliError> {
        let region = args.name.as_str();
        let scope = if args.cluster_wide {
            Scope::ClusterWide
        } else {
            Scope::Namespaces(args.namespaces.clone())
        };
        let hub_namespace = args.controller_namespace.as_str();

        // Step 1: everything is checked before anything is written.
        let (number, name) = (1, "checks");
        let path = &args.region_kubeconfig;
        let kubeconfig = Kubeconfig::read_from(path).map_err(|e| {
            // A parser's message may quote the file, which holds credentials.
            let why = match e {
                KubeconfigError::Parse(_) => {
                    "not a kubeconfig (invalid YAML or a field of the wrong type)".to_owned()
                }
                other => other.to_string(),
            };
            failed(
                number,
                name,
                format!("reading --region-kubeconfig {}: {why}", path.display()),
            )
        })?;
        let access = cluster_access(
            &kubeconfig,
            args.region_context.as_deref(),
            args.server.as_deref(),
        )
        .map_err(|e| {
            failed(
                number,
                name,
                format!("--region-kubeconfig {}: {e}", path.display()),
            )
        })?;
        let config = load_config(Some(path), args.region_context.clone())
            .await
            .map_err(|e| failed(number, name, e))?;
        let admin = Client::try_from(config).map_err(|e| {
            failed(
                number,
                name,
                format!("a client from --region-kubeconfig: {e}"),
            )
        })?;
        let you = self
            .whoami_on(&admin, &format!("region {region}"))
            .await
            .map_err(|e| failed(number, name, e))?;
        say(
            number,
            name,
            format!(
                "region {region}: you are {you} at {} (cluster {:?} of --region-kubeconfig)",
                access.server, access.cluster
            ),
        );
        let secret_name = secret_name(region);
        for (verb, group, resource, namespace) in [
            ("create", "", "secrets", Some(hub_namespace)),
            ("patch", "", "secrets", Some(hub_namespace)),
            ("create", "configrollout.dev", "regions", None),
            ("patch", "configrollout.dev", "regions", None),
        ] {
            let allowed = self
                .may(
                    &self.client,
                    verb,
                    group,
                    resource,
                    namespace,
                    &format!("{}: asking the hub what you may do", step(number, name)),
                )
                .await?;
            if !allowed {
                let place = namespace.map_or(String::new(), |ns| format!(" in namespace {ns}"));
                return Err(failed(
                    number,
                    name,
                    format!(
                        "the hub does not let you {verb} {resource}{place}, which registering \
                         the region needs; nothing was changed"
                    ),
                ));
            }
        }
        say(
            number,
            name,
            format!("hub: you may write Secrets in {hub_namespace} and Regions"),
        );
        if let Scope::Namespaces(namespaces) = &scope {
            let api: Api<Namespace> = Api::all(admin.clone());
            let mut missing = Vec::new();
            for namespace in namespaces {
                let what = format!(
                    "{}: reading namespace {namespace} in region {region}",
                    step(number, name)
                );
                if self.call(&what, api.get_opt(namespace)).await?.is_none() {
                    missing.push(namespace.as_str());
                }
            }
            if !missing.is_empty() {
                return Err(failed(
                    number,
                    name,
                    format!(
                        "namespace {} does not exist in region {region}: create it there first \
                         (the command grants namespaces, it does not create them); nothing was \
                         changed",
                        missing.join(", ")
                    ),
                ));
            }
            say(
                number,
                name,
                format!(
                    "region {region}: namespace {} exists",
                    namespaces.join(", ")
                ),
            );
        }

        // Step 2: the controller's ServiceAccount and rights in the region.
        let (number, name) = (2, "region RBAC");
        let rbac = region_rbac(&scope);
        let applying = |object: String| {
            format!(
                "{}: applying {object} in region {region}",
                step(number, name)
            )
        };
        let mut applied = Vec::new();
        let object = &rbac.namespace;
        self.apply(Api::all(admin.clone()), object, &applying(describe(object)))
            .await?;
        applied.push(describe(object));
        let object = &rbac.service_account;
        self.apply(
            Api::<ServiceAccount>::namespaced(admin.clone(), SERVICE_ACCOUNT_NAMESPACE),
            object,
            &applying(describe(object)),
        )
        .await?;
        applied.push(describe(object));
        if let Some((role, binding)) = &rbac.cluster {
            self.apply(
                Api::<ClusterRole>::all(admin.clone()),
                role,
                &applying(describe(role)),
            )
            .await?;
            applied.push(describe(role));
            self.apply(
                Api::<ClusterRoleBinding>::all(admin.clone()),
                binding,
                &applying(describe(binding)),
            )
            .await?;
            applied.push(describe(binding));
        }
        for (role, binding) in &rbac.namespaced {
            let namespace = role.metadata.namespace.clone().unwrap_or_default();
            self.apply(
                Api::<Role>::namespaced(admin.clone(), &namespace),
                role,
                &applying(describe(role)),
            )
            .await?;
            applied.push(describe(role));
            self.apply(
                Api::<RoleBinding>::namespaced(admin.clone(), &namespace),
                binding,
                &applying(describe(binding)),
            )
            .await?;
            applied.push(describe(binding));
        }
        let variant = match &scope {
            Scope::ClusterWide => "cluster-wide, as deploy/region-rbac.yaml",
            Scope::Namespaces(_) => "namespaced, as deploy/region-rbac-namespaced.yaml",
        };
        say(
            number,
            name,
            format!(
                "applied in region {region} ({variant}; server-side, field manager \
                 {FIELD_MANAGER}): {}",
                applied.join(", ")
            ),
        );
        if let Scope::Namespaces(namespaces) = &scope {
            self.report_wider_grants(&admin, region, namespaces, number, name)
                .await?;
        }

        // Step 3: a bounded token for the ServiceAccount.
        let (number, name) = (3, "token");
        let asked = i64::try_from(args.token_duration.as_secs()).unwrap_or(i64::MAX);
        let request = TokenRequest {
            spec: Some(TokenRequestSpec {
                expiration_seconds: Some(asked),
                ..TokenRequestSpec::default()
            }),
            ..TokenRequest::default()
        };
        let accounts: Api<ServiceAccount> =
            Api::namespaced(admin.clone(), SERVICE_ACCOUNT_NAMESPACE);
        let what = format!(
            "{}: requesting a token for ServiceAccount {SERVICE_ACCOUNT_NAMESPACE}/\
             {SERVICE_ACCOUNT} in region {region} (TokenRequest)",
            step(number, name)
        );
        let answer = self
            .call(
                &what,
                accounts.create_token_request(SERVICE_ACCOUNT, &PostParams::default(), &request),
            )
            .await?;
        let status = answer.status.unwrap_or_default();
        let token = status
            .token
            .filter(|token| !token.is_empty())
            .ok_or_else(|| failed(number, name, "the region's TokenRequest returned no token"))?;
        let asked_expiry = k8s_openapi::jiff::Timestamp::now().as_second() + asked;
        let expiry = match status.expiration_timestamp {
            Some(time) => {
                let capped = time.0.as_second() + 60 < asked_expiry;
                format!(
                    "expires {}{}",
                    time.0,
                    if capped {
                        format!(
                            " (the API server capped the {} asked for: rotate before then)",
                            humanize(args.token_duration)
                        )
                    } else {
                        String::new()
                    }
                )
            }
            None => "the API server gave no expiry".to_owned(),
        };
        say(
            number,
            name,
            format!(
                "minted a token for ServiceAccount {SERVICE_ACCOUNT_NAMESPACE}/{SERVICE_ACCOUNT} \
                 in region {region}; it {expiry}"
            ),
        );

        // Step 4: the kubeconfig the controller will use, tried as it will use it.
        let (number, name) = (4, "token check");
        let text =
            controller_kubeconfig(region, &access, &token).map_err(|e| failed(number, name, e))?;
        let written = Kubeconfig::from_yaml(&text)
            .map_err(|e| failed(number, name, format!("the kubeconfig built: {e}")))?;
        let policy = CredentialPolicy {
            controller_namespace: hub_namespace.to_owned(),
            allow_unsafe_kubeconfig: false,
        };
        policy
            .check(&written)
            .map_err(|e| failed(number, name, format!("the kubeconfig built: {e}")))?;
        let config = Config::from_custom_kubeconfig(written, &KubeConfigOptions::default())
            .await
            .map_err(|e| failed(number, name, format!("the kubeconfig built: {e}")))?;
        let controller = Client::try_from(config)
            .map_err(|e| failed(number, name, format!("the kubeconfig built: {e}")))?;
        let places: Vec<Option<&str>> = match &scope {
            Scope::Namespaces(namespaces) => {
                namespaces.iter().map(|ns| Some(ns.as_str())).collect()
            }
            Scope::ClusterWide if args.namespaces.is_empty() => vec![None],
            Scope::ClusterWide => args.namespaces.iter().map(|ns| Some(ns.as_str())).collect(),
        };
        for place in &places {
            self.list_as_controller(&controller, region, *place, number, name)
                .await?;
        }
        let identity = self
            .whoami_on(&controller, &format!("region {region}"))
            .await
            .map_err(|e| failed(number, name, e))?;
        let listed: Vec<String> = places
            .iter()
            .map(|place| place.map_or("every namespace".to_owned(), |ns| format!("namespace {ns}")))
            .collect();
        say(
            number,
            name,
            format!(
                "with the new token, region {region} authenticates {identity} and lets it list \
                 ConfigMaps in {}",
                listed.join(", ")
            ),
        );

        // Step 5: the kubeconfig Secret in the hub.
        let (number, name) = (5, "hub Secret");
        let secret = kubeconfig_secret(region, hub_namespace, &text);
        self.apply(
            Api::<Secret>::namespaced(self.client.clone(), hub_namespace),
            &secret,
            &format!(
                "{}: writing Secret {hub_namespace}/{secret_name} in the hub",
                step(number, name)
            ),
        )
        .await?;
        say(
            number,
            name,
            format!(
                "wrote Secret {hub_namespace}/{secret_name} in the hub, key {KUBECONFIG_KEY}: a \
                 kubeconfig of {} with {} and the token (static; no exec, no file)",
                access.server,
                if access.ca_pem.is_some() {
                    "its CA embedded"
                } else {
                    "no CA (the system's roots verify the server)"
                }
            ),
        );

        // Step 6: the Region.
        let (number, name) = (6, "hub Region");
        let regions: Api<Region> = Api::all(self.client.clone());
        let what = format!("{}: reading Region {region} in the hub", step(number, name));
        let before = self.call(&what, regions.get_opt(region)).await?;
        let object = region_object(
            region,
            hub_namespace,
            &args.labels,
            args.prometheus_url.as_deref(),
        )
        .map_err(|e| failed(number, name, e))?;
        let what = format!(
            "{}: applying Region {region} in the hub",
            step(number, name)
        );
        let after = self.apply(regions.clone(), &object, &what).await?;
        let generation = after.metadata.generation.unwrap_or_default();
        let labels = if args.labels.is_empty() {
            "no labels".to_owned()
        } else {
            let pairs: Vec<String> = args
                .labels
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            format!("labels {}", pairs.join(","))
        };
        let done = match &before {
            None => "created",
            Some(before)
                if before.spec == after.spec && before.metadata.labels == after.metadata.labels =>
            {
                "unchanged (its Secret changed: the controller reads it again)"
            }
            Some(_) => "updated",
        };
        say(
            number,
            name,
            format!(
                "Region {region} {done}: kubeconfigSecretRef {hub_namespace}/{secret_name} key \
                 {KUBECONFIG_KEY}, {labels}{}",
                args.prometheus_url
                    .as_deref()
                    .map_or(String::new(), |url| format!(", prometheus {url}"))
            ),
        );

        // Step 7: what the controller makes of it.
        let (number, name) = (7, "controller");
        if args.no_wait {
            say(
                number,
                name,
                format!(
                    "not waiting (--no-wait): `kubectl get regions {region}` shows REACHABLE \
                     once the controller probed it"
                ),
            );
            return Ok(EXIT_COMPLETE);
        }
        say(
            number,
            name,
            format!(
                "waiting up to {} for the controller to report Region {region} reachable",
                humanize(args.wait_timeout)
            ),
        );
        let deadline = Instant::now() + args.wait_timeout;
        let what = format!("{}: reading Region {region} in the hub", step(number, name));
        loop {
            let current = self.call(&what, regions.get(region)).await?;
            let status = current.status.clone().unwrap_or_default();
            let observed = status.observed_generation.unwrap_or_default() >= generation;
            if observed && status.reachable == Some(true) {
                say(
                    number,
                    name,
                    format!(
                        "the controller reports Region {region} reachable ({}{})",
                        status
                            .server_version
                            .as_deref()
                            .unwrap_or("version unknown"),
                        status
                            .last_contact_time
                            .map_or(String::new(), |time| format!(", last contact {}", time.0))
                    ),
                );
                println!(
                    "region {region} registered. Rotate its token by running this command \
                     again before it expires."
                );
                return Ok(EXIT_COMPLETE);
            }
            if Instant::now() >= deadline {
                if observed {
                    return Err(failed(
                        number,
                        name,
                        format!(
                            "the controller reports Region {region} unreachable: {}. The \
                             Region and its Secret are in place; the check of step 4 passed \
                             from here, so look at the controller's network path to {}",
                            status.last_error.as_deref().unwrap_or("no error given"),
                            access.server
                        ),
                    ));
                }
                say(
                    number,
                    name,
                    format!(
                        "no controller reported on Region {region} within {} (its status is \
                         not of generation {generation}): is the controller running? The \
                         Region and its Secret are in place; `kubectl get regions {region}` \
                         shows REACHABLE once it probed the region",
                        humanize(args.wait_timeout)
                    ),
                );
                return Ok(EXIT_COMPLETE);
            }
            tokio::time::sleep(STATUS_POLL).await;
        }
    }

    /// Lists ConfigMaps in `namespace` (every namespace when `None`) of the region as the
    /// controller, retrying while its new identity and binding reach the region's caches.
    async fn list_as_controller(
        &self,
        controller: &Client,
        region: &str,
        namespace: Option<&str>,
        number: usize,
        name: &str,
    ) -> Result<(), CliError> {
        let api: Api<ConfigMap> = match namespace {
            Some(namespace) => Api::namespaced(controller.clone(), namespace),
            None => Api::all(controller.clone()),
        };
        let place = namespace.map_or("every namespace".to_owned(), |ns| format!("namespace {ns}"));
        let what = format!(
            "{}: listing ConfigMaps in {place} of region {region} with the new token",
            step(number, name)
        );
        let settled = Instant::now() + RBAC_SETTLE;
        loop {
            match tokio::time::timeout(self.timeout, api.list(&ListParams::default().limit(1)))
                .await
            {
                Ok(Ok(_)) => return Ok(()),
                Ok(Err(kube::Error::Api(status)))
                    if matches!(status.code, 401 | 403) && Instant::now() < settled =>
                {
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                Ok(Err(error)) => return Err(api_error(&what, error)),
                Err(_) => {
                    return Err(CliError::Timeout {
                        what,
                        after: self.timeout,
                    });
                }
            }
        }
    }

    /// Namespaced registration: says which other grants of the ServiceAccount exist in the
    /// region (a ClusterRoleBinding from an earlier cluster-wide registration, RoleBindings
    /// in namespaces not given now), which the command does not remove.
    async fn report_wider_grants(
        &self,
        admin: &Client,
        region: &str,
        namespaces: &[String],
        number: usize,
        name: &str,
    ) -> Result<(), CliError> {
        let what = format!(
            "{}: reading ClusterRoleBinding {SERVICE_ACCOUNT} in region {region}",
            step(number, name)
        );
        let bindings: Api<ClusterRoleBinding> = Api::all(admin.clone());
        if self
            .call(&what, bindings.get_opt(SERVICE_ACCOUNT))
            .await?
            .is_some()
        {
            say(
                number,
                name,
                format!(
                    "warning: ClusterRoleBinding {SERVICE_ACCOUNT} (cluster-wide, from an \
                     earlier registration) still grants the controller every namespace of \
                     region {region}; delete it there if the namespaced grant is to be the only \
                     one: kubectl delete clusterrolebinding {SERVICE_ACCOUNT}"
                ),
            );
        }
        let what = format!(
            "{}: listing RoleBindings {SERVICE_ACCOUNT} in region {region}",
            step(number, name)
        );
        let bindings: Api<RoleBinding> = Api::all(admin.clone());
        let listed = self
            .call(
                &what,
                bindings.list(
                    &ListParams::default().fields(&format!("metadata.name={SERVICE_ACCOUNT}")),
                ),
            )
            .await?;
        let others: Vec<String> = listed
            .items
            .iter()
            .filter_map(|binding| binding.namespace())
            .filter(|namespace| !namespaces.contains(namespace))
            .collect();
        if !others.is_empty() {
            say(
                number,
                name,
                format!(
                    "note: RoleBinding {SERVICE_ACCOUNT} also grants the controller namespace {} \
                     of region {region} (not in --namespaces; left as it is): delete it there if \
                     that grant is over",
                    others.join(", ")
                ),
            );
        }
        Ok(())
    }
}

/// A duration as given on the command line: `8760h`, `90s`.
fn humanize(duration: Duration) -> String {
    let seconds = duration.as_secs();
    if seconds.is_multiple_of(3600) {
        format!("{}h", seconds / 3600)
    } else if seconds.is_multiple_of(60) {
        format!("{}m", seconds / 60)
    } else {
        format!("{seconds}s")
    }
}

#[cfg(test)]
mod tests;
