//! What the controller keeps for a worker it reaches through frames (a worker process, a
//! worker on another node): how each message becomes a frame, and the requests that wait for
//! their replies.
//!
//! The one idea: a request registers how its reply completes it before its frame is sent, under
//! an id the reply carries back; whoever reads the replies (the thread that waits, or a reader
//! of a node's connection) delivers each to its request, and a reply whose waiter gave up
//! leaves its failure for the next wait, as a worker thread keeps it for its next sync.

use crate::object::{Any, AnyView, Error, Result};
use crate::sync::Mutex;
use crate::sync::atomic::{AtomicU64, Ordering};
use crate::wire::{Frame, Gathered, Value};
use crate::worker::message::{
    Arg, CopyDirection, GlobalLookup, HostCopy, Message, ModuleLookup, Reply,
};
use crate::worker::registers::Reg;
use std::sync::PoisonError;

/// The name a worker gives the tensor of a copy that crosses as a frame; the controller puts
/// the caller's name for it in the errors of the copy.
pub(crate) const COPIED_AS: &str = "dref";

/// How a reply completes its request; returns the failure it carried when the waiter gave up,
/// for the next wait to report.
pub(crate) type Pending = Box<dyn FnOnce(Result<Value>) -> Option<Error> + Send>;

thread_local! {
    /// The calling thread's buffer for encoding frames, reused from one frame to the next.
    static FRAMES: std::cell::Cell<Vec<u8>> = const { std::cell::Cell::new(Vec::new()) };
}

/// An empty buffer to encode a frame in: the calling thread's last one, if it gave it back.
fn frame_buffer() -> Vec<u8> {
    let mut out = FRAMES.take();
    out.clear();
    out
}

/// Gives a frame's buffer back for the calling thread's next frame (unless it grew large).
pub(crate) fn recycle(frame: Vec<u8>) {
    if frame.capacity() <= 1 << 20 {
        FRAMES.set(frame);
    }
}

/// Sends `message`, which needs no reply, with `send`, which says whether it could send it now
/// without waiting; gives the message back when it could not (or it cannot be encoded).
pub(crate) fn try_send(
    message: Message,
    send: impl FnOnce(&[u8]) -> bool,
) -> std::result::Result<(), Message> {
    let Ok(frame) = encode_broadcast(&message, &[]) else {
        return Err(message);
    };
    let sent = send(&frame);
    recycle(frame);
    if sent { Ok(()) } else { Err(message) }
}

/// Encodes a message that needs no reply (a call, a store, a free, the shutdown), once for
/// every worker it goes to; `frees`, the registers to empty first, ride on a call (nothing
/// else takes them). A value that cannot cross is a `TypeError` naming it.
pub(crate) fn encode_broadcast(message: &Message, frees: &[Reg]) -> Result<Vec<u8>> {
    let mut out = frame_buffer();
    broadcast_frame(message, frees, |frame| frame.encode(&mut out))?;
    Ok(out)
}

/// [`encode_broadcast`] for a stream: large host tensors are written from their own memory.
pub(crate) fn gather_broadcast(message: &Message, frees: &[Reg]) -> Result<Gathered> {
    broadcast_frame(message, frees, |frame| {
        frame.encode_gathered(frame_buffer())
    })
}

/// Gives a gathered frame's buffer back, as [`recycle`] does.
pub(crate) fn recycle_gathered(frame: Gathered) {
    recycle(frame.into_bytes());
}

