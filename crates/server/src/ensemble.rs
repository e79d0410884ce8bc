//! What the ensemble needs from the machine: the `myid` file in dataDir and
//! members' quorum addresses resolved (the parsing itself is pure and lives
//! in `stoa_core::ensemble`).

use std::net::SocketAddr;
use std::path::Path;

pub use stoa_core::ensemble::*;

/// Resolves a member's quorum address (a DNS lookup for a host name).
pub fn quorum_address(member: &Member) -> Result<SocketAddr, EnsembleError> {
    use std::net::ToSocketAddrs;
    (member.host.as_str(), member.quorum_port)
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .ok_or_else(|| {
            EnsembleError(format!(
                "server.{}: cannot resolve {}",
                member.id, member.host
            ))
        })
}

/// Reads `<dataDir>/myid` as ZooKeeper does: one decimal number.
pub fn read_myid(data_dir: &Path) -> Result<Option<u64>, EnsembleError> {
    let path = data_dir.join("myid");
    match std::fs::read_to_string(&path) {
        Ok(text) => text.trim().parse().map(Some).map_err(|_| {
            EnsembleError(format!(
                "{}: expected a server id, got {:?}",
                path.display(),
                text.trim()
            ))
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(EnsembleError(format!(
            "cannot read {}: {e}",
            path.display()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn myid_is_read_from_the_data_dir() {
        let dir = std::env::temp_dir().join(format!("stoa-myid-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        assert_eq!(read_myid(&dir).unwrap(), None);
        std::fs::write(dir.join("myid"), "3\n").unwrap();
        assert_eq!(read_myid(&dir).unwrap(), Some(3));
        std::fs::write(dir.join("myid"), "three").unwrap();
        assert!(read_myid(&dir).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
