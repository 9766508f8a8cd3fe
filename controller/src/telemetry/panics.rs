//! Panics: where they happened, told without what they carried, and kept inside the
//! future that panicked.
//!
//! One reconcile that panics must not end the work loop every rollout shares (kube-runtime
//! re-raises a reconciler's panic in the controller's stream). [`catch`] turns a panic of a
//! future into a value its caller reports; [`install_hook`] makes the process's panic
//! hook log the location through `tracing` and remember it for [`catch`], instead of
//! printing the payload to stderr: a payload may be any formatted value (an `unwrap` on an
//! error that quotes a configuration value), and no value may reach a log.

use std::any::Any;
use std::cell::RefCell;
use std::future::Future;
use std::panic::{AssertUnwindSafe, PanicHookInfo};

use futures::FutureExt;

thread_local! {
    /// Where the last panic on this thread happened. The hook runs on the panicking
    /// thread before unwinding starts, and [`catch`] reads it on the same thread, in the
    /// same poll that caught the unwind.
    static LAST_PANIC: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Where a caught panic happened, as `file:line`; `None` when no hook recorded it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caught {
    /// `file:line` of the panic, from the hook.
    pub location: Option<String>,
}

impl Caught {
    /// The location, or a phrase saying it is not known.
    pub fn location_or_unknown(&self) -> &str {
        self.location.as_deref().unwrap_or("an unknown location")
    }
}

/// Runs `future` to completion, or to its panic: a panic becomes `Err`, with the location
/// the hook recorded. Everything the future held is dropped as it unwinds; the caller
/// must not rely on state the future left half-changed (the reconciles rely only on
/// what they read again next time).
pub async fn catch<F: Future>(future: F) -> Result<F::Output, Caught> {
    LAST_PANIC.with(|last| last.borrow_mut().take());
    match AssertUnwindSafe(future).catch_unwind().await {
        Ok(output) => Ok(output),
        Err(_payload) => Err(Caught {
            location: LAST_PANIC.with(|last| last.borrow_mut().take()),
        }),
    }
}

/// Replaces the process's panic hook: each panic is logged at error level with its
/// location and thread, and its message (`payload`) only when it is a literal (a `&'static str`
/// payload cannot carry a runtime value); the location is kept for [`catch`].
pub fn install_hook() {
    std::panic::set_hook(Box::new(|info: &PanicHookInfo<'_>| {
        let location = info
            .location()
            .map(|location| format!("{}:{}", location.file(), location.line()));
        let payload = literal_message(info.payload());
        let thread = std::thread::current();
        tracing::error!(
            location = location.as_deref().unwrap_or("unknown"),
            thread = thread.name().unwrap_or("unnamed"),
            payload,
            "panic"
        );
        LAST_PANIC.with(|last| *last.borrow_mut() = location);
    }));
}

/// The panic's message when it is a literal; a phrase saying it is withheld otherwise.
fn literal_message(payload: &(dyn Any + Send)) -> &'static str {
    payload
        .downcast_ref::<&'static str>()
        .copied()
        .unwrap_or("(formatted message withheld: it may quote a value)")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_future_that_panics_is_an_error_with_its_location_and_the_caller_goes_on() {
        install_hook();
        let secret = "s3cr3t";
        let caught = catch(async move {
            tokio::task::yield_now().await;
            panic!("value was {secret}");
        })
        .await;
        let _ = std::panic::take_hook();
        let caught = caught.unwrap_err();
        let location = caught.location.expect("the hook recorded where");
        assert!(
            location.starts_with("controller/src/telemetry/panics.rs:"),
            "{location}"
        );
        assert!(!location.contains(secret));

        assert_eq!(catch(async { 7 }).await, Ok(7));
    }

    #[test]
    fn only_a_literal_message_is_told() {
        let literal: Box<dyn Any + Send> = Box::new("index out of range");
        assert_eq!(literal_message(literal.as_ref()), "index out of range");
        let formatted: Box<dyn Any + Send> = Box::new(format!("value {}", "s3cr3t"));
        assert!(!literal_message(formatted.as_ref()).contains("s3cr3t"));
    }
}
