//! A criterion measurement of the benchmarking thread's CPU time, shared by the benches:
//! the machine the figures come from has 2 cores shared with other builds, and wall time
//! there includes waiting for a core.

use criterion::measurement::{Measurement, ValueFormatter, WallTime};

/// CPU time of the benchmarking thread (formatted like wall time).
pub struct ThreadCpuTime {
    wall: WallTime,
}

impl ThreadCpuTime {
    /// The measurement, for `Criterion::with_measurement`.
    pub fn new() -> Self {
        Self { wall: WallTime }
    }
}

fn thread_cpu_nanos() -> u64 {
    let mut time = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `time` is a valid, writable timespec for the duration of the call.
    let status = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut time) };
    if status != 0 {
        return 0;
    }
    let seconds = u64::try_from(time.tv_sec).unwrap_or(0);
    let nanos = u64::try_from(time.tv_nsec).unwrap_or(0);
    seconds * 1_000_000_000 + nanos
}

impl Measurement for ThreadCpuTime {
    type Intermediate = u64;
    type Value = std::time::Duration;

    fn start(&self) -> u64 {
        thread_cpu_nanos()
    }
    fn end(&self, started: u64) -> std::time::Duration {
        std::time::Duration::from_nanos(thread_cpu_nanos().saturating_sub(started))
    }
    fn add(&self, a: &std::time::Duration, b: &std::time::Duration) -> std::time::Duration {
        *a + *b
    }
    fn zero(&self) -> std::time::Duration {
        std::time::Duration::ZERO
    }
    fn to_f64(&self, value: &std::time::Duration) -> f64 {
        value.as_nanos() as f64
    }
    fn formatter(&self) -> &dyn ValueFormatter {
        self.wall.formatter()
    }
}
