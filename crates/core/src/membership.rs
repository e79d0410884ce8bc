//! The ensemble's membership as the replicated `/zookeeper/config` node
//! holds it, in ZooKeeper's dynamic-configuration text
//! (`server.N=host:quorumPort:electionPort:role;clientAddress:clientPort`
//! lines, then `version=<hex zxid>`), and the `reconfig` arithmetic on it.
//!
//! A reconfig becomes one raft configuration change of every server it
//! changes ([`Membership::changes_to`]); raft-rs makes a change of several
//! servers a joint configuration, which `/zookeeper/config` never records:
//! it holds the old membership until the change applies, then the new one.

use std::collections::BTreeMap;

use raft::eraftpb::{ConfChangeSingle, ConfChangeType};
use stoa_proto::codes::ErrorCode;
use stoa_proto::records::ReconfigRequest;

use crate::ensemble::{parse_member, Member, Role};

/// Who is in the ensemble, and the zxid of the transaction that said so
/// (0 for the configuration files the ensemble started from).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Membership {
    pub members: BTreeMap<u64, Member>,
    pub version: i64,
}

/// A reconfig refused: the code the client gets and why, for the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub code: ErrorCode,
    pub reason: String,
}

fn refuse(code: ErrorCode, reason: impl Into<String>) -> Refusal {
    Refusal {
        code,
        reason: reason.into(),
    }
}

impl Membership {
    pub fn new(members: impl IntoIterator<Item = Member>, version: i64) -> Membership {
        Membership {
            members: members.into_iter().map(|m| (m.id, m)).collect(),
            version,
        }
    }

    fn ids_with(&self, role: Role) -> Vec<u64> {
        self.members
            .values()
            .filter(|m| m.role == role)
            .map(|m| m.id)
            .collect()
    }

    pub fn voters(&self) -> Vec<u64> {
        self.ids_with(Role::Participant)
    }

    pub fn learners(&self) -> Vec<u64> {
        self.ids_with(Role::Observer)
    }

    pub fn role_of(&self, id: u64) -> Option<Role> {
        self.members.get(&id).map(|m| m.role)
    }

    /// The text of `/zookeeper/config`.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for m in self.members.values() {
            out.push_str(&format!("server.{}={}\n", m.id, member_spec(m)));
        }
        out.push_str(&format!("version={:x}", self.version));
        out
    }

    /// Reads `/zookeeper/config`; `Ok(None)` for the empty node of a
    /// standalone server or of an ensemble that has not published yet.
    pub fn parse(text: &str) -> Result<Option<Membership>, String> {
        let mut members = Vec::new();
        let mut version = None;
        for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
            let (key, value) = line
                .split_once('=')
                .ok_or_else(|| format!("config line without '=': {line:?}"))?;
            if key == "version" {
                let v = i64::from_str_radix(value.trim(), 16)
                    .map_err(|_| format!("bad config version {value:?}"))?;
                version = Some(v);
            } else {
                members.push(parse_server(key, value).map_err(|r| r.reason)?);
            }
        }
        if members.is_empty() {
            return Ok(None);
        }
        Ok(Some(Membership::new(members, version.unwrap_or(0))))
    }

    /// The membership a `reconfig` request asks for (its version still the
    /// current one: the caller stamps the transaction's zxid).
    pub fn reconfigure(&self, request: &ReconfigRequest) -> Result<Membership, Refusal> {
        if request.cur_config_id != -1 && request.cur_config_id != self.version {
            return Err(refuse(
                ErrorCode::BadVersion,
                format!(
                    "the configuration is version {:x}, not {:x}",
                    self.version, request.cur_config_id
                ),
            ));
        }
        let joining = list(&request.joining_servers);
        let leaving = list(&request.leaving_servers);
        let new_members = list(&request.new_members);
        let next = if !new_members.is_empty() {
            if !joining.is_empty() || !leaving.is_empty() {
                return Err(refuse(
                    ErrorCode::BadArguments,
                    "a reconfig gives either new members or joining/leaving servers, not both",
                ));
            }
            let mut members = Vec::new();
            for spec in new_members {
                members.push(parse_spec(spec)?);
            }
            Membership::new(members, self.version)
        } else {
            if joining.is_empty() && leaving.is_empty() {
                return Err(refuse(
                    ErrorCode::BadArguments,
                    "the reconfig changes nothing",
                ));
            }
            let mut next = self.clone();
            for id in leaving {
                let id: u64 = id.parse().map_err(|_| {
                    refuse(ErrorCode::BadArguments, format!("bad server id {id:?}"))
                })?;
                if next.members.remove(&id).is_none() {
                    return Err(refuse(
                        ErrorCode::BadArguments,
                        format!("server {id} is not in the ensemble"),
                    ));
                }
            }
            for spec in joining {
                let m = parse_spec(spec)?;
                next.members.insert(m.id, m);
            }
            next
        };
        if next.voters().is_empty() {
            return Err(refuse(
                ErrorCode::BadArguments,
                "the new configuration has no participant",
            ));
        }
        Ok(next)
    }

    /// The raft changes from `self` to `next`; empty when only addresses
    /// (or nothing) changed.
    pub fn changes_to(&self, next: &Membership) -> Vec<ConfChangeSingle> {
        let change = |id: u64, kind: ConfChangeType| {
            let mut c = ConfChangeSingle {
                node_id: id,
                ..Default::default()
            };
            c.set_change_type(kind);
            c
        };
        let mut changes = Vec::new();
        for (&id, m) in &self.members {
            if !next.members.contains_key(&id) {
                changes.push(change(id, ConfChangeType::RemoveNode));
            } else if next.role_of(id) != Some(m.role) {
                let kind = match next.role_of(id) {
                    Some(Role::Observer) => ConfChangeType::AddLearnerNode,
                    _ => ConfChangeType::AddNode,
                };
                changes.push(change(id, kind));
            }
        }
        for (&id, m) in &next.members {
            if !self.members.contains_key(&id) {
                let kind = match m.role {
                    Role::Observer => ConfChangeType::AddLearnerNode,
                    Role::Participant => ConfChangeType::AddNode,
                };
                changes.push(change(id, kind));
            }
        }
        changes
    }
}