/// Hands `encode` the frame of a message that needs no reply.
fn broadcast_frame<R>(
    message: &Message,
    frees: &[Reg],
    encode: impl FnOnce(&Frame<AnyView<'_>>) -> Result<R>,
) -> Result<R> {
    if !frees.is_empty() && !matches!(message, Message::Call { .. }) {
        return Err(Error::runtime("only a call carries frees"));
    }
    let frame = match message {
        Message::Call {
            call,
            func,
            out: reg,
            args,
        } => {
            let args = args
                .as_deref()
                .unwrap_or(&[])
                .iter()
                .map(|arg| match arg {
                    Arg::Value(value) => Value::Plain(value.view()),
                    Arg::Register(reg) => Value::Register(*reg),
                })
                .collect();
            Frame::Call {
                call: Some(*call),
                frees: frees.to_vec(),
                func: *func,
                out: *reg,
                args,
            }
        }
        Message::Store(store) => Frame::Store {
            reg: store.reg,
            name: store.name.clone(),
            value: Value::Plain(store.value.view()),
        },
        Message::Free(reg) => Frame::Free { reg: *reg },
        Message::Shutdown => Frame::Shutdown,
        _ => {
            return Err(Error::runtime(
                "a request that waits for a reply goes to one worker",
            ));
        }
    };
    encode(&frame)
}

/// The requests of one worker: their ids, those waiting for replies, and the failure a reply
/// left after its waiter gave up.
pub(crate) struct RequestBook {
    /// Who the worker is, for messages ("worker 2 (pid 4711)").
    who: String,
    next_request: AtomicU64,
    pending: PendingRequests,
    /// A failure a reply carried after its waiter gave up: the next wait reports it, as a
    /// worker thread keeps it for its next sync.
    carried: Mutex<Option<Error>>,
}

impl RequestBook {
    pub fn new(who: String) -> RequestBook {
        RequestBook {
            who,
            next_request: AtomicU64::new(1),
            pending: PendingRequests::default(),
            carried: Mutex::new(None),
        }
    }

    /// Whether no request waits for its reply (an abandoned one's may still bring a failure)
    /// and no failure is carried for the next wait.
    pub fn is_idle(&self) -> bool {
        self.pending.is_empty()
            && self
                .carried
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .is_none()
    }

    /// A fresh request id.
    pub fn next_id(&self) -> u64 {
        self.next_request.fetch_add(1, Ordering::Relaxed)
    }

    /// Sends `message` with `send`, given its frame and whether a reply is waited for: a
    /// request registers how its reply completes it first.
    pub fn send(
        &self,
        message: Message,
        send: impl FnOnce(&[u8], bool) -> Result<()>,
    ) -> Result<()> {
        let (sent, frame) = match self.request(message)? {
            Request::Broadcast(frame) => (send(&frame, false), frame),
            Request::Waits(frame, id, pending) => (
                self.send_request(&frame, id, pending, |frame| send(frame, true)),
                frame,
            ),
        };
        recycle(frame);
        sent
    }

    /// Sends `frame`, request `id`, with `send`, after registering that `pending` completes it
    /// when its reply comes (forgotten again if the send fails).
    pub fn send_request(
        &self,
        frame: &[u8],
        id: u64,
        pending: Pending,
        send: impl FnOnce(&[u8]) -> Result<()>,
    ) -> Result<()> {
        self.pending.insert(id, pending);
        let sent = send(frame);
        if sent.is_err() {
            self.pending.remove(id);
        }
        sent
    }

    /// Fails every request still waiting with `error` (their worker is gone).
    pub fn fail_all(&self, error: &Error) {
        let waiting = std::mem::take(
            &mut *self
                .pending
                .0
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        for (_, pending) in waiting {
            let _ = pending(Err(error.clone()));
        }
    }

    /// The frame of `message`, with a request id and the completion of its reply if it waits
    /// for one.
    fn request(&self, message: Message) -> Result<Request> {
        let id = || self.next_id();
        let mut out = frame_buffer();
        let (id, pending): (u64, Pending) = match message {
            Message::Sync(reply) => {
                let request = id();
                Frame::<Any>::Sync { request }.encode(&mut out)?;
                (request, complete_with(reply, |_| Ok(()), Carry::Failure))
            }
            Message::Get { reg, reply } => {
                let request = id();
                Frame::<Any>::Get { request, reg }.encode(&mut out)?;
                (request, complete_with(reply, Ok, Carry::Nothing))
            }
            Message::CountLive(reply) => {
                let request = id();
                Frame::<Any>::CountLive { request }.encode(&mut out)?;
                let count = |value: Any| {
                    let n = value.view().as_i64()?;
                    usize::try_from(n)
                        .map_err(|_| Error::runtime(format!("a worker counted {n} registers")))
                };
                (request, complete_with(reply, count, Carry::Nothing))
            }
            Message::GetGlobalFunc(lookup) => {
                let GlobalLookup { reg, name, reply } = *lookup;
                let request = id();
                Frame::<Any>::GetGlobalFunc { request, reg, name }.encode(&mut out)?;
                (request, complete_with(reply, |_| Ok(()), Carry::Nothing))
            }
            Message::GetModuleFunc(lookup) => {
                let ModuleLookup {
                    reg,
                    module,
                    name,
                    reply,
                } = *lookup;
                let request = id();
                let frame = Frame::<Any>::GetModuleFunc {
                    request,
                    reg,
                    module,
                    name,
                };
                frame.encode(&mut out)?;
                (request, complete_with(reply, |_| Ok(()), Carry::Nothing))
            }
            Message::Copy {
                reg,
                host,
                direction: CopyDirection::ToWorker,
                reply,
            } => {
                let request = id();
                // SAFETY: the caller keeps the host memory valid until its request is answered;
                // the tensor is read here, while the frame is encoded, and dropped at once.
                let source = unsafe { host.host.borrow_as_tensor() };
                let frame = Frame::CopyToWorker0 {
                    request,
                    reg,
                    source: Value::Plain(Any::from(source)),
                };
                frame.encode(&mut out)?;
                let name = host.name;
                let renamed = move |result: Result<Value>| {
                    result.map_err(|e| {
                        let copy = CopyDirection::ToWorker;
                        let message = e
                            .message
                            .replace(&copy.describe(COPIED_AS), &copy.describe(name));
                        Error::new(e.kind, message)
                    })
                };
                let complete = complete_with(reply, |_| Ok(()), Carry::Nothing);
                (
                    request,
                    Box::new(move |result| complete(renamed(result))) as Pending,
                )
            }
            Message::Copy {
                reg,
                host,
                direction: CopyDirection::FromWorker,
                reply,
            } => {
                let request = id();
                Frame::<Any>::CopyFromWorker0 {
                    request,
                    reg,
                    into: None,
                }
                .encode(&mut out)?;
                (request, copy_back(reply, host))
            }
            message => return Ok(Request::Broadcast(encode_broadcast(&message, &[])?)),
        };
        Ok(Request::Waits(out, id, pending))
    }

    /// Completes the request a reply answers.
    pub fn deliver(&self, frame: Frame) -> Result<()> {
        let (request, result) = match frame {
            Frame::Ok { request, value } => (request, Ok(value)),
            Frame::Err { request, error } => (request, Err(error)),
            other => {
                return Err(Error::runtime(format!(
                    "{} sent a {} frame, not a reply",
                    self.who,
                    other.kind().name()
                )));
            }
        };
        let pending = self.pending.remove(request).ok_or_else(|| {
            Error::runtime(format!(
                "{} replied to request {request}, which nothing waits for",
                self.who
            ))
        })?;
        if let Some(failure) = pending(result) {
            self.carried
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .get_or_insert(failure);
        }
        Ok(())
    }

    /// A reply, after the failure an abandoned sync carried, if any (a worker thread would
    /// still hold it for the next wait).
    pub fn report_carried<T>(&self, value: Result<T>) -> Result<T> {
        let carried = self
            .carried
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        match (carried, value) {
            (None, value) => value,
            (Some(failure), Ok(_)) => Err(failure),
            (Some(mut failure), Err(own)) => {
                failure.message.push_str("; ");
                failure.message.push_str(&own.message);
                Err(failure)
            }
        }
    }
}

/// The requests sent on a link that wait for their reply, with how each reply completes its
/// request. A handful at most (one per waiting thread), so a list: no hashing per request.
#[derive(Default)]
struct PendingRequests(Mutex<Vec<(u64, Pending)>>);

impl PendingRequests {
    pub fn insert(&self, request: u64, pending: Pending) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((request, pending));
    }

    pub fn is_empty(&self) -> bool {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_empty()
    }

    pub fn remove(&self, request: u64) -> Option<Pending> {
        let mut list = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let at = list.iter().position(|(id, _)| *id == request)?;
        Some(list.remove(at).1)
    }
}

/// What sending a message needs.
enum Request {
    /// A frame without a reply.
    Broadcast(Vec<u8>),
    /// A request frame, its id and how its reply completes it.
    Waits(Vec<u8>, u64, Pending),
}

/// A decoded reply's value.
fn value_of(value: Value) -> Result<Any> {
    match value {
        Value::Plain(value) => Ok(value),
        other => Err(Error::runtime(format!(
            "a worker replied with {other:?}, which is no value"
        ))),
    }
}

/// What a reply whose waiter gave up leaves for the next wait.
#[derive(Clone, Copy)]
enum Carry {
    /// The failures since the last sync it reports (a sync's).
    Failure,
    /// Nothing: its failure was its own request's.
    Nothing,
}

/// Completes `reply` with the reply's value turned by `convert`, unless its waiter gave up.
fn complete_with<T: Send + 'static>(
    reply: Reply<T>,
    convert: impl FnOnce(Any) -> Result<T> + Send + 'static,
    carry: Carry,
) -> Pending {
    Box::new(move |result: Result<Value>| {
        if reply.claim() {
            reply.complete(result.and_then(value_of).and_then(convert));
            None
        } else {
            match carry {
                Carry::Failure => result.err(),
                Carry::Nothing => None,
            }
        }
    })
}

/// Completes a copy from worker 0: the tensor the worker sent back goes into the caller's host
/// memory, which is written only while the waiter still waits for it.
fn copy_back(reply: Reply<()>, host: Box<HostCopy>) -> Pending {
    Box::new(move |result: Result<Value>| {
        if !reply.claim() {
            return None;
        }
        let copied = result.and_then(value_of).and_then(|value| {
            let tensor = value.view().as_tensor()?;
            host.host.check_matches(&tensor)?;
            // SAFETY: the waiter keeps the host memory valid while it waits, and it waits (the
            // claim succeeded); the tensor is a compact host copy of the size checked above.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    tensor.data_ptr(),
                    host.host.ptr(),
                    host.host.nbytes(),
                )
            };
            Ok(())
        });
        reply.complete(copied.map_err(|cause| {
            Error::new(
                cause.kind,
                format!("copy of `{}` from worker 0: {}", host.name, cause.message),
            )
        }));
        None
    })
}
