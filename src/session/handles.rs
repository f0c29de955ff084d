//! The objects behind the C handles of sessions and workers.

use std::sync::{Arc, LazyLock, Weak};

use super::controller::Session;
use crate::object::{Any, Error, ErrorKind, ObjectRef, ObjectType, Result, alloc_object, type_key};
use crate::worker;

/// The cell of a session handle.
pub struct SessionCell(pub Arc<Session>);

impl std::ops::Deref for SessionCell {
    type Target = Arc<Session>;
    fn deref(&self) -> &Arc<Session> {
        &self.0
    }
}

/// How a worker handle reaches its session: handles the user asked for keep it alive (as
/// DRefs do); a worker's own handle does not, so a session's threads never keep it alive.
pub enum SessionRef {
    Strong(Arc<Session>),
    /// What the worker keeps of its session, which is this session's (or nothing).
    Weak(Option<Weak<dyn std::any::Any + Send + Sync>>),
}

/// The cell of a worker handle.
pub struct WorkerCell {
    pub session: SessionRef,
    pub id: usize,
}

impl WorkerCell {
    pub fn session(&self) -> Result<Arc<Session>> {
        match &self.session {
            SessionRef::Strong(session) => Ok(session.clone()),
            SessionRef::Weak(session) => session
                .as_ref()
                .and_then(Weak::upgrade)
                .and_then(|s| s.downcast::<Session>().ok())
                .ok_or_else(|| {
                    Error::new(ErrorKind::SessionClosed, "the worker's session is gone")
                }),
        }
    }
}

static SESSION_INDEX: LazyLock<i32> = LazyLock::new(|| type_key::dynamic_index("discovm.Session"));
static WORKER_INDEX: LazyLock<i32> = LazyLock::new(|| type_key::dynamic_index("discovm.Worker"));

// SAFETY: objects with this dynamic index are only made by `session_handle`.
unsafe impl ObjectType for SessionCell {
    fn type_index() -> i32 {
        *SESSION_INDEX
    }
}

// SAFETY: objects with this dynamic index are only made by `worker_handle`.
unsafe impl ObjectType for WorkerCell {
    fn type_index() -> i32 {
        *WORKER_INDEX
    }
}

pub fn session_handle(session: Arc<Session>) -> ObjectRef<SessionCell> {
    alloc_object(SessionCell::type_index(), SessionCell(session))
}

fn worker_handle(session: SessionRef, id: usize) -> ObjectRef<WorkerCell> {
    alloc_object(WorkerCell::type_index(), WorkerCell { session, id })
}

/// A handle to worker `worker` of `session`, which keeps the session alive. A session that was
/// shut down hands out none (`SessionClosed`); a worker out of range is an `IndexError`.
pub fn new_worker_handle(session: &Arc<Session>, worker: i64) -> Result<ObjectRef<WorkerCell>> {
    session.check_open()?;
    let id = session.worker_index(worker)?;
    Ok(worker_handle(SessionRef::Strong(session.clone()), id))
}

/// The handle of the worker running the calling thread (a new reference to one handle the
/// thread keeps while it runs, which does not keep the session alive), or None off worker
/// threads.
pub fn current_worker_handle() -> Option<Any> {
    worker::current_handle(|info, session| {
        Any::from(worker_handle(SessionRef::Weak(session.cloned()), info.id))
    })
}
