//! Gate samples from Prometheus: a region's own server when its `Region` names one,
//! the controller's default otherwise.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use prometheus_http_query::response::Data;

use super::provider::{GateProvider, SampleFuture};
use super::verdict::{Labels, QueryResult};

/// How long one query may take, end to end, before the sample is Inconclusive.
pub const QUERY_TIMEOUT: Duration = Duration::from_secs(10);

/// Prometheus endpoints by region, shared with whoever keeps them current (the Region
/// watcher), plus the default.
#[derive(Clone, Default)]
pub struct PrometheusEndpoints {
    by_region: Arc<RwLock<HashMap<String, String>>>,
    default: Option<String>,
}

impl PrometheusEndpoints {
    /// Endpoints with `default` for regions that name none.
    pub fn new(default: Option<String>) -> Self {
        Self {
            by_region: Arc::default(),
            default,
        }
    }

    /// Sets (or clears, with `None`) the endpoint a region names.
    pub fn set(&self, region: &str, url: Option<String>) {
        if let Ok(mut map) = self.by_region.write() {
            match url {
                Some(url) => map.insert(region.to_owned(), url),
                None => map.remove(region),
            };
        }
    }

    fn url_for(&self, region: Option<&str>) -> Option<String> {
        region
            .and_then(|region| self.by_region.read().ok()?.get(region).cloned())
            .or_else(|| self.default.clone())
    }
}

/// Takes gate samples with instant queries over HTTP.
pub struct PrometheusProvider {
    http: reqwest::Client,
    endpoints: PrometheusEndpoints,
}

impl PrometheusProvider {
    /// A provider querying `endpoints` through `http` (which should carry its own
    /// connect timeout; every query is also bounded by [`QUERY_TIMEOUT`]).
    pub fn new(http: reqwest::Client, endpoints: PrometheusEndpoints) -> Self {
        Self { http, endpoints }
    }

    async fn query(&self, region: Option<&str>, query: &str) -> QueryResult {
        let Some(url) = self.endpoints.url_for(region) else {
            return QueryResult::Error("no Prometheus endpoint configured".to_owned());
        };
        let client = match prometheus_http_query::Client::from(self.http.clone(), &url) {
            Ok(client) => client,
            Err(error) => return QueryResult::Error(format!("Prometheus URL: {error}")),
        };
        let timeout_ms = i64::try_from(QUERY_TIMEOUT.as_millis()).unwrap_or(i64::MAX);
        let request = client.query(query).timeout(timeout_ms).get();
        match tokio::time::timeout(QUERY_TIMEOUT, request).await {
            Err(_) => QueryResult::Error(format!("no answer within {QUERY_TIMEOUT:?}")),
            Ok(Err(error)) => QueryResult::Error(error.to_string()),
            Ok(Ok(response)) => from_data(response.data()),
        }
    }
}

impl GateProvider for PrometheusProvider {
    fn sample<'a>(&'a self, region: Option<&'a str>, query: &'a str) -> SampleFuture<'a> {
        Box::pin(self.query(region, query))
    }
}

/// Converts an instant query's data; a range vector is not a gate's answer.
fn from_data(data: &Data) -> QueryResult {
    match data {
        Data::Scalar(sample) => QueryResult::Scalar(sample.value()),
        Data::Vector(series) if series.is_empty() => QueryResult::Empty,
        Data::Vector(series) => QueryResult::Vector(
            series
                .iter()
                .map(|element| {
                    let labels: Labels = element
                        .metric()
                        .iter()
                        .map(|(name, value)| (name.clone(), value.clone()))
                        .collect();
                    (labels, element.sample().value())
                })
                .collect(),
        ),
        Data::Matrix(_) => QueryResult::Error(
            "the query returned a range vector; gates need an instant vector or scalar".to_owned(),
        ),
    }
}
