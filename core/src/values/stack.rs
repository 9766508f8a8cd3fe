//! Where compiling and checking run: on a thread of their own with a large stack.
//!
//! The CEL parser (ANTLR) and the JSON Schema validator recurse once per nesting level of
//! what they read, tens of kilobytes of stack per level in a debug build. A tenant's
//! schema nested to the bounds the API allows would overflow a runtime worker's 2 MiB
//! stack, and a stack overflow aborts the process: every team's controller stopped by
//! one schema. The bounds on nesting (see `cel_rules` and `documents`) keep the depth
//! finite; this stack keeps it survivable. The stack is reserved, not committed: memory
//! is taken only as deep as the work goes.

/// Stack of the thread that compiles and checks.
const STACK_BYTES: usize = 64 << 20;

/// Runs `work` on a thread with [`STACK_BYTES`] of stack and returns what it returned;
/// `None` if the thread could not start or `work` panicked (the caller refuses).
pub(super) fn on_large_stack<T: Send>(work: impl FnOnce() -> T + Send) -> Option<T> {
    std::thread::scope(|scope| {
        std::thread::Builder::new()
            .name("configrollout-values".to_owned())
            .stack_size(STACK_BYTES)
            .spawn_scoped(scope, work)
            .ok()?
            .join()
            .ok()
    })
}
