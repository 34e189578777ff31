//! Long DLQ actions - a group's replay, discard or dry run - as jobs: each has an id, shows
//! its progress while it runs, can be cancelled, and stays listed after it ends, so an
//! operator who reloads the page or comes back from another terminal finds it. Jobs live
//! in the gateway's memory: a restart forgets them (what they did stays done, and audited).

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use serde::Serialize;

use super::{CanaryOutcome, DeadLetters, DlqError, ReplayOptions, list_pages, replay};
use crate::clock::now_ms;
use crate::store::DlqFilter;
use verdict_registry::Registry;
use verdict_runtime::Action;

/// Jobs kept after they end, newest first; older ones are forgotten.
pub const KEPT_JOBS: usize = 100;

/// Dead letters a discard job moves per store call: progress shows between calls, and a
/// cancel takes effect at the next one.
const DISCARD_CHUNK: usize = 100;

/// What a job does.
#[derive(Debug, Clone)]
pub enum JobAction {
    /// Put the matched dead letters back for delivery.
    Replay(ReplayOptions),
    /// Discard them for good, audited with this reason.
    Discard(String),
    /// Ask the current policy what it decides for each; move nothing.
    DryRun,
}

impl JobAction {
    fn name(&self) -> &'static str {
        match self {
            JobAction::Replay(_) => "replay",
            JobAction::Discard(_) => "discard",
            JobAction::DryRun => "dry-run",
        }
    }
}

/// Where a job is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum JobState {
    /// Working.
    Running,
    /// Done: every matched dead letter was handled (a replay whose canary failed ends here
    /// too, with `canary.passed = false`).
    Succeeded,
    /// Stopped by an error (`error` says which).
    Failed,
    /// Stopped by an operator.
    Cancelled,
}

/// A job as the API and the CLI show it.
#[derive(Debug, Clone, Serialize)]
pub struct JobView {
    /// `job-<n>`, unique within this gateway's run.
    pub id: String,
    /// `replay`, `discard` or `dry-run`.
    pub action: &'static str,
    /// Which dead letters: the group, the source and the cut-off (`dead_before_ms`, the
    /// job's start: letters that arrive while it runs are left for the next look).
    pub filter: DlqFilter,
    /// Where it is.
    pub state: JobState,
    /// Dead letters matched.
    pub total: usize,
    /// Handled so far.
    pub done: usize,
    /// `done` of `total` as a whole percentage (100 once it has ended with nothing to do).
    pub percent: u8,
    /// When it started (ms since the epoch).
    pub started_at_ms: u64,
    /// When it ended.
    pub finished_at_ms: Option<u64>,
    /// A replay's canary, once it has been judged.
    pub canary: Option<CanaryOutcome>,
    /// A dry run's answer: how many of the letters get each action now (`retry`,
    /// `delay`, `dead-letter`, `discard`; `no-route` when no route takes the topic).
    pub decisions: BTreeMap<String, usize>,
    /// Why it failed.
    pub error: Option<String>,
    /// Who and why, as the audit log has it.
    pub note: String,
}

impl JobView {
    /// Done as a whole percentage (100 when there was nothing to do).
    fn percent_now(&self) -> u8 {
        if self.total == 0 {
            return if self.state == JobState::Running {
                0
            } else {
                100
            };
        }
        u8::try_from(self.done.min(self.total) * 100 / self.total).unwrap_or(100)
    }
}

/// One job.
#[derive(Debug)]
pub struct Job {
    view: Mutex<JobView>,
    cancel: Arc<AtomicBool>,
    action: JobAction,
}

