//! Who may join a session across machines: a handshake at the start of every connection from a
//! node, in which each side proves that it holds the session's secret. `WIRE.md` ("Joining: the
//! handshake") gives its messages byte by byte: `Hello`, `Challenge`, `Proof`, `Accept`, and
//! for a node that is welcome, `Setup`.
//!
//! The one idea: each side sends a fresh random nonce and answers with HMAC-SHA256, keyed by the
//! secret, over everything said so far and a label of its role. The secret never crosses, a
//! recorded handshake is worth nothing in another (the nonces differ), one side's answer cannot
//! be reflected as the other's (the labels differ), and the controller proves itself first, so a
//! node never answers a stranger.

use std::io::{Read, Write};

use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::{u32_at, u64_at};
use crate::object::{Error, ErrorKind, Result};

/// The variable a session's secret is read from, on the controller and on every node.
pub const TOKEN_VAR: &str = "DISCOVM_SESSION_TOKEN";

/// The handshake's version, in each of its messages (major, minor).
const VERSION: [u8; 2] = [1, 3];
/// Where `Hello` says which minor version of the wire format the node speaks: the controller
/// takes only nodes that speak its own (both ends run the same library).
const WIRE_MINOR_AT: usize = 48;
const NONCE: usize = 32;
/// A rank in `Hello` that leaves the choice to the controller.
const ANY_RANK: u32 = u32::MAX;

const HELLO: usize = 64;
const CHALLENGE: usize = 80;
const PROOF: usize = 48;
const ACCEPT: usize = 48;
/// `Setup`'s fixed part; the names of the modules follow.
const SETUP: usize = 16;
/// The most bytes of module names `Setup` may carry.
const MAX_IMPORTS_LEN: usize = 4096;

type HmacSha256 = Hmac<Sha256>;

/// The session's secret; empty when none was given.
#[derive(Clone)]
pub struct Secret(Vec<u8>);

impl Secret {
    pub fn new(bytes: &[u8]) -> Secret {
        Secret(bytes.to_vec())
    }

    /// The secret in `DISCOVM_SESSION_TOKEN`, or none.
    pub fn from_env() -> Secret {
        Secret(
            std::env::var_os(TOKEN_VAR)
                .map(|token| token.into_encoded_bytes())
                .unwrap_or_default(),
        )
    }

    pub fn is_set(&self) -> bool {
        !self.0.is_empty()
    }

    /// The MAC of `parts`, after `label`.
    fn mac(&self, label: &[u8], parts: &[&[u8]]) -> HmacSha256 {
        let mut mac = HmacSha256::new_from_slice(&self.0).expect("HMAC takes keys of any length");
        mac.update(label);
        for part in parts {
            mac.update(part);
        }
        mac
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.is_set() {
            "Secret(set)"
        } else {
            "Secret(none)"
        })
    }
}

const CONTROLLER_LABEL: &[u8] = b"discovm/1 controller";
const NODE_LABEL: &[u8] = b"discovm/1 node";

/// What a node asks for when it joins.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Join {
    /// The rank it wants (from its arguments or its launcher), or the controller's choice.
    pub rank: Option<u32>,
    /// How many workers it starts.
    pub workers: u32,
}

/// What a node starts its workers with, as the controller chose it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WorkerSetup {
    /// Python modules each worker imports before it serves (dotted names; a trailing `?`: only
    /// where its package is installed).
    pub imports: Vec<String>,
    /// The threads of each worker's OpenMP and BLAS libraries: 0 the node's cores shared among
    /// its workers, -1 the environment's, n that many.
    pub threads_per_worker: i32,
}

/// The controller's answer to a node it authenticated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Welcome {
    pub rank: u32,
    pub num_nodes: u32,
    pub workers_per_node: u32,
    pub num_groups: u32,
    /// The device type of the node's workers (DLPack's: 1 the CPU, 2 CUDA): its worker `i`
    /// runs on device `i` of that type (on the CPU, device 0).
    pub device_type: i32,
    /// The session's bound on waits, in ms (0: none).
    pub timeout_ms: u64,
    /// How often each side must hear from the other, in ms.
    pub heartbeat_ms: u64,
    /// What its workers are started with.
    pub setup: WorkerSetup,
}

/// Why the controller turned an authenticated node away, as `Accept` says it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum Refusal {
    /// The rank it asked for is not one of the session's other nodes (1 ..= num_nodes - 1).
    BadRank = 1,
    /// Another node has that rank, or every rank is taken.
    RankTaken = 2,
    /// It starts another number of workers than the session has per node.
    WrongWorkers = 3,
    /// It speaks another version of the wire format (another version of the library).
    OtherVersion = 4,
}

