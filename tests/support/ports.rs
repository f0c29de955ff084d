//! A TCP port that nothing listens on, for a test to hand to a session and its nodes.
//!
//! The port is found by binding a socket that never listens. A listening socket outlives its
//! close in every child process started at that moment, until the child's exec closes its copy:
//! a node connecting then is accepted by that copy, then reset. A socket that never listened
//! refuses the connection, which a node retries, and being bound with `SO_REUSEADDR` it does not
//! keep the session's listener from binding the port.

use std::net::Ipv4Addr;

/// A port on `ip` (an IPv4 address of this machine) that was free a moment ago.
pub fn free_port(ip: &str) -> u16 {
    let ip: Ipv4Addr = ip.parse().expect("an IPv4 address");
    // SAFETY: plain socket calls on a descriptor this function creates and closes; `address`
    // and `one` outlive the calls that read or write them, with their sizes passed alongside.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        assert!(fd >= 0, "socket: {}", std::io::Error::last_os_error());
        let one: libc::c_int = 1;
        let mut address: libc::sockaddr_in = std::mem::zeroed();
        address.sin_family = libc::AF_INET as libc::sa_family_t;
        address.sin_addr.s_addr = u32::from(ip).to_be();
        let mut length = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        let found = libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_REUSEADDR,
            (&raw const one).cast(),
            std::mem::size_of_val(&one) as libc::socklen_t,
        ) == 0
            && libc::bind(fd, (&raw const address).cast(), length) == 0
            && libc::getsockname(fd, (&raw mut address).cast(), &mut length) == 0;
        let error = std::io::Error::last_os_error();
        libc::close(fd);
        assert!(found, "finding a free port on {ip}: {error}");
        u16::from_be(address.sin_port)
    }
}
