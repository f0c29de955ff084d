//! A model of register freeing order. The controller calls a function on a DRef and hands
//! its last reference to another thread, which drops it (freeing the register on every worker)
//! while the controller reads the call's result and calls again, which may reuse the freed
//! register id. The session has one worker; it and both threads park as soon as they have
//! nothing to do. The call queued before the free must see the register's value, and the
//! reused id must not be emptied by the free (the later call's result survives); at the end
//! the worker's register file is empty.
//!
//! One preemption is enough to reach every order of the free's steps against the reuse: the
//! controller's wait for the worker hands the other threads the CPU without one.

use std::time::Duration;

use loom::thread::spawn;

use super::{DRef, Session, SessionOptions, SpinPolicy, Target};
use crate::object::{Any, Function, registry};
use crate::sync::explore;

const ADD_ONE: &str = "discovm.loom_model.add_one";

fn value(session: &Session, dref: &DRef) -> i64 {
    match session.get_register(dref.reg(), 0).unwrap() {
        Any::Int(v) => v,
        other => panic!("register {} holds {other:?}", dref.reg()),
    }
}

fn register_freed_by_another_thread() {
    let options = SessionOptions {
        spin: SpinPolicy {
            budget: Duration::ZERO,
        },
        ..SessionOptions::default()
    };
    let session = Session::new_threaded(1, 1, options).unwrap();
    let f = session.get_global_func(ADD_ONE).unwrap();
    let one = Any::Int(1);
    let x = session.call(Target::All, &f, &[one.view()]).unwrap();
    let y = session
        .call(Target::All, &f, &[Any::from(x.clone()).view()])
        .unwrap();
    let freeing = spawn(move || drop(x));
    // While this waits for the worker, the other thread may free x's register.
    assert_eq!(value(&session, &y), 3);
    let ten = Any::Int(10);
    let z = session.call(Target::All, &f, &[ten.view()]).unwrap();
    freeing.join().unwrap();
    // Read after the free was queued, so a free that emptied the reused id would show here.
    assert_eq!(value(&session, &z), 11);
    drop((f, y, z));
    assert_eq!(session.live_registers(0).unwrap(), 0);
    session.shutdown().unwrap();
}

#[test]
fn a_register_is_freed_after_the_calls_that_use_it_and_before_its_reuse() {
    let add_one = Function::from_closure(|args| Ok(Any::Int(args[0].as_i64()? + 1)));
    registry::register_global(ADD_ONE, add_one, true).unwrap();
    explore(
        "session: register used, freed by another thread, reused",
        Some(1),
        register_freed_by_another_thread,
    );
}
