//! The bound on the size of one answer of a region's API server, and the client for calls
//! that enforces it.

use kube::{Client, Config};

/// Most bytes one answer of a region's API server may carry (a call's; a watch is a
/// stream): a ConfigMap is at most 1 MiB, and the largest answer read is the list of a
/// namespace's workloads a consumer's selector matches.
pub const MAX_ANSWER_BYTES: usize = 32 * 1024 * 1024;

/// A client whose every answer carries at most [`MAX_ANSWER_BYTES`]: a broken or
/// hostile region's API server cannot make the controller buffer more (one that never
/// ends its answer is cut at the read timeout). Not for watches, whose answer is a
/// stream that lasts minutes.
pub(super) fn bounded_client(config: Config) -> Result<Client, kube::Error> {
    let layer = tower::util::MapResponseLayer::new(limit_answer);
    Ok(kube::client::ClientBuilder::try_from(config)?
        .with_layer(&layer)
        .build())
}

fn limit_answer(
    answer: hyper::Response<Box<kube::client::DynBody>>,
) -> hyper::Response<http_body_util::Limited<Box<kube::client::DynBody>>> {
    answer.map(|body| http_body_util::Limited::new(body, MAX_ANSWER_BYTES))
}
