//! A network namespace joined to this one by a veth pair, for tests and benchmarks whose
//! traffic must cross a real interface: made with `ip`, given 1 ms of delay and 1% loss with
//! `tc netem` where the kernel has it, and removed when dropped.

#![allow(dead_code)] // each user takes its own part of this module

use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

/// A network namespace and the veth pair that joins it to this one; removed when dropped.
pub struct Namespace {
    pub name: String,
    /// The pair's end in this namespace.
    pub host_link: String,
    /// This side's address; the namespace's side is the next one.
    pub host_ip: String,
}

/// Runs `ip` (or `tc`) with `args`; its error output when it fails.
pub fn run(program: &str, args: &[&str]) -> Result<(), String> {
    let output = Command::new(program)
        .args(args)
        .output()
        .map_err(|e| format!("cannot run {program}: {e}"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{program} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
}

impl Namespace {
    /// A namespace of its own for the caller; `None` (the reason printed) where the kernel or
    /// the user may not make one.
    pub fn new() -> Option<Namespace> {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let tag = format!("{}{n}", std::process::id() % 100_000);
        let subnet = format!("10.{}.{}", 100 + (std::process::id() % 100), 1 + n);
        let ns = Namespace {
            name: format!("dvm{tag}"),
            host_link: format!("dvm{tag}h"),
            host_ip: format!("{subnet}.1"),
        };
        if let Err(why) = run("ip", &["netns", "add", &ns.name]) {
            eprintln!("skipped: the kernel refuses a network namespace here ({why})");
            return None;
        }
        let inner = format!("dvm{tag}n");
        let node_ip = format!("{subnet}.2/24");
        let host_ip = format!("{}/24", ns.host_ip);
        let made = run(
            "ip",
            &[
                "link",
                "add",
                &ns.host_link,
                "type",
                "veth",
                "peer",
                "name",
                &inner,
            ],
        )
        .and_then(|()| run("ip", &["link", "set", &inner, "netns", &ns.name]))
        .and_then(|()| run("ip", &["addr", "add", &host_ip, "dev", &ns.host_link]))
        .and_then(|()| run("ip", &["link", "set", &ns.host_link, "up"]))
        .and_then(|()| ns.exec_ip(&["addr", "add", &node_ip, "dev", &inner]))
        .and_then(|()| ns.exec_ip(&["link", "set", &inner, "up"]))
        .and_then(|()| ns.exec_ip(&["link", "set", "lo", "up"]));
        if let Err(why) = made {
            panic!("the namespace was made, but not its link: {why}");
        }
        let netem = [
            "qdisc",
            "add",
            "dev",
            &ns.host_link,
            "root",
            "netem",
            "delay",
            "1ms",
            "loss",
            "1%",
        ];
        if let Err(why) = run("tc", &netem) {
            eprintln!("note: no delay or loss on the link, the kernel has no netem ({why})");
        }
        Some(ns)
    }

    /// A command that runs `program` inside the namespace.
    pub fn command(&self, program: &Path) -> Command {
        let mut command = Command::new("ip");
        command.args(["netns", "exec", &self.name]).arg(program);
        command
    }

    fn exec_ip(&self, args: &[&str]) -> Result<(), String> {
        let mut all = vec!["netns", "exec", &self.name, "ip"];
        all.extend_from_slice(args);
        run("ip", &all)
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        let _ = run("ip", &["netns", "del", &self.name]);
        let _ = run("ip", &["link", "del", &self.host_link]);
    }
}
