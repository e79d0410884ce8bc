//! The mount table: which ensemble owns which part of the composed tree.
//!
//! Syntax, one mount per entry, entries separated by `;` or newlines, `#`
//! starting a comment that runs to the end of the line:
//!
//! ```text
//! /eu=h1:2181,h2:2181          # served by the EU ensemble
//! /us=h3:2181;/zk=h4:2181!write
//! ```
//!
//! An entry is `PREFIX=HOSTS[!MODE]`: `PREFIX` an absolute path without a
//! trailing `/` (`/` itself mounts the whole tree as a fallback), `HOSTS` a
//! ZooKeeper connection string, and `MODE` how the composed client makes
//! the ensemble linearize before a read ([`SyncMode`]): `sync` (the
//! default), `write`, or `write:NODE` to write another node than
//! [`DEFAULT_SYNC_NODE`].

use std::fmt;
use std::path::Path;

use crate::error::Error;
use crate::path::validate_path;

/// How the composed client makes an ensemble "read from the present" before
/// the first read after switching to it (the paper's injected sync).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncMode {
    /// The ensemble's own `sync`. On Stoa it goes through the leader's log,
    /// so it is linearizable.
    Sync,
    /// A no-op write: `setData` with version -1 on the mount's sync node
    /// ([`Mount::sync_node`]), which the client creates when it connects.
    /// For Apache ZooKeeper, whose `sync` is not linearizable.
    Write,
}

/// The node [`SyncMode::Write`] writes to unless the table names another:
/// at the ensemble's root, outside every mount, so no composed read lists
/// it (the Python composed client's default too).
pub const DEFAULT_SYNC_NODE: &str = "/.stoa-compose-sync";

/// One ensemble and the subtree it owns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    /// Absolute path without a trailing `/` (or `/` itself).
    pub prefix: String,
    /// The ensemble's connection string, as for [`crate::Client::connect`].
    pub hosts: String,
    pub sync_mode: SyncMode,
    /// The node [`SyncMode::Write`] writes to (unused in `Sync` mode).
    pub sync_node: String,
}

impl Mount {
    /// Whether `path` lies in this mount's subtree, compared by whole
    /// components: `/eu` owns `/eu` and `/eu/x`, not `/europe`.
    pub fn owns(&self, path: &str) -> bool {
        self.prefix == "/"
            || path
                .strip_prefix(self.prefix.as_str())
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
    }
}

/// The parsed mount table. Routes a path to the mount with the longest
/// prefix that owns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MountTable {
    mounts: Vec<Mount>,
}

impl MountTable {
    /// Parses the table syntax (see the module documentation).
    pub fn parse(text: &str) -> Result<MountTable, Error> {
        let mut mounts: Vec<Mount> = Vec::new();
        for (line_index, line) in text.lines().enumerate() {
            let line = line.split_once('#').map_or(line, |(before, _)| before);
            for entry in line.split(';').map(str::trim).filter(|e| !e.is_empty()) {
                let mount = parse_entry(entry)
                    .map_err(|why| bad_table(format!("line {}: {why}", line_index + 1)))?;
                if mounts.iter().any(|m| m.prefix == mount.prefix) {
                    return Err(bad_table(format!(
                        "line {}: prefix {} is mounted twice",
                        line_index + 1,
                        mount.prefix
                    )));
                }
                mounts.push(mount);
            }
        }
        if mounts.is_empty() {
            return Err(bad_table("no mounts".to_owned()));
        }
        Ok(MountTable { mounts })
    }

    /// Reads and parses a mount table file.
    pub fn from_file(path: &Path) -> Result<MountTable, Error> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            Error::InvalidArgument(format!("cannot read mount table {}: {e}", path.display()))
        })?;
        MountTable::parse(&text)
            .map_err(|e| Error::InvalidArgument(format!("in mount table {}: {e}", path.display())))
    }

    /// The mounts, in the order the table lists them.
    pub fn mounts(&self) -> &[Mount] {
        &self.mounts
    }

    /// The index (into [`MountTable::mounts`]) of the mount that owns
    /// `path`: the longest owning prefix. `None` when no mount owns it.
    pub fn route(&self, path: &str) -> Option<usize> {
        self.mounts
            .iter()
            .enumerate()
            .filter(|(_, mount)| mount.owns(path))
            .max_by_key(|(_, mount)| mount.prefix.len())
            .map(|(index, _)| index)
    }

    /// The same table with each mount's connection string replaced by
    /// `hosts(mount)`: a load generator starts each session at another
    /// member of every ensemble.
    pub fn with_hosts(&self, hosts: impl Fn(&Mount) -> String) -> MountTable {
        let mounts = self.mounts.iter().map(|mount| Mount {
            hosts: hosts(mount),
            ..mount.clone()
        });
        MountTable {
            mounts: mounts.collect(),
        }
    }

    /// Every prefix, for error messages.
    pub(crate) fn prefixes(&self) -> String {
        let prefixes: Vec<&str> = self.mounts.iter().map(|m| m.prefix.as_str()).collect();
        prefixes.join(", ")
    }
}

