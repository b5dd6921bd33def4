//! The server's queues: each engine queue with its SQS attributes.
//!
//! Invariant: the registry holds exactly the engine's queues, each with
//! settings that passed validation. Creation, deletion and attribute changes
//! are serialised by one lock. Each queue's settings are stored in its
//! engine metadata (`Queue::set_metadata`) before a change is reported done,
//! so they are as durable as the engine (a data dir's log, or a cluster's
//! replicated log, where a new leader finds them); on a durable engine the
//! settings file in the data dir is rewritten as well (atomically, by
//! rename), which data dirs written before the metadata existed rely on.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::Duration;

use leaseq::{Engine, Queue, QueueConfig};

use crate::error::{ErrorCode, SqsError};
use crate::move_tasks::MoveTasks;
use crate::settings::{MAX_MESSAGE_SIZE, QueueSettings, Redrive, fifo_unsupported};

/// The settings file's name inside a durable engine's data dir (the engine
/// ignores files that are not its segments).
pub const SETTINGS_FILE: &str = "leaseq-server-queues.json";
/// Bytes the envelope adds to a message at most (header plus per-attribute
/// framing of 10 attributes); the engine's payload limit leaves room for it.
const ENVELOPE_ALLOWANCE: usize = 1024;
/// First-receive times kept per queue; past this the table is cleared and the
/// attribute falls back to the current receive's time (it is approximate).
const FIRST_RECEIVE_CAP: usize = 65_536;

/// One queue as the server sees it.
#[derive(Debug)]
pub(crate) struct QueueEntry {
    /// The engine queue.
    pub(crate) queue: Queue,
    settings: Mutex<QueueSettings>,
    first_receive: Mutex<HashMap<u64, u64>>,
}

impl QueueEntry {
    /// The queue's current attributes.
    pub(crate) fn settings(&self) -> QueueSettings {
        lock(&self.settings).clone()
    }

    /// `ApproximateFirstReceiveTimestamp` of message `id` received now
    /// (`now_ms`) for the `count`-th time.
    pub(crate) fn first_receive(&self, id: u64, count: u32, now_ms: u64) -> u64 {
        let mut table = lock(&self.first_receive);
        if count <= 1 {
            if table.len() >= FIRST_RECEIVE_CAP {
                table.clear();
            }
            table.insert(id, now_ms);
            return now_ms;
        }
        *table.get(&id).unwrap_or(&now_ms)
    }

    /// Forgets first-receive times (after a purge).
    pub(crate) fn forget_receives(&self) {
        lock(&self.first_receive).clear();
    }
}

/// The server's queues.
#[derive(Debug)]
pub struct Registry {
    engine: Engine,
    queues: RwLock<HashMap<String, Arc<QueueEntry>>>,
    /// Serialises create, delete and attribute changes (and the file write).
    changes: Mutex<()>,
    settings_file: Option<PathBuf>,
    /// Recent message move tasks.
    pub(crate) tasks: MoveTasks,
}