impl Refusal {
    fn from_code(code: u32) -> Option<Refusal> {
        [
            Refusal::BadRank,
            Refusal::RankTaken,
            Refusal::WrongWorkers,
            Refusal::OtherVersion,
        ]
        .into_iter()
        .find(|r| *r as u32 == code)
    }

    pub fn describe(self) -> &'static str {
        match self {
            Refusal::BadRank => "its rank is not one of the session's other nodes",
            Refusal::RankTaken => "its rank is taken (or every rank is)",
            Refusal::WrongWorkers => "it starts another number of workers than each node has",
            Refusal::OtherVersion => {
                "it runs another version of discovm (its wire format differs from the \
                 controller's)"
            }
        }
    }
}

fn nonce() -> Result<[u8; NONCE]> {
    let mut bytes = [0u8; NONCE];
    let mut filled = 0;
    while filled < NONCE {
        // SAFETY: writes at most the bytes left in `bytes`.
        let n = unsafe { libc::getrandom(bytes[filled..].as_mut_ptr().cast(), NONCE - filled, 0) };
        if n < 0 {
            let error = std::io::Error::last_os_error();
            if error.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(Error::runtime(format!("getrandom failed: {error}")));
        }
        filled += n as usize;
    }
    Ok(bytes)
}

/// A message's header: its magic and the handshake's version, then zeros up to `at`.
fn header(magic: &[u8; 4], out: &mut [u8]) {
    out[..4].copy_from_slice(magic);
    out[4..6].copy_from_slice(&VERSION);
}

/// A failed handshake: a `ValueError` naming what the peer sent.
fn refused(what: impl std::fmt::Display) -> Error {
    Error::value(format!("the handshake failed: {what}"))
}