impl std::str::FromStr for MountTable {
    type Err = Error;

    /// As [`MountTable::parse`].
    fn from_str(text: &str) -> Result<MountTable, Error> {
        MountTable::parse(text)
    }
}

impl fmt::Display for MountTable {
    /// The table in its own syntax, one mount per line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for mount in &self.mounts {
            match mount.sync_mode {
                SyncMode::Sync => writeln!(f, "{}={}!sync", mount.prefix, mount.hosts)?,
                SyncMode::Write => writeln!(
                    f,
                    "{}={}!write:{}",
                    mount.prefix, mount.hosts, mount.sync_node
                )?,
            }
        }
        Ok(())
    }
}

fn bad_table(why: String) -> Error {
    Error::InvalidArgument(format!("bad mount table: {why}"))
}

fn parse_entry(entry: &str) -> Result<Mount, String> {
    let (prefix, rest) = entry
        .split_once('=')
        .ok_or_else(|| format!("{entry:?} is not PREFIX=HOSTS"))?;
    let prefix = prefix.trim();
    let (hosts, mode) = match rest.split_once('!') {
        Some((hosts, mode)) => (hosts.trim(), Some(mode.trim())),
        None => (rest.trim(), None),
    };
    if prefix.is_empty() {
        return Err(format!("empty prefix in {entry:?}"));
    }
    if !prefix.starts_with('/') {
        return Err(format!("prefix {prefix:?} does not start with '/'"));
    }
    if prefix.len() > 1 && prefix.ends_with('/') {
        return Err(format!("prefix {prefix:?} ends with '/'"));
    }
    validate_path(prefix, false).map_err(|e| format!("prefix {prefix:?}: {e}"))?;
    if hosts.split(',').all(|host| host.trim().is_empty()) {
        return Err(format!("no hosts for prefix {prefix}"));
    }
    if hosts.split(',').any(|host| host.trim().is_empty()) {
        return Err(format!("empty host in {hosts:?} for prefix {prefix}"));
    }
    let (sync_mode, sync_node) = match mode.map(|m| m.split_once(':').unwrap_or((m, ""))) {
        None | Some(("sync", "")) => (SyncMode::Sync, DEFAULT_SYNC_NODE),
        Some(("write", "")) => (SyncMode::Write, DEFAULT_SYNC_NODE),
        Some(("write", node)) => {
            let node = node.trim();
            validate_path(node, false).map_err(|e| format!("sync node {node:?}: {e}"))?;
            if node == "/" {
                return Err(format!("the sync node of {prefix} cannot be /"));
            }
            (SyncMode::Write, node)
        }
        Some(_) => {
            return Err(format!(
                "unknown sync mode {:?} for prefix {prefix} (sync, write or write:NODE)",
                mode.unwrap_or_default()
            ))
        }
    };
    Ok(Mount {
        prefix: prefix.to_owned(),
        hosts: hosts.to_owned(),
        sync_mode,
        sync_node: sync_node.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn error_of(text: &str) -> String {
        MountTable::parse(text).unwrap_err().to_string()
    }

    #[test]
    fn parses_inline_and_file_syntax_alike() {
        let inline = MountTable::parse("/eu=h1:2181,h2:2181;/us=h3:2181!write").unwrap();
        let file = MountTable::parse(
            "# two regions\n/eu = h1:2181,h2:2181   # EU\n\n  /us=h3:2181 ! write\n",
        )
        .unwrap();
        assert_eq!(inline, file);
        assert_eq!(
            inline.mounts()[0],
            Mount {
                prefix: "/eu".into(),
                hosts: "h1:2181,h2:2181".into(),
                sync_mode: SyncMode::Sync,
                sync_node: DEFAULT_SYNC_NODE.into(),
            }
        );
        assert_eq!(inline.mounts()[1].sync_mode, SyncMode::Write);
        assert_eq!(MountTable::parse(&inline.to_string()).unwrap(), inline);
    }

    #[test]
    fn new_hosts_keep_every_prefix_and_sync_mode() {
        let table = MountTable::parse("/eu=h1:2181,h2:2181;/us=h3:2181!write:/s").unwrap();
        let moved = table.with_hosts(|mount| format!("{}-x:1", &mount.prefix[1..]));
        assert_eq!(moved.to_string(), "/eu=eu-x:1!sync\n/us=us-x:1!write:/s\n");
        assert_eq!(table.mounts()[0].hosts, "h1:2181,h2:2181");
    }

    #[test]
    fn reads_a_table_file_and_names_it_in_errors() {
        let dir = std::env::temp_dir().join(format!("stoa-mount-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let good = dir.join("good");
        std::fs::write(&good, "# regions\n/eu=h1:2181\n/us=h2:2181!write\n").unwrap();
        let table = MountTable::from_file(&good).unwrap();
        assert_eq!(table.mounts().len(), 2);
        let bad = dir.join("bad");
        std::fs::write(&bad, "/eu=h1:2181\n/eu/=h2:2181\n").unwrap();
        let error = MountTable::from_file(&bad).unwrap_err().to_string();
        assert!(error.contains("bad") && error.contains("line 2"), "{error}");
        let missing = MountTable::from_file(&dir.join("missing")).unwrap_err();
        assert!(missing.to_string().contains("cannot read mount table"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn bad_tables_say_what_is_wrong() {
        assert!(error_of("=h:1").contains("empty prefix"));
        assert!(error_of("eu=h:1").contains("does not start with '/'"));
        assert!(error_of("/eu/=h:1").contains("ends with '/'"));
        assert!(error_of("/eu=h:1;/eu=h:2").contains("/eu is mounted twice"));
        assert!(error_of("/eu=").contains("no hosts for prefix /eu"));
        assert!(error_of("/eu= , ").contains("no hosts"));
        assert!(error_of("/eu=h:1,,h:2").contains("empty host"));
        assert!(error_of("/eu=h:1!fast").contains("unknown sync mode"));
        assert!(error_of("/eu").contains("not PREFIX=HOSTS"));
        assert!(error_of("/a//b=h:1").contains("/a//b"));
        assert!(error_of("# nothing\n").contains("no mounts"));
        assert!(error_of("/a=h:1\n/b").contains("line 2"));
    }

    #[test]
    fn routes_by_longest_prefix_of_whole_components() {
        let table = MountTable::parse("/=r:1;/eu=e:1;/eu/de=d:1;/us=u:1").unwrap();
        let prefix = |path: &str| table.mounts()[table.route(path).unwrap()].prefix.clone();
        assert_eq!(prefix("/eu"), "/eu");
        assert_eq!(prefix("/eu/x"), "/eu");
        assert_eq!(prefix("/europe"), "/");
        assert_eq!(prefix("/eu/de"), "/eu/de");
        assert_eq!(prefix("/eu/de/x"), "/eu/de");
        assert_eq!(prefix("/eu/dex"), "/eu");
        assert_eq!(prefix("/"), "/");
        let no_root = MountTable::parse("/eu=e:1").unwrap();
        assert_eq!(no_root.route("/europe"), None);
        assert_eq!(no_root.route("/"), None);
    }

    #[test]
    fn the_sync_node_is_at_the_root_unless_the_table_names_one() {
        let table = MountTable::parse("/=r:1!write;/eu=e:1!write:/eu/sync;/us=u:1").unwrap();
        let nodes: Vec<&str> = table
            .mounts()
            .iter()
            .map(|m| m.sync_node.as_str())
            .collect();
        assert_eq!(
            nodes,
            ["/.stoa-compose-sync", "/eu/sync", "/.stoa-compose-sync"]
        );
        assert_eq!(MountTable::parse(&table.to_string()).unwrap(), table);
        assert!(error_of("/eu=e:1!write:eu").contains("sync node"));
        assert!(error_of("/eu=e:1!write:/").contains("cannot be /"));
        assert!(error_of("/eu=e:1!sync:/x").contains("unknown sync mode"));
    }

    /// A path of components drawn from a small alphabet, so prefixes of
    /// one another (`a`, `ab`) come up often.
    fn path_strategy() -> impl Strategy<Value = String> {
        prop::collection::vec(prop::sample::select(vec!["a", "ab", "b"]), 0..4)
            .prop_map(|parts| format!("/{}", parts.join("/")))
    }

    proptest! {
        /// The chosen mount owns the path, no longer prefix does, and
        /// ownership agrees with component-wise prefix comparison.
        #[test]
        fn route_is_the_longest_owner(
            prefixes in prop::collection::btree_set(path_strategy(), 1..5),
            path in path_strategy(),
        ) {
            let text: Vec<String> = prefixes.iter().map(|p| format!("{p}=h:1")).collect();
            let table = MountTable::parse(&text.join(";")).unwrap();
            let components = |p: &str| -> Vec<String> {
                p.split('/').filter(|c| !c.is_empty()).map(str::to_owned).collect()
            };
            let owners: Vec<&Mount> = table
                .mounts()
                .iter()
                .filter(|m| components(&path).starts_with(&components(&m.prefix)))
                .collect();
            for mount in table.mounts() {
                prop_assert_eq!(mount.owns(&path), owners.contains(&mount));
            }
            match table.route(&path) {
                None => prop_assert!(owners.is_empty()),
                Some(index) => {
                    let chosen = &table.mounts()[index];
                    prop_assert!(owners.iter().all(|m| m.prefix.len() <= chosen.prefix.len()));
                }
            }
        }
    }
}
