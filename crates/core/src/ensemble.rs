//! The ensemble as zoo.cfg describes it: `server.N` lines and `peerType`
//! (the server crate reads the `myid` file and resolves addresses). Stoa's
//! peer transport uses each server's quorum port; the election port is
//! parsed (so existing files work) and otherwise unused, since raft elects
//! over the same connections.

use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Participant,
    Observer,
}

/// One `server.N=host:quorumPort:electionPort[:role][;[clientAddress:]clientPort]` line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub id: u64,
    pub host: String,
    pub quorum_port: u16,
    pub election_port: u16,
    pub role: Role,
    /// The client address this member announces, when the line has one.
    pub client: Option<(Option<String>, u16)>,
}

impl Role {
    /// As zoo.cfg and ZooKeeper's AdminServer spell it.
    pub fn name(self) -> &'static str {
        match self {
            Role::Participant => "participant",
            Role::Observer => "observer",
        }
    }
}

/// An address as ZooKeeper writes one before a port: IPv6 in brackets.
pub fn delimited_host(host: &str) -> String {
    if host.contains(':') {
        format!("[{host}]")
    } else {
        host.to_string()
    }
}

impl Member {
    /// `address:port` of the client port this member announces (a bare
    /// port shows as `0.0.0.0:port`), when its line has one.
    pub fn client_address(&self) -> Option<String> {
        let (address, port) = self.client.as_ref()?;
        let address = delimited_host(address.as_deref().unwrap_or("0.0.0.0"));
        Some(format!("{address}:{port}"))
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnsembleError(pub String);

impl fmt::Display for EnsembleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for EnsembleError {}

/// Parses the value of a `server.N` key.
pub fn parse_member(id: u64, value: &str) -> Result<Member, EnsembleError> {
    let bad = |why: &str| EnsembleError(format!("server.{id}={value}: {why}"));
    if id == 0 || id >= 255 {
        // The top byte of a session id is the server id, and 0xff marks TTL owners.
        return Err(bad("server ids must be between 1 and 254"));
    }
    let (server_part, client_part) = match value.split_once(';') {
        Some((s, c)) => (s.trim(), Some(c.trim())),
        None => (value.trim(), None),
    };
    let fields: Vec<&str> = split_host_ports(server_part);
    if !(3..=4).contains(&fields.len()) {
        return Err(bad(
            "expected host:quorumPort:electionPort[:participant|:observer]",
        ));
    }
    let port = |s: &str, what: &str| {
        s.parse::<u16>()
            .ok()
            .filter(|&p| p != 0)
            .ok_or_else(|| bad(&format!("bad {what} {s:?}")))
    };
    let role = match fields.get(3).copied() {
        None | Some("participant") => Role::Participant,
        Some("observer") => Role::Observer,
        Some(other) => {
            return Err(bad(&format!(
                "unknown role {other:?} (participant or observer)"
            )))
        }
    };
    let client = match client_part {
        None | Some("") => None,
        Some(c) => match c.rsplit_once(':') {
            Some((addr, p)) => Some((
                Some(addr.trim_matches(['[', ']']).to_string()),
                port(p, "client port")?,
            )),
            None => Some((None, port(c, "client port")?)),
        },
    };
    Ok(Member {
        id,
        host: fields[0].trim_matches(['[', ']']).to_string(),
        quorum_port: port(fields[1], "quorum port")?,
        election_port: port(fields[2], "election port")?,
        role,
        client,
    })
}

/// `host:p1:p2[:role]` where host may be a bracketed IPv6 address.
fn split_host_ports(s: &str) -> Vec<&str> {
    if let Some(rest) = s.strip_prefix('[') {
        if let Some((host, tail)) = rest.split_once(']') {
            let mut out = vec![host];
            out.extend(tail.trim_start_matches(':').split(':'));
            return out;
        }
    }
    s.split(':').collect()
}

/// This server's place in an ensemble.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ensemble {
    pub me: Member,
    /// Raft voters: the participants.
    pub voters: Vec<u64>,
    /// Raft learners: the observers.
    pub learners: Vec<u64>,
    pub members: Vec<Member>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_form_zoo_cfg_allows() {
        let m = parse_member(1, "zk1.example:2888:3888").unwrap();
        assert_eq!(
            (m.host.as_str(), m.quorum_port, m.election_port, m.role),
            ("zk1.example", 2888, 3888, Role::Participant)
        );
        assert_eq!(m.client, None);
        let m = parse_member(4, "10.0.0.4:2888:3888:observer;2181").unwrap();
        assert_eq!(
            (m.role, m.client.clone()),
            (Role::Observer, Some((None, 2181)))
        );
        let m = parse_member(2, "127.0.0.1:2889:3889:participant;0.0.0.0:2182").unwrap();
        assert_eq!(m.client, Some((Some("0.0.0.0".into()), 2182)));
        let m = parse_member(3, "[::1]:2890:3890").unwrap();
        assert_eq!((m.host.as_str(), m.quorum_port), ("::1", 2890));
    }

    #[test]
    fn refuses_malformed_lines_with_the_line_in_the_message() {
        for (id, bad) in [
            (1, "host:2888"),
            (1, "host:x:3888"),
            (1, "host:2888:3888:leader"),
            (0, "h:1:2"),
            (255, "h:1:2"),
        ] {
            let e = parse_member(id, bad).unwrap_err();
            assert!(e.0.contains(&format!("server.{id}")), "{e}");
        }
    }
}