/// Reads message `name` of `N` bytes and checks its magic, version and zero bytes (bytes 6
/// and 7, and the range `zeros`).
fn read_message<const N: usize>(
    stream: &mut impl Read,
    magic: &[u8; 4],
    name: &str,
    zeros: std::ops::Range<usize>,
) -> Result<[u8; N]> {
    let mut bytes = [0u8; N];
    stream.read_exact(&mut bytes).map_err(|e| {
        let why = match e.kind() {
            std::io::ErrorKind::UnexpectedEof => "the peer closed the connection".to_string(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => {
                "the peer said nothing in time".to_string()
            }
            _ => e.to_string(),
        };
        Error::new(
            ErrorKind::Value,
            format!("the handshake failed reading {name}: {why}"),
        )
    })?;
    if &bytes[..4] != magic {
        return Err(refused(format_args!(
            "{name} should start with {:?}, got bytes {:02x?}",
            String::from_utf8_lossy(magic),
            &bytes[..4]
        )));
    }
    if bytes[4] != VERSION[0] {
        return Err(refused(format_args!(
            "{name} is of handshake version {}.{}, this side speaks {}.{}",
            bytes[4], bytes[5], VERSION[0], VERSION[1]
        )));
    }
    for range in [6..8, zeros] {
        if let Some(i) = range.clone().find(|&i| bytes[i] != 0) {
            return Err(refused(format_args!(
                "{name} has byte {:#04x} at offset {i}, where zeros belong",
                bytes[i]
            )));
        }
    }
    Ok(bytes)
}

fn send(stream: &mut impl Write, bytes: &[u8], name: &str) -> Result<()> {
    stream
        .write_all(bytes)
        .and_then(|()| stream.flush())
        .map_err(|e| Error::value(format!("the handshake failed sending {name}: {e}")))
}

/// The node's side: says who it is, checks that the controller holds the secret, proves that
/// it does too, and returns the controller's welcome.
///
/// Errors: `ValueError` naming what went wrong (the controller's MAC is wrong: it does not hold
/// this secret; a message that is not the handshake's; the connection closed or timed out);
/// `PermissionError` when the controller turned the node away, saying why.
pub fn join(stream: &mut (impl Read + Write), secret: &Secret, join: Join) -> Result<Welcome> {
    let mut hello = [0u8; HELLO];
    header(b"DVMH", &mut hello);
    hello[8..12].copy_from_slice(&join.rank.unwrap_or(ANY_RANK).to_le_bytes());
    hello[12..16].copy_from_slice(&join.workers.to_le_bytes());
    hello[16..48].copy_from_slice(&nonce()?);
    hello[WIRE_MINOR_AT] = crate::wire::VERSION_MINOR;
    send(stream, &hello, "Hello")?;

    let challenge: [u8; CHALLENGE] =
        read_message(stream, b"DVMC", "the controller's Challenge", 8..16)?;
    let expected = secret.mac(CONTROLLER_LABEL, &[&hello, &challenge[16..48]]);
    expected.verify_slice(&challenge[48..80]).map_err(|_| {
        refused(
            "the controller's MAC is wrong: it does not hold this node's secret \
             (DISCOVM_SESSION_TOKEN differs)",
        )
    })?;

    let mut proof = [0u8; PROOF];
    header(b"DVMP", &mut proof);
    let mac = secret.mac(NODE_LABEL, &[&hello, &challenge]).finalize();
    proof[16..48].copy_from_slice(&mac.into_bytes());
    send(stream, &proof, "Proof")?;

    let accept: [u8; ACCEPT] = read_message(stream, b"DVMA", "the controller's Accept", 48..48)?;
    let status = u32_at(&accept, 8);
    if status != 0 {
        let why = Refusal::from_code(status).map_or("an unknown reason", Refusal::describe);
        return Err(Error::new(
            ErrorKind::Other("PermissionError".into()),
            format!("the controller turned this node away (code {status}): {why}"),
        ));
    }
    Ok(Welcome {
        rank: u32_at(&accept, 12),
        num_nodes: u32_at(&accept, 16),
        workers_per_node: u32_at(&accept, 20),
        num_groups: u32_at(&accept, 24),
        device_type: u32_at(&accept, 28) as i32,
        timeout_ms: u64_at(&accept, 32),
        heartbeat_ms: u64_at(&accept, 40),
        setup: read_setup(stream)?,
    })
}

/// Reads the controller's `Setup`, which follows a welcoming `Accept`.
fn read_setup(stream: &mut impl Read) -> Result<WorkerSetup> {
    let setup: [u8; SETUP] = read_message(stream, b"DVMS", "the controller's Setup", 16..16)?;
    let len = u32_at(&setup, 12) as usize;
    if len > MAX_IMPORTS_LEN {
        return Err(refused(format_args!(
            "the controller's Setup names {len} bytes of modules (at most {MAX_IMPORTS_LEN})"
        )));
    }
    let mut names = vec![0u8; len];
    stream.read_exact(&mut names).map_err(|e| {
        refused(format_args!(
            "reading the modules of the controller's Setup: {e}"
        ))
    })?;
    let names = String::from_utf8(names)
        .map_err(|_| refused("the modules of the controller's Setup are not UTF-8"))?;
    Ok(WorkerSetup {
        imports: names
            .split('\n')
            .filter(|n| !n.is_empty())
            .map(str::to_owned)
            .collect(),
        threads_per_worker: u32_at(&setup, 8) as i32,
    })
}

/// The controller's side, up to the verdict: reads the node's `Hello`, proves that it holds
/// the secret, and checks the node's proof; returns what the node asks for, and how to answer.
///
/// Errors: `ValueError` naming what went wrong (the node's MAC is wrong; a message that is not
/// the handshake's; the connection closed or timed out; the node speaks another version of the
/// wire format, which it is told). The caller drops the connection.
pub fn authenticate(stream: &mut (impl Read + Write), secret: &Secret) -> Result<(Join, Answer)> {
    let hello: [u8; HELLO] = read_message(
        stream,
        b"DVMH",
        "the node's Hello",
        WIRE_MINOR_AT + 1..HELLO,
    )?;
    let mut challenge = [0u8; CHALLENGE];
    header(b"DVMC", &mut challenge);
    challenge[16..48].copy_from_slice(&nonce()?);
    let mac = secret
        .mac(CONTROLLER_LABEL, &[&hello, &challenge[16..48]])
        .finalize();
    challenge[48..80].copy_from_slice(&mac.into_bytes());
    send(stream, &challenge, "Challenge")?;

    let proof: [u8; PROOF] = read_message(stream, b"DVMP", "the node's Proof", 8..16)?;
    secret
        .mac(NODE_LABEL, &[&hello, &challenge])
        .verify_slice(&proof[16..48])
        .map_err(|_| refused("the node's MAC is wrong: it does not hold the session's secret"))?;
    let wire = hello[WIRE_MINOR_AT];
    if wire != crate::wire::VERSION_MINOR {
        let _ = Answer.refuse(stream, Refusal::OtherVersion);
        return Err(refused(format_args!(
            "the node speaks wire format {}.{wire}, this controller {}.{} (every node runs \
             the controller's version of discovm)",
            crate::wire::VERSION_MAJOR,
            crate::wire::VERSION_MAJOR,
            crate::wire::VERSION_MINOR
        )));
    }
    let rank = u32_at(&hello, 8);
    let join = Join {
        rank: (rank != ANY_RANK).then_some(rank),
        workers: u32_at(&hello, 12),
    };
    Ok((join, Answer))
}

/// The controller's last message of the handshake (the node proved itself).
pub struct Answer;

impl Answer {
    /// Welcomes the node.
    pub fn welcome(self, stream: &mut impl Write, welcome: &Welcome) -> Result<()> {
        let mut accept = [0u8; ACCEPT];
        header(b"DVMA", &mut accept);
        accept[12..16].copy_from_slice(&welcome.rank.to_le_bytes());
        accept[16..20].copy_from_slice(&welcome.num_nodes.to_le_bytes());
        accept[20..24].copy_from_slice(&welcome.workers_per_node.to_le_bytes());
        accept[24..28].copy_from_slice(&welcome.num_groups.to_le_bytes());
        accept[28..32].copy_from_slice(&welcome.device_type.to_le_bytes());
        accept[32..40].copy_from_slice(&welcome.timeout_ms.to_le_bytes());
        accept[40..48].copy_from_slice(&welcome.heartbeat_ms.to_le_bytes());
        let names = welcome.setup.imports.join("\n");
        if names.len() > MAX_IMPORTS_LEN || welcome.setup.imports.iter().any(|n| n.contains('\n')) {
            return Err(Error::value(format!(
                "the workers' imports {:?} do not fit the handshake (at most {MAX_IMPORTS_LEN} \
                 bytes, no newlines)",
                welcome.setup.imports
            )));
        }
        let mut setup = vec![0u8; SETUP];
        header(b"DVMS", &mut setup);
        setup[8..12].copy_from_slice(&welcome.setup.threads_per_worker.to_le_bytes());
        setup[12..16].copy_from_slice(&(names.len() as u32).to_le_bytes());
        setup.extend_from_slice(names.as_bytes());
        send(stream, &accept, "Accept")?;
        send(stream, &setup, "Setup")
    }

    /// Turns the node away, telling it why.
    pub fn refuse(self, stream: &mut impl Write, why: Refusal) -> Result<()> {
        let mut accept = [0u8; ACCEPT];
        header(b"DVMA", &mut accept);
        accept[8..12].copy_from_slice(&(why as u32).to_le_bytes());
        send(stream, &accept, "Accept")
    }
}

#[cfg(test)]
mod tests {
    use std::net::{TcpListener, TcpStream};
    use std::thread;
    use std::time::Duration;

    use super::*;

    fn pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let node = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (controller, _) = listener.accept().unwrap();
        for s in [&node, &controller] {
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        }
        (node, controller)
    }

    fn welcome() -> Welcome {
        Welcome {
            rank: 1,
            num_nodes: 2,
            workers_per_node: 3,
            num_groups: 1,
            device_type: 2,
            timeout_ms: 1500,
            heartbeat_ms: 2000,
            setup: WorkerSetup {
                imports: vec!["tvm.exec.disco_worker?".into(), "my.functions".into()],
                threads_per_worker: -1,
            },
        }
    }

    /// Runs a handshake between a node holding `node_secret` and a controller holding
    /// `controller_secret` that welcomes whoever proves itself.
    fn handshake(node_secret: &[u8], controller_secret: &[u8]) -> (Result<Welcome>, Result<Join>) {
        let (mut node, mut controller) = pair();
        let secret = Secret::new(controller_secret);
        let server = thread::spawn(move || {
            let (join, answer) = authenticate(&mut controller, &secret)?;
            answer.welcome(&mut controller, &welcome())?;
            Ok(join)
        });
        let joined = join(
            &mut node,
            &Secret::new(node_secret),
            Join {
                rank: Some(1),
                workers: 3,
            },
        );
        drop(node);
        (joined, server.join().unwrap())
    }

    #[test]
    fn both_sides_with_the_secret_join() {
        let (welcome, join) = handshake(b"s3cret", b"s3cret");
        assert_eq!(welcome.unwrap(), self::welcome());
        assert_eq!(
            join.unwrap(),
            Join {
                rank: Some(1),
                workers: 3
            }
        );
        // Without a secret on either side: the empty key.
        let (welcome, _) = handshake(b"", b"");
        assert_eq!(welcome.unwrap(), self::welcome());
    }

    #[test]
    fn a_wrong_secret_fails_on_the_node_before_it_proves_anything() {
        let (welcome, join) = handshake(b"guess", b"s3cret");
        let error = welcome.unwrap_err();
        assert!(
            error.message.contains("the controller's MAC is wrong"),
            "{error}"
        );
        // The node stopped: the controller never got a proof.
        let error = join.unwrap_err();
        assert!(error.message.contains("the node's Proof"), "{error}");
    }

    /// Plays a node by hand: sends a `Hello` with nothing but its header, reads the
    /// `Challenge`, and sends the proof `mac` makes of the two.
    fn prove_by_hand(
        node: &mut TcpStream,
        mac: impl FnOnce(&[u8; HELLO], &[u8; CHALLENGE]) -> [u8; 32],
    ) {
        let mut hello = [0u8; HELLO];
        header(b"DVMH", &mut hello);
        node.write_all(&hello).unwrap();
        let mut challenge = [0u8; CHALLENGE];
        node.read_exact(&mut challenge).unwrap();
        let mut proof = [0u8; PROOF];
        header(b"DVMP", &mut proof);
        proof[16..48].copy_from_slice(&mac(&hello, &challenge));
        node.write_all(&proof).unwrap();
    }

    #[test]
    fn a_node_that_forges_its_proof_is_refused() {
        let (mut node, mut controller) = pair();
        let server = thread::spawn(move || authenticate(&mut controller, &Secret::new(b"k")));
        // Replays the controller's own MAC as its proof (a reflection).
        prove_by_hand(&mut node, |_, challenge| {
            challenge[48..80].try_into().unwrap()
        });
        let error = server.join().unwrap().err().expect("refused");
        assert!(error.message.contains("the node's MAC is wrong"), "{error}");
    }

    #[test]
    fn garbage_a_wrong_version_and_silence_are_refused_with_what_was_wrong() {
        let cases: [(&[u8], &str); 4] = [
            (
                b"GET / HTTP/1.1\r\nHost: x\r\n\r\n0123456789012345678901234567890123",
                "should start with \"DVMH\"",
            ),
            (&[b'D', b'V', b'M', b'H', 9, 0], "version 9.0"),
            (
                &[b'D', b'V', b'M', b'H', 1, 0, 0, 7],
                "byte 0x07 at offset 7",
            ),
            (b"DVMH", "the peer closed the connection"),
        ];
        for (sent, expected) in cases {
            let (mut node, mut controller) = pair();
            let mut bytes = sent.to_vec();
            if bytes.len() > 4 {
                bytes.resize(bytes.len().max(HELLO), 0);
            }
            node.write_all(&bytes).unwrap();
            node.shutdown(std::net::Shutdown::Write).unwrap();
            let error = authenticate(&mut controller, &Secret::new(b"k"))
                .err()
                .expect("refused");
            assert!(error.message.contains(expected), "{expected}: {error}");
        }
        // Silence: the read times out.
        let (_node, mut controller) = pair();
        controller
            .set_read_timeout(Some(Duration::from_millis(50)))
            .unwrap();
        let error = authenticate(&mut controller, &Secret::new(b"k"))
            .err()
            .expect("refused");
        assert!(error.message.contains("said nothing in time"), "{error}");
    }

    #[test]
    fn a_node_of_another_wire_version_is_turned_away_saying_so() {
        let (mut node, mut controller) = pair();
        let secret = Secret::new(b"k");
        let server = thread::spawn(move || authenticate(&mut controller, &secret).err());
        // A node of the previous version: its Hello has a zero where the version goes.
        prove_by_hand(&mut node, |hello, challenge| {
            let mac = Secret::new(b"k").mac(NODE_LABEL, &[hello, challenge]);
            mac.finalize().into_bytes().into()
        });
        let mut accept = [0u8; ACCEPT];
        node.read_exact(&mut accept).unwrap();
        assert_eq!(u32_at(&accept, 8), Refusal::OtherVersion as u32);
        let error = server.join().unwrap().expect("refused");
        let expected = format!(
            "the node speaks wire format 1.0, this controller 1.{}",
            crate::wire::VERSION_MINOR
        );
        assert!(error.message.contains(&expected), "{error}");
        assert!(
            Refusal::OtherVersion
                .describe()
                .contains("another version of discovm")
        );
    }

    #[test]
    fn a_refused_node_learns_why() {
        let (mut node, mut controller) = pair();
        let server = thread::spawn(move || {
            let secret = Secret::new(b"k");
            let (_, answer) = authenticate(&mut controller, &secret).unwrap();
            answer.refuse(&mut controller, Refusal::RankTaken).unwrap();
        });
        let error = join(
            &mut node,
            &Secret::new(b"k"),
            Join {
                rank: None,
                workers: 1,
            },
        )
        .unwrap_err();
        server.join().unwrap();
        assert_eq!(error.kind.name(), "PermissionError");
        assert!(error.message.contains("its rank is taken"), "{error}");
    }
}
