//! Group commit on the database, for the stores whose appends need no decision under the
//! store's lock (the audit, the alerts): appends queued by many tasks at once are written in
//! one transaction under the head lock, in queue order, as the journal's writer thread writes
//! them with one fsync. An append is durable when its [`Pending`] resolves.

use tokio::sync::{mpsc, oneshot};

use super::{DatabaseError, Log, Row};
use crate::journal::{JournalError, Record};

/// Most appends written in one transaction.
const MAX_BATCH: usize = 512;

struct Queued {
    kind: String,
    data: serde_json::Value,
    /// The data as it is hashed and stored (made once, when its size is checked).
    json: String,
    reply: oneshot::Sender<Result<Record, DatabaseError>>,
}

/// The group writer of one store: a task that writes what is queued, batch by batch. It stops
/// when the last handle is dropped.
#[derive(Clone)]
pub struct Group {
    log: Log,
    queue: mpsc::UnboundedSender<Queued>,
}

/// An append queued; [`Pending::committed`] waits until its transaction commits.
pub struct Pending(oneshot::Receiver<Result<Record, DatabaseError>>);

impl Pending {
    /// The record, once committed.
    pub async fn committed(self) -> Result<Record, DatabaseError> {
        self.0.await.unwrap_or_else(|_| {
            Err(DatabaseError::Unreachable("the group writer stopped before the append was written".to_string()))
        })
    }
}

impl Group {
    /// Starts the group writer of `log` on the current runtime.
    pub fn start(log: Log) -> Group {
        let (queue, receiver) = mpsc::unbounded_channel();
        tokio::spawn(run(log.clone(), receiver));
        Group { log, queue }
    }

    /// Queues an append (its kind and size are checked here); its seq is given in commit order.
    pub fn enqueue(&self, kind: &str, data: &serde_json::Value) -> Result<Pending, JournalError> {
        let json = self.log.row(kind, data)?.json;
        let (reply, answer) = oneshot::channel();
        let queued = Queued { kind: kind.to_string(), data: data.clone(), json, reply };
        if self.queue.send(queued).is_err() {
            return Err(JournalError::Closed);
        }
        Ok(Pending(answer))
    }

    /// Appends and waits until it is committed.
    pub async fn append(&self, kind: &str, data: &serde_json::Value) -> Result<Record, AppendFailed> {
        let pending = self.enqueue(kind, data).map_err(AppendFailed::Journal)?;
        pending.committed().await.map_err(AppendFailed::Database)
    }
}

/// Why a group append failed.
#[derive(Debug, thiserror::Error)]
pub enum AppendFailed {
    /// The record is refused (kind, size).
    #[error(transparent)]
    Journal(JournalError),
    /// The database failed; nothing of its batch was written.
    #[error(transparent)]
    Database(DatabaseError),
}

async fn run(log: Log, mut receiver: mpsc::UnboundedReceiver<Queued>) {
    while let Some(first) = receiver.recv().await {
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match receiver.try_recv() {
                Ok(queued) => batch.push(queued),
                Err(_) => break,
            }
        }
        let written = write(&log, &mut batch).await;
        match written {
            Ok(records) => {
                for (queued, record) in batch.into_iter().zip(records) {
                    let _ = queued.reply.send(Ok(record));
                }
            }
            Err(error) => {
                for queued in batch {
                    let _ = queued.reply.send(Err(error.clone()));
                }
            }
        }
    }
}

async fn write(log: &Log, batch: &mut [Queued]) -> Result<Vec<Record>, DatabaseError> {
    let rows = batch
        .iter_mut()
        .map(|Queued { kind, data, json, .. }| Row { kind, data, json: std::mem::take(json), key: None })
        .collect();
    let locked = log.lock().await?;
    log.write(locked, rows).await
}