impl Registry {
    /// The registry of `engine`'s queues. With `data_dir`, attributes are
    /// loaded from and kept in its settings file; a queue the file does not
    /// know gets SQS defaults with its engine config's visibility and redrive.
    pub fn open(engine: Engine, data_dir: Option<PathBuf>) -> std::io::Result<Registry> {
        let settings_file = data_dir.map(|dir| dir.join(SETTINGS_FILE));
        let mut saved: HashMap<String, QueueSettings> = HashMap::new();
        if let Some(path) = &settings_file {
            match std::fs::read(path) {
                Ok(bytes) => {
                    saved = serde_json::from_slice(&bytes).map_err(|e| {
                        std::io::Error::new(
                            std::io::ErrorKind::InvalidData,
                            format!("{} is not a valid settings file: {e}", path.display()),
                        )
                    })?
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        let now = unix_now_ms() / 1000;
        let mut queues = HashMap::new();
        for name in engine.list_queues() {
            let Ok(queue) = engine.queue(&name) else { continue };
            let from_file = saved.remove(&name);
            let mut settings = settings_of(&queue).or(from_file).unwrap_or_else(|| {
                let mut fresh = QueueSettings::new(now);
                fresh.visibility_timeout = queue.config().visibility_timeout.as_secs().min(43_200) as u32;
                fresh
            });
            // The engine's log is the truth for the redrive link.
            settings.redrive = redrive_of(&queue.config());
            // A queue the engine holds without the retention its attributes
            // name (created before the engine enforced it) gets it now.
            let retention = retention_of(&settings);
            if queue.config().retention != Some(retention) {
                queue.set_retention(Some(retention)).map_err(std::io::Error::other)?;
            }
            queues.insert(name, Arc::new(entry(queue, settings)));
        }
        Ok(Registry {
            engine,
            queues: RwLock::new(queues),
            changes: Mutex::new(()),
            settings_file,
            tasks: MoveTasks::default(),
        })
    }

    /// The engine behind the registry.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The queue named `name`.
    pub(crate) fn get(&self, name: &str) -> Result<Arc<QueueEntry>, SqsError> {
        self.queues.read().unwrap_or_else(|p| p.into_inner()).get(name).cloned().ok_or_else(SqsError::no_queue)
    }

    /// Names of all queues starting with `prefix`, sorted.
    pub(crate) fn names(&self, prefix: &str) -> Vec<String> {
        let mut names: Vec<String> = self
            .queues
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .keys()
            .filter(|n| n.starts_with(prefix))
            .cloned()
            .collect();
        names.sort();
        names
    }

    /// Queues whose redrive policy targets `name`, sorted.
    pub(crate) fn dead_letter_sources(&self, name: &str) -> Vec<String> {
        let queues = self.queues.read().unwrap_or_else(|p| p.into_inner());
        let mut names: Vec<String> = queues
            .iter()
            .filter(|(_, e)| e.queue.dead_letter_queue().as_deref() == Some(name))
            .map(|(n, _)| n.clone())
            .collect();
        names.sort();
        names
    }

    /// Creates queue `name` with `attributes`. An existing queue whose
    /// attributes match every one given is success, as in SQS; a mismatch is
    /// `QueueNameExists`.
    /// Tags are set only on a new queue (an existing one keeps its own).
    pub(crate) fn create(
        &self,
        name: &str,
        attributes: &HashMap<String, String>,
        tags: &HashMap<String, String>,
    ) -> Result<(), SqsError> {
        if name.ends_with(".fifo") {
            return Err(fifo_unsupported());
        }
        let _serial = lock(&self.changes);
        let now = unix_now_ms() / 1000;
        if let Ok(existing) = self.get(name) {
            let current = existing.settings();
            let asked = current.with(attributes)?;
            if asked != current {
                return Err(SqsError::new(
                    ErrorCode::QueueNameExists,
                    format!("A queue named {name} already exists with different attributes."),
                ));
            }
            return Ok(());
        }
        let mut settings = QueueSettings::new(now).with(attributes)?;
        settings.tags = crate::settings::with_tags(&settings.tags, tags)?;
        let mut config = QueueConfig::default()
            .visibility_timeout(Duration::from_secs(settings.visibility_timeout.into()))
            .max_payload(MAX_MESSAGE_SIZE as usize + ENVELOPE_ALLOWANCE)
            .retention(retention_of(&settings));
        if let Some(redrive) = &settings.redrive {
            config =
                config.dead_letter_queue(redrive.dead_letter_queue.clone()).max_receives(redrive.max_receive_count);
        }
        let queue = self.engine.create_queue(name, config)?;
        store(&queue, &settings)?;
        self.queues
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(name.to_string(), Arc::new(entry(queue, settings)));
        self.save()
    }

    /// Deletes queue `name` and its messages.
    pub(crate) fn delete(&self, name: &str) -> Result<(), SqsError> {
        let _serial = lock(&self.changes);
        self.get(name)?;
        self.engine.delete_queue(name)?;
        self.queues.write().unwrap_or_else(|p| p.into_inner()).remove(name);
        self.save()
    }

    /// Applies `attributes` to queue `name`. A new redrive policy goes to
    /// the engine first: it is the one change here that can be refused (no
    /// such dead-letter queue, a cycle), and then nothing changed.
    pub(crate) fn set_attributes(&self, name: &str, attributes: &HashMap<String, String>) -> Result<(), SqsError> {
        let _serial = lock(&self.changes);
        let entry = self.get(name)?;
        let mut settings = lock(&entry.settings);
        let mut next = settings.with(attributes)?;
        if next.redrive != settings.redrive {
            // The engine's log is the truth for the link (`open` reads it
            // back), so the settings stored below may lag it, never lead.
            let (target, ceiling) = match &next.redrive {
                Some(redrive) => (Some(redrive.dead_letter_queue.as_str()), Some(redrive.max_receive_count)),
                None => (None, None),
            };
            entry.queue.set_dead_letter(target, ceiling)?;
        }
        next.last_modified = unix_now_ms() / 1000;
        // The settings first: should the retention change fail after it, the
        // next open sets the engine's retention from them.
        store(&entry.queue, &next)?;
        if next.message_retention_period != settings.message_retention_period {
            entry.queue.set_retention(Some(retention_of(&next)))?;
        }
        *settings = next;
        drop(settings);
        self.save()
    }

    /// Changes queue `name`'s tags with `change` (which checks them), kept
    /// as its attributes are.
    pub(crate) fn change_tags(
        &self,
        name: &str,
        change: impl FnOnce(&BTreeMap<String, String>) -> Result<BTreeMap<String, String>, SqsError>,
    ) -> Result<(), SqsError> {
        let _serial = lock(&self.changes);
        let entry = self.get(name)?;
        let mut settings = lock(&entry.settings);
        let mut next = settings.clone();
        next.tags = change(&settings.tags)?;
        store(&entry.queue, &next)?;
        *settings = next;
        drop(settings);
        self.save()
    }

    /// Rewrites the settings file (durable engines only).
    fn save(&self) -> Result<(), SqsError> {
        let Some(path) = &self.settings_file else { return Ok(()) };
        let all: HashMap<String, QueueSettings> = self
            .queues
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|(name, e)| (name.clone(), e.settings()))
            .collect();
        let write = || -> std::io::Result<()> {
            let tmp = path.with_extension("json.tmp");
            let bytes = serde_json::to_vec_pretty(&all).map_err(std::io::Error::other)?;
            let mut file = std::fs::File::create(&tmp)?;
            std::io::Write::write_all(&mut file, &bytes)?;
            file.sync_all()?;
            std::fs::rename(&tmp, path)
        };
        write().map_err(|e| {
            SqsError::new(
                ErrorCode::InternalFailure,
                format!("The queue changed, but its attributes could not be saved to {}: {e}.", path.display()),
            )
        })
    }
}

/// The settings kept in `queue`'s engine metadata, if it holds valid ones.
fn settings_of(queue: &Queue) -> Option<QueueSettings> {
    let metadata = queue.metadata();
    (!metadata.is_empty()).then(|| serde_json::from_slice(&metadata).ok()).flatten()
}

/// Keeps `settings` in `queue`'s engine metadata (logged on a durable or
/// replicated engine).
fn store(queue: &Queue, settings: &QueueSettings) -> Result<(), SqsError> {
    let bytes = serde_json::to_vec(settings)
        .map_err(|e| SqsError::new(ErrorCode::InternalFailure, format!("The attributes could not be encoded: {e}.")))?;
    queue.set_metadata(bytes)?;
    Ok(())
}

fn entry(queue: Queue, settings: QueueSettings) -> QueueEntry {
    QueueEntry { queue, settings: Mutex::new(settings), first_receive: Mutex::new(HashMap::new()) }
}

/// `MessageRetentionPeriod` as the engine's retention.
fn retention_of(settings: &QueueSettings) -> Duration {
    Duration::from_secs(settings.message_retention_period.into())
}

fn redrive_of(config: &QueueConfig) -> Option<Redrive> {
    match (&config.dead_letter_queue, config.max_receives) {
        (Some(dlq), Some(max)) => Some(Redrive { dead_letter_queue: dlq.clone(), max_receive_count: max }),
        _ => None,
    }
}

/// The wall clock in Unix milliseconds (what SQS timestamps use).
pub(crate) fn unix_now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic elsewhere never leaves these maps half-changed: recover.
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}
