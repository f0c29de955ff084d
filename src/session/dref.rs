//! Remote references: a register id on every worker of one session. A DRef is an object, so it
//! travels inside packed arguments; dropping the last reference frees the register everywhere,
//! after every call queued before.

use std::sync::{Arc, LazyLock};

use super::controller::Session;
use crate::object::{Any, AnyView, ObjectRef, ObjectType, Result, alloc_object, type_key};
use crate::worker::registers::Reg;

pub struct DRefCell {
    session: Arc<Session>,
    reg: Reg,
    /// The global function's name for DRefs made by `get_global_func`; None for results.
    name: Option<Arc<str>>,
}

static DREF_INDEX: LazyLock<i32> = LazyLock::new(|| type_key::dynamic_index("discovm.DRef"));

// SAFETY: objects with this dynamic index are only made by `DRef::new`.
unsafe impl ObjectType for DRefCell {
    fn type_index() -> i32 {
        *DREF_INDEX
    }
}

impl Drop for DRefCell {
    fn drop(&mut self) {
        self.session.free_register(self.reg);
    }
}

/// A remote reference.
#[derive(Clone, Debug)]
pub struct DRef(ObjectRef<DRefCell>);

impl DRef {
    pub(crate) fn new(session: Arc<Session>, reg: Reg, name: Option<Arc<str>>) -> DRef {
        DRef(alloc_object(
            DRefCell::type_index(),
            DRefCell { session, reg, name },
        ))
    }

    /// The DRef an argument holds, if it holds one.
    pub fn from_view(view: &AnyView<'_>) -> Option<DRef> {
        if view.type_index() != DRefCell::type_index() {
            return None;
        }
        view.as_object().ok()?.downcast::<DRefCell>().ok().map(DRef)
    }

    pub fn from_object(object: ObjectRef<DRefCell>) -> DRef {
        DRef(object)
    }

    pub fn into_object(self) -> ObjectRef<DRefCell> {
        self.0
    }

    pub fn object(&self) -> &ObjectRef<DRefCell> {
        &self.0
    }

    pub fn session(&self) -> &Arc<Session> {
        &self.0.session
    }

    pub fn reg(&self) -> Reg {
        self.0.reg
    }

    /// An owned copy of the value the register holds on `worker`, after every call sent before.
    pub fn get(&self, worker: i64) -> Result<Any> {
        let session = self.session();
        session.get_register(self.reg(), session.worker_index(worker)?)
    }

    /// Sets the register's value on `worker`, after every call sent before (returns at once).
    pub fn set(&self, worker: i64, value: Any) -> Result<()> {
        let session = self.session();
        session.set_register(self.reg(), session.worker_index(worker)?, value)
    }

    /// How messages name the function this DRef holds: its global name, or its register.
    pub fn label(&self) -> Arc<str> {
        match &self.0.name {
            Some(name) => name.clone(),
            None => format!("register {}", self.0.reg).into(),
        }
    }
}

impl From<DRef> for Any {
    fn from(d: DRef) -> Any {
        Any::from(d.0)
    }
}