/// `host:quorumPort:electionPort:role;clientAddress:clientPort`, the form
/// ZooKeeper writes (a bare client port shows as `0.0.0.0:port`).
fn member_spec(m: &Member) -> String {
    let host = crate::ensemble::delimited_host(&m.host);
    let role = m.role.name();
    let mut spec = format!("{host}:{}:{}:{role}", m.quorum_port, m.election_port);
    if let Some(client) = m.client_address() {
        spec.push_str(&format!(";{client}"));
    }
    spec
}

/// Comma-separated items of a reconfig field, blanks dropped.
fn list(field: &str) -> Vec<&str> {
    field
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect()
}

/// `server.N=spec` from a reconfig request.
fn parse_spec(item: &str) -> Result<Member, Refusal> {
    let (key, value) = item.split_once('=').ok_or_else(|| {
        refuse(
            ErrorCode::BadArguments,
            format!("expected server.N=host:port:port[:role][;client], got {item:?}"),
        )
    })?;
    parse_server(key.trim(), value.trim())
}

fn parse_server(key: &str, value: &str) -> Result<Member, Refusal> {
    let id: u64 = key
        .strip_prefix("server.")
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| refuse(ErrorCode::BadArguments, format!("bad server key {key:?}")))?;
    parse_member(id, value).map_err(|e| refuse(ErrorCode::BadArguments, e.0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn member(id: u64, role: Role) -> Member {
        Member {
            id,
            host: "127.0.0.1".into(),
            quorum_port: 2000 + id as u16,
            election_port: 3000 + id as u16,
            role,
            client: Some((Some("127.0.0.1".into()), 4000 + id as u16)),
        }
    }

    fn three() -> Membership {
        Membership::new(
            (1..=3).map(|id| member(id, Role::Participant)),
            0x1_0000_0002,
        )
    }

    fn request(joining: &str, leaving: &str, new_members: &str, from: i64) -> ReconfigRequest {
        ReconfigRequest {
            joining_servers: joining.into(),
            leaving_servers: leaving.into(),
            new_members: new_members.into(),
            cur_config_id: from,
        }
    }

    #[test]
    fn renders_zookeepers_dynamic_config_text() {
        let mut m = three();
        m.members.get_mut(&3).unwrap().role = Role::Observer;
        m.members.get_mut(&2).unwrap().client = Some((Some("::1".into()), 2182));
        m.members.get_mut(&3).unwrap().client = Some((None, 2183));
        assert_eq!(
            m.render(),
            "server.1=127.0.0.1:2001:3001:participant;127.0.0.1:4001\n\
             server.2=127.0.0.1:2002:3002:participant;[::1]:2182\n\
             server.3=127.0.0.1:2003:3003:observer;0.0.0.0:2183\n\
             version=100000002"
        );
    }

    #[test]
    fn parse_reads_what_render_writes_and_empty_is_none() {
        let m = three();
        assert_eq!(Membership::parse(&m.render()).unwrap(), Some(m));
        assert_eq!(Membership::parse("").unwrap(), None);
        assert!(Membership::parse("server.1=nonsense").is_err());
        assert!(Membership::parse("version=zz\nserver.1=h:1:2").is_err());
    }

    #[test]
    fn incremental_add_remove_and_role_change() {
        let m = three();
        let add = m
            .reconfigure(&request(
                "server.4=127.0.0.1:2004:3004:participant;4004",
                "",
                "",
                -1,
            ))
            .unwrap();
        assert_eq!(add.voters(), vec![1, 2, 3, 4]);
        assert_eq!(m.changes_to(&add).len(), 1);
        let remove = add.reconfigure(&request("", "1", "", -1)).unwrap();
        assert_eq!(remove.voters(), vec![2, 3, 4]);
        let demote = m
            .reconfigure(&request(
                "server.3=127.0.0.1:2003:3003:observer",
                "",
                "",
                -1,
            ))
            .unwrap();
        assert_eq!((demote.voters(), demote.learners()), (vec![1, 2], vec![3]));
        let c = m.changes_to(&demote);
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].get_change_type(), ConfChangeType::AddLearnerNode);
        let observer = m
            .reconfigure(&request("server.5=h:1:2:observer", "", "", -1))
            .unwrap();
        assert_eq!(
            (observer.voters(), observer.learners()),
            (vec![1, 2, 3], vec![5])
        );
        // Two servers at once: accepted, two raft changes.
        let two = m
            .reconfigure(&request("server.5=h:1:2:observer", "3", "", -1))
            .unwrap();
        assert_eq!((two.voters(), two.learners()), (vec![1, 2], vec![5]));
        assert_eq!(m.changes_to(&two).len(), 2);
    }

    #[test]
    fn address_only_change_needs_no_raft_step() {
        let m = three();
        let moved = m
            .reconfigure(&request(
                "server.2=10.0.0.2:2002:3002:participant",
                "",
                "",
                -1,
            ))
            .unwrap();
        assert!(m.changes_to(&moved).is_empty());
        assert_ne!(moved, m);
    }

    #[test]
    fn refusals_carry_zookeepers_codes() {
        let m = three();
        let code = |r: ReconfigRequest| m.reconfigure(&r).unwrap_err().code;
        assert_eq!(code(request("", "1", "", 5)), ErrorCode::BadVersion);
        assert_eq!(code(request("", "", "", -1)), ErrorCode::BadArguments);
        assert_eq!(code(request("", "9", "", -1)), ErrorCode::BadArguments);
        assert_eq!(code(request("", "x", "", -1)), ErrorCode::BadArguments);
        assert_eq!(
            code(request("garbage", "", "", -1)),
            ErrorCode::BadArguments
        );
        assert_eq!(
            code(request("server.4=h:1:2", "", "server.1=h:1:2", -1)),
            ErrorCode::BadArguments
        );
        // Removing every participant leaves no quorum at all.
        let one = Membership::new([member(1, Role::Participant)], 0);
        assert_eq!(
            one.reconfigure(&request("", "1", "", -1)).unwrap_err().code,
            ErrorCode::BadArguments
        );
        // The version the client read is accepted.
        assert!(m.reconfigure(&request("", "1", "", m.version)).is_ok());
    }

    #[test]
    fn non_incremental_new_members() {
        let m = three();
        let text = "server.1=127.0.0.1:2001:3001:participant;4001,\
                    server.2=127.0.0.1:2002:3002:participant;4002";
        let next = m.reconfigure(&request("", "", text, -1)).unwrap();
        assert_eq!(next.voters(), vec![1, 2]);
        let c = m.changes_to(&next);
        assert_eq!(c.len(), 1);
        assert_eq!(
            (c[0].node_id, c[0].get_change_type()),
            (3, ConfChangeType::RemoveNode)
        );
    }

    fn arb_membership() -> impl Strategy<Value = Membership> {
        prop::collection::btree_map(1u64..8, any::<bool>(), 1..7).prop_map(|roles| {
            let members = roles.into_iter().map(|(id, observer)| {
                member(
                    id,
                    if observer {
                        Role::Observer
                    } else {
                        Role::Participant
                    },
                )
            });
            Membership::new(members, 0)
        })
    }

    /// Generating and then rejecting memberships without a participant
    /// threw away a third of the cases, enough to abort larger runs.
    fn with_a_participant(mut m: Membership) -> Membership {
        if m.voters().is_empty() {
            if let Some(first) = m.members.values_mut().next() {
                first.role = Role::Participant;
            }
        }
        m
    }

    proptest! {
        /// Applying `changes_to` to the old voters/learners yields exactly
        /// the new ones, and an accepted reconfig moves one voter at most.
        #[test]
        fn changes_lead_from_one_membership_to_the_other(a in arb_membership(), b in arb_membership()) {
            let mut voters: std::collections::BTreeSet<u64> = a.voters().into_iter().collect();
            let mut learners: std::collections::BTreeSet<u64> = a.learners().into_iter().collect();
            for c in a.changes_to(&b) {
                voters.remove(&c.node_id);
                learners.remove(&c.node_id);
                match c.get_change_type() {
                    ConfChangeType::AddNode => { voters.insert(c.node_id); }
                    ConfChangeType::AddLearnerNode => { learners.insert(c.node_id); }
                    ConfChangeType::RemoveNode => {}
                }
            }
            prop_assert_eq!(voters.into_iter().collect::<Vec<_>>(), b.voters());
            prop_assert_eq!(learners.into_iter().collect::<Vec<_>>(), b.learners());
            let text: Vec<String> = b.members.values()
                .map(|m| format!("server.{}={}", m.id, member_spec(m))).collect();
            match a.reconfigure(&request("", "", &text.join(","), -1)) {
                Ok(next) => prop_assert_eq!(&next.members, &b.members),
                Err(r) => {
                    prop_assert_eq!(r.code, ErrorCode::BadArguments);
                    prop_assert!(b.voters().is_empty());
                }
            }
        }

        /// Raft-rs accepts the changes as one configuration change
        /// (joint when there are several) and, once it leaves the joint
        /// configuration, runs exactly the target's participants and
        /// observers.
        #[test]
        fn raft_takes_the_changes_at_once(
            a in arb_membership().prop_map(with_a_participant),
            b in arb_membership().prop_map(with_a_participant),
        ) {
            let conf = raft::eraftpb::ConfState::from((a.voters(), a.learners()));
            let store = raft::storage::MemStorage::new_with_conf_state(conf);
            let config = raft::Config { id: 99, ..Default::default() };
            let logger = slog::Logger::root(slog::Discard, slog::o!());
            let mut node = raft::RawNode::new(&config, store, &logger).unwrap();
            let changes = a.changes_to(&b);
            // No change at all would read as leaving a joint configuration:
            // the engine proposes only the transaction then.
            prop_assume!(!changes.is_empty());
            let several = changes.len() > 1;
            let cc = raft::eraftpb::ConfChangeV2 { changes: changes.into(), ..Default::default() };
            let mut state = node.apply_conf_change(&cc).unwrap();
            prop_assert_eq!(several, !state.voters_outgoing.is_empty());
            prop_assert_eq!(several, state.auto_leave);
            if several {
                let leave = raft::eraftpb::ConfChangeV2::default();
                prop_assert!(leave.leave_joint());
                state = node.apply_conf_change(&leave).unwrap();
            }
            let sorted = |mut ids: Vec<u64>| { ids.sort_unstable(); ids };
            prop_assert_eq!(sorted(state.voters), b.voters());
            prop_assert_eq!(sorted(state.learners), b.learners());
            prop_assert!(state.voters_outgoing.is_empty() && state.learners_next.is_empty());
        }
    }
}