impl Job {
    /// How it stands now.
    pub fn view(&self) -> JobView {
        self.view
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Ask it to stop at its next step; `false` when it had already ended.
    pub fn cancel(&self) -> bool {
        let running = self.view().state == JobState::Running;
        self.cancel.store(true, Ordering::Relaxed);
        running
    }

    fn update(&self, f: impl FnOnce(&mut JobView)) {
        let mut view = self.view.lock().unwrap_or_else(PoisonError::into_inner);
        f(&mut view);
        view.percent = view.percent_now();
    }

    /// End it with `error` (a source that could not be reached, say).
    pub fn fail(&self, error: impl std::fmt::Display) {
        self.update(|v| {
            v.state = JobState::Failed;
            v.error = Some(verdict_runtime::text::one_line(&error.to_string(), 500));
            v.finished_at_ms = Some(now_ms());
        });
    }

    /// Do the job on `dlqs`, recording progress as it goes; `registry` answers a dry run,
    /// `replayed` is called after each replay (to wake the deliveries). Returns when it has
    /// ended; its view says how.
    pub fn run(&self, dlqs: &dyn DeadLetters, registry: Option<&Registry>, replayed: &dyn Fn()) {
        let outcome = self.work(dlqs, registry, replayed);
        let cancelled = self.cancel.load(Ordering::Relaxed);
        self.update(|v| {
            v.finished_at_ms = Some(now_ms());
            v.state = match outcome {
                Err(e) => {
                    v.error = Some(verdict_runtime::text::one_line(&e.to_string(), 500));
                    JobState::Failed
                }
                Ok(()) if cancelled => JobState::Cancelled,
                Ok(()) => JobState::Succeeded,
            };
        });
    }

    fn work(
        &self,
        dlqs: &dyn DeadLetters,
        registry: Option<&Registry>,
        replayed: &dyn Fn(),
    ) -> Result<(), JobError> {
        let filter = self.view().filter;
        match &self.action {
            JobAction::Replay(options) => {
                let options = ReplayOptions {
                    dry_run: false,
                    cancel: Some(self.cancel.clone()),
                    ..options.clone()
                };
                let report = replay(dlqs, registry, &filter, &options, |done, total| {
                    replayed();
                    self.update(|v| (v.done, v.total) = (done, total));
                })
                .map_err(|e| JobError(e.to_string()))?;
                self.update(|v| {
                    v.total = report.matched;
                    v.done = report.replayed;
                    v.canary = report.canary;
                });
            }
            JobAction::Discard(reason) => {
                let entries = list_pages(dlqs, &filter, now_ms())?;
                self.update(|v| v.total = entries.len());
                for chunk in entries.chunks(DISCARD_CHUNK) {
                    if self.cancel.load(Ordering::Relaxed) {
                        break;
                    }
                    let n = dlqs.discard(chunk, reason)?;
                    self.update(|v| v.done += usize::try_from(n).unwrap_or(usize::MAX));
                }
            }
            JobAction::DryRun => {
                let registry = registry.ok_or_else(|| {
                    JobError("a dry run needs the gateway's policies".to_string())
                })?;
                let entries = list_pages(dlqs, &filter, now_ms())?;
                self.update(|v| v.total = entries.len());
                // One topic's letters side by side, up to a batch at a time: one call into
                // the policy's sandbox per batch, progress after each.
                let batches = entries
                    .chunk_by(|a, b| a.topic == b.topic)
                    .flat_map(|run| run.chunks(DRY_RUN_BATCH));
                for batch in batches {
                    if self.cancel.load(Ordering::Relaxed) {
                        break;
                    }
                    let failures: Vec<_> = batch.iter().map(super::last_failure).collect();
                    let decisions = registry.decide_batch(&batch[0].topic, &failures);
                    let actions: Vec<&'static str> = match &decisions {
                        Some(decisions) => decisions
                            .iter()
                            .map(|d| action_name(&d.verdict.action))
                            .collect(),
                        None => vec!["no-route"; batch.len()],
                    };
                    self.update(|v| {
                        for action in &actions {
                            *v.decisions.entry((*action).to_string()).or_default() += 1;
                        }
                        v.done += batch.len();
                    });
                }
            }
        }
        Ok(())
    }
}

/// Dead letters a dry run decides per call into a policy (the contract's batch bound).
const DRY_RUN_BATCH: usize = 64;

fn action_name(action: &Action) -> &'static str {
    action.name()
}

/// Why a job stopped.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct JobError(String);

impl From<DlqError> for JobError {
    fn from(e: DlqError) -> Self {
        JobError(e.to_string())
    }
}

/// The gateway's jobs: the running ones and the last [`KEPT_JOBS`] that ended.
#[derive(Debug, Default)]
pub struct Jobs {
    next: AtomicU64,
    jobs: Mutex<VecDeque<Arc<Job>>>,
}

impl Jobs {
    /// A new job doing `action` on the dead letters `filter` matches, cut off at this
    /// instant (its `dead_before_ms`, unless the filter sets an earlier one). Start it with
    /// [`Job::run`], on a thread that may block.
    pub fn create(&self, action: JobAction, mut filter: DlqFilter) -> Arc<Job> {
        let started_at_ms = now_ms();
        filter.dead_before_ms = Some(
            filter
                .dead_before_ms
                .map_or(started_at_ms, |t| t.min(started_at_ms)),
        );
        let note = match &action {
            JobAction::Replay(o) => o.note.clone(),
            JobAction::Discard(reason) => reason.clone(),
            JobAction::DryRun => String::new(),
        };
        let id = format!("job-{}", self.next.fetch_add(1, Ordering::Relaxed) + 1);
        let job = Arc::new(Job {
            view: Mutex::new(JobView {
                id,
                action: action.name(),
                filter,
                state: JobState::Running,
                total: 0,
                done: 0,
                percent: 0,
                started_at_ms,
                finished_at_ms: None,
                canary: None,
                decisions: BTreeMap::new(),
                error: None,
                note,
            }),
            cancel: Arc::new(AtomicBool::new(false)),
            action,
        });
        let mut jobs = self.jobs.lock().unwrap_or_else(PoisonError::into_inner);
        jobs.push_front(job.clone());
        // Forget the oldest ended jobs beyond the limit; running ones stay.
        while jobs.len() > KEPT_JOBS {
            match jobs
                .iter()
                .rposition(|j| j.view().state != JobState::Running)
            {
                Some(i) => drop(jobs.remove(i)),
                None => break,
            }
        }
        job
    }

    /// Every job kept, newest first.
    pub fn list(&self) -> Vec<JobView> {
        let jobs = self.jobs.lock().unwrap_or_else(PoisonError::into_inner);
        jobs.iter().map(|j| j.view()).collect()
    }

    /// The job `id`.
    pub fn get(&self, id: &str) -> Option<Arc<Job>> {
        let jobs = self.jobs.lock().unwrap_or_else(PoisonError::into_inner);
        jobs.iter().find(|j| j.view().id == id).cloned()
    }
}
