//! One leader among the replicas sharing the database, for the work only one of them may do
//! (the Telegram `getUpdates` pollers): the replica holding a session advisory lock on one
//! connection. The lock goes with the connection, so a replica that dies or loses the database
//! stops leading at once, and another takes over at its next try.

use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::{Database, statement};

/// Advisory lock key of the leadership (`akritas` and 2 as bytes).
const LEADER_LOCK: i64 = 0x616b_7269_7461_7302;

/// Tries to lead every `every` until `cancel`; the receiver says whether this replica leads
/// now. A leader checks its connection at the same pace and steps down when it is gone.
pub fn lead(db: &Database, every: Duration, cancel: CancellationToken) -> watch::Receiver<bool> {
    let (leading, receiver) = watch::channel(false);
    let db = db.clone();
    tokio::spawn(async move {
        loop {
            let held = hold(&db, every, &leading, &cancel).await;
            leading.send_replace(false);
            if let Err(error) = held {
                tracing::warn!(component = "database", %error, "leadership lost or not reachable; trying again");
            }
            tokio::select! {
                () = cancel.cancelled() => return,
                () = tokio::time::sleep(every) => {}
            }
        }
    });
    receiver
}

/// Takes the lock if it is free and keeps it while its connection answers; returns when the
/// lock was taken by another replica, the connection failed, or `cancel`.
async fn hold(
    db: &Database,
    every: Duration,
    leading: &watch::Sender<bool>,
    cancel: &CancellationToken,
) -> Result<(), super::DatabaseError> {
    let client = db.client().await?;
    let row = client
        .query_one("SELECT pg_try_advisory_lock($1)", &[&LEADER_LOCK])
        .await
        .map_err(statement("try the leadership lock"))?;
    if !row.get::<_, bool>(0) {
        return Ok(());
    }
    tracing::info!(component = "database", "this replica leads (bot pollers, schedules)");
    leading.send_replace(true);
    loop {
        tokio::select! {
            () = cancel.cancelled() => {
                let _ = client.execute("SELECT pg_advisory_unlock($1)", &[&LEADER_LOCK]).await;
                return Ok(());
            }
            () = tokio::time::sleep(every) => {}
        }
        if let Err(error) = client.simple_query("SELECT 1").await {
            // The connection (and the lock with it) is gone; it must not go back to the pool.
            drop(deadpool_postgres::Object::take(client));
            return Err(statement("keep the leadership")(error));
        }
    }
}
