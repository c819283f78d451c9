//! A transaction on a pooled connection that is rolled back at once when dropped.

use deadpool_postgres::Object;

use super::{Database, DatabaseError, statement};

/// A transaction on a pooled connection. Dropped before [`Tx::commit`] (an error, or a caller
/// that went away at an `await`), it is rolled back at once, so no lock is left held by an idle
/// connection.
pub(crate) struct Tx {
    pub(super) client: Option<Object>,
}

impl Tx {
    /// A connection from the pool with a transaction begun on it.
    pub(super) async fn begin(db: &Database) -> Result<Tx, DatabaseError> {
        Tx::begin_with(db, "BEGIN").await
    }

    /// A connection from the pool with a transaction begun by `begin` (a `BEGIN …` statement).
    pub(super) async fn begin_with(db: &Database, begin: &str) -> Result<Tx, DatabaseError> {
        let tx = Tx { client: Some(db.client().await?) };
        tx.client().batch_execute(begin).await.map_err(statement("begin a transaction"))?;
        Ok(tx)
    }

    /// Ends a transaction that wrote nothing; the connection goes back to the pool.
    pub(super) async fn end(mut self) {
        let Some(client) = self.client.take() else { return };
        if client.batch_execute("ROLLBACK").await.is_err() {
            drop(Object::take(client));
        }
    }

    pub(super) fn client(&self) -> &Object {
        self.client.as_ref().expect("a transaction holds its connection until it commits")
    }

    /// Commits; the connection goes back to the pool.
    pub(super) async fn commit(mut self) -> Result<(), tokio_postgres::Error> {
        self.client().batch_execute("COMMIT").await?;
        self.client = None;
        Ok(())
    }
}

impl Drop for Tx {
    fn drop(&mut self) {
        let Some(client) = self.client.take() else { return };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move {
                    if client.batch_execute("ROLLBACK").await.is_err() {
                        let _ = Object::take(client);
                    }
                });
            }
            // No runtime to roll back on: the connection is closed, which rolls back.
            Err(_) => drop(Object::take(client)),
        }
    }
}
