//! CPU time, in three parts: the whole process (every thread, living or exited), the threads
//! of the load generator (subtracted from the process: they stand in for producers and
//! consumers that live elsewhere), and the broker's server process.
//!
//! Thread and broker figures come from Linux's `/proc`; elsewhere they read as zero / unknown
//! and the report says so.

use std::path::Path;
use std::time::Duration;

/// CPU time this process has used.
pub(crate) fn process() -> Duration {
    cpu_time::ProcessTime::try_now()
        .map(|t| t.as_duration())
        .unwrap_or_default()
}

/// CPU time used by this process's living threads whose name starts with `prefix`
/// (`/proc/self/task/<tid>/schedstat`: nanoseconds on a CPU).
pub(crate) fn threads_named(prefix: &str) -> Duration {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return Duration::ZERO;
    };
    tasks
        .flatten()
        .filter(|task| {
            std::fs::read_to_string(task.path().join("comm"))
                .is_ok_and(|name| name.trim_end().starts_with(prefix))
        })
        .filter_map(|task| schedstat_ns(&task.path().join("schedstat")))
        .map(Duration::from_nanos)
        .sum()
}

fn schedstat_ns(path: &Path) -> Option<u64> {
    std::fs::read_to_string(path)
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// CPU time (user + system) of every process named `name` on this machine, if any: the
/// broker's share of a run. `None` when no such process is visible.
pub(crate) fn processes_named(name: &str) -> Option<Duration> {
    // utime and stime are in USER_HZ ticks, which Linux fixes at 100 for user space.
    const TICK: Duration = Duration::from_millis(10);
    let mut found = None;
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let path = entry.path();
        if !std::fs::read_to_string(path.join("comm")).is_ok_and(|c| c.trim_end() == name) {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(path.join("stat")) else {
            continue;
        };
        // Fields after the parenthesised command name: state is field 3, utime 14, stime 15.
        let Some((_, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<u32>().ok());
        if let (Some(user), Some(system)) = (ticks(11), ticks(12)) {
            *found.get_or_insert(Duration::ZERO) += TICK * (user + system);
        }
    }
    found
}

/// CPU counters at one instant.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sample {
    process: Duration,
    load: Duration,
    broker: Option<Duration>,
}

impl Sample {
    pub(crate) fn now(load_threads: &str, broker: &str) -> Sample {
        Sample {
            process: process(),
            load: threads_named(load_threads),
            broker: processes_named(broker),
        }
    }

    /// CPU used since `earlier`: this process without the load generator, and the broker.
    pub(crate) fn since(&self, earlier: &Sample) -> (Duration, Option<Duration>) {
        let own = self.process.saturating_sub(earlier.process);
        let load = self.load.saturating_sub(earlier.load);
        let broker = match (self.broker, earlier.broker) {
            (Some(now), Some(then)) => Some(now.saturating_sub(then)),
            _ => None,
        };
        (own.saturating_sub(load), broker)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Work until this thread has had `d` of CPU (not of wall time: on a loaded machine a
    /// wall-clock spin is descheduled and does less work than it waited).
    fn spin(d: Duration) {
        let started = cpu_time::ThreadTime::now();
        let mut x = 0_u64;
        while started.elapsed() < d {
            for _ in 0..1_000 {
                x = std::hint::black_box(x.wrapping_add(1));
            }
        }
    }

    #[test]
    fn a_named_thread_s_work_is_counted_as_its_own() {
        let before = threads_named("cpu-test-spin");
        std::thread::Builder::new()
            .name("cpu-test-spin".into())
            .spawn(|| {
                spin(Duration::from_millis(60));
                // Read from inside: the thread's time is visible while it lives.
                threads_named("cpu-test-spin")
            })
            .unwrap()
            .join()
            .map(|inside| {
                assert!(
                    inside >= Duration::from_millis(55),
                    "the spinning thread measured {inside:?}"
                );
            })
            .unwrap();
        assert_eq!(before, Duration::ZERO, "no such thread before");
    }

    #[test]
    fn process_time_grows_with_work() {
        let before = process();
        spin(Duration::from_millis(50));
        let spent = process().saturating_sub(before);
        assert!(spent >= Duration::from_millis(45), "spent {spent:?}");
    }

    #[test]
    fn a_missing_process_is_none_not_zero() {
        assert_eq!(processes_named("no-such-process-verdict"), None);
    }
}
