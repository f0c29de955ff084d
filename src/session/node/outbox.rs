//! What the controller has written for one node and not sent yet, and the sending of it.
//!
//! The one idea: two locks. Writers append to a buffer under a lock held only while they copy
//! a message in; whoever sends swaps the whole buffer out under that lock and writes it to the
//! connection under a second lock, which keeps the sends in the order they took their bytes. So
//! a thread writing a call never waits for a system call another thread is in. A message too
//! large to copy goes straight to the connection under the second lock, after what was buffered
//! before it.

use std::io::{self, BufWriter, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::{MutexGuard, PoisonError};

use crate::sync::Mutex;

/// From this length on, a message goes to the connection from its own memory, not copied into
/// the buffer.
pub(super) const DIRECT_FROM: usize = 64 << 10;
/// A writer that finds this much buffered sends it itself, waiting for the connection as a
/// writer to a socket does: what a node is slow to take cannot grow the controller's memory
/// without bound.
pub(super) const MAX_BUFFERED: usize = 1 << 20;

/// The buffer of one connection, and the connection.
pub(super) struct Outbox {
    /// What was written and not sent yet, whole messages only.
    pending: Mutex<Vec<u8>>,
    /// Held while sending.
    sending: Mutex<Sending>,
    /// The same connection, to shut it down without waiting for a send in progress.
    shutter: TcpStream,
}

struct Sending {
    stream: TcpStream,
    /// The buffer the last send wrote, emptied, to trade for `pending` at the next.
    spare: Vec<u8>,
}

impl Outbox {
    pub fn new(stream: TcpStream) -> io::Result<Outbox> {
        Ok(Outbox {
            pending: Mutex::new(Vec::new()),
            shutter: stream.try_clone()?,
            sending: Mutex::new(Sending {
                stream,
                spare: Vec::new(),
            }),
        })
    }

    /// The buffer, locked for appending whole messages.
    pub fn lock(&self) -> MutexGuard<'_, Vec<u8>> {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The buffer, unless another thread holds it.
    pub fn try_lock(&self) -> Option<MutexGuard<'_, Vec<u8>>> {
        self.pending.try_lock().ok()
    }

    /// Sends what was buffered.
    pub fn send(&self) -> io::Result<()> {
        let mut sending = self.sending.lock().unwrap_or_else(PoisonError::into_inner);
        self.send_pending(&mut sending, || ())
    }

    /// Sends what was buffered, then what `write` writes, straight from its memory;
    /// `placed` runs under the buffer's lock, when the message's place among the others is
    /// fixed.
    pub fn send_then(
        &self,
        placed: impl FnOnce(),
        write: impl FnOnce(&mut BufWriter<&TcpStream>) -> io::Result<()>,
    ) -> io::Result<()> {
        let mut sending = self.sending.lock().unwrap_or_else(PoisonError::into_inner);
        self.send_pending(&mut sending, placed)?;
        // Small parts of the message gather; large ones go from where they are.
        let mut out = BufWriter::with_capacity(DIRECT_FROM, &sending.stream);
        let sent = write(&mut out).and_then(|()| out.flush());
        self.shut_down_unless_sent(sent)
    }

    /// Swaps the buffer out, runs `placed` under its lock, and writes what it held.
    fn send_pending(&self, sending: &mut Sending, placed: impl FnOnce()) -> io::Result<()> {
        let Sending { stream, spare } = sending;
        {
            let mut pending = self.lock();
            std::mem::swap(&mut *pending, spare);
            placed();
        }
        let sent = if spare.is_empty() {
            Ok(())
        } else {
            (&*stream).write_all(spare)
        };
        spare.clear();
        self.shut_down_unless_sent(sent)
    }

    /// A failed send shuts the connection down: a part of a message must not be followed by
    /// another.
    fn shut_down_unless_sent(&self, sent: io::Result<()>) -> io::Result<()> {
        if sent.is_err() {
            self.shut_down();
        }
        sent
    }

    /// Shuts the connection down both ways, at once.
    pub fn shut_down(&self) {
        let _ = self.shutter.shutdown(Shutdown::Both);
    }
}
