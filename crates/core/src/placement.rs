//! Which partition owns a path: the tree is split into groups (subtrees
//! named by their root path), each group lives on one partition, and the
//! load balancer moves whole groups. The placement is replicated state (a
//! system node holds [`Placement::render`]'s text), so every rule is checked
//! again when it is parsed: a server must never route by a placement that a
//! correct one could not have built.

use std::collections::BTreeMap;
use std::fmt;

use stoa_tree::{validate_path, ROOT, ZOOKEEPER};

/// The most partitions a server runs: [`Placement::pick_partition`] counts
/// groups per partition, and a bound keeps that count small.
pub const PARTITIONS_MAX: u32 = 1024;

/// Every group root and its partition, and the rules that decide new ones.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// 1..=PARTITIONS_MAX.
    partitions: u32,
    /// Whether a new top-level node becomes a group of its own.
    auto_top_level: bool,
    /// Successful changes since the placement was configured.
    version: u64,
    /// Root -> partition; holds `/` on 0, every partition < `partitions`,
    /// and no root at or under `/zookeeper`.
    roots: BTreeMap<String, u32>,
    /// Components in the deepest root (0: only `/`): no deeper ancestor
    /// of a path can be a root, so `group_of` starts its walk there.
    deepest_root: usize,
    /// `roots` again, hashed: `owner` runs on every request of a server
    /// of several partitions, and a lookup here costs a fraction of the
    /// ordered map's string comparisons.
    index: rustc_hash::FxHashMap<String, u32>,
}

/// A change or a text form refused; the message names what to fix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlacementError {
    PartitionCount(u32),
    InvalidPath(String),
    UnderZookeeper(String),
    AlreadyGroup(String),
    NotGroup(String),
    RootGroupFixed,
    PartitionOutOfRange {
        root: String,
        partition: u32,
        partitions: u32,
    },
    NotKeyValue(String),
    UnknownKey(String),
    DuplicateKey(String),
    BadValue {
        key: String,
        value: String,
    },
    MissingKey(&'static str),
    /// An error of the text form, with the (1-based) line it is on.
    Line {
        line: usize,
        error: Box<PlacementError>,
    },
}

impl fmt::Display for PlacementError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use PlacementError::*;
        match self {
            PartitionCount(n) => write!(f, "{n} partitions: a server runs 1 to {PARTITIONS_MAX}"),
            InvalidPath(p) => write!(f, "group root {p:?} is not a valid ZooKeeper path"),
            UnderZookeeper(p) => {
                write!(
                    f,
                    "group root {p:?} is in /zookeeper, which stays in the root group"
                )
            }
            AlreadyGroup(p) => write!(f, "{p:?} is already a group root"),
            NotGroup(p) => write!(f, "{p:?} is not a group root"),
            RootGroupFixed => write!(
                f,
                "the root group / cannot be moved or removed from partition 0"
            ),
            PartitionOutOfRange {
                root,
                partition,
                partitions,
            } => {
                let last = partitions.saturating_sub(1);
                let why = format!("partitions are 0 to {last}");
                write!(f, "no partition {partition} for group {root:?}: {why}")
            }
            NotKeyValue(l) => write!(f, "{l:?} is not a key=value line"),
            UnknownKey(k) => write!(f, "unknown key {k:?} (partitions, auto, version, group)"),
            DuplicateKey(k) => write!(f, "{k}= is given twice"),
            BadValue { key, value } => write!(f, "{value:?} is not a valid {key}= value"),
            MissingKey(k) => write!(f, "the placement has no {k}= line"),
            Line { line, error } => write!(f, "placement line {line}: {error}"),
        }
    }
}

impl std::error::Error for PlacementError {}

fn at_line(line: usize) -> impl Fn(PlacementError) -> PlacementError {
    move |error| PlacementError::Line {
        line,
        error: Box::new(error),
    }
}

/// `/zookeeper` and its subtree: the server's own nodes, which every
/// partition reads, so they never leave the root group.
fn in_zookeeper(path: &str) -> bool {
    stoa_tree::within(path, ZOOKEEPER)
}

fn check_count(partitions: u32) -> Result<(), PlacementError> {
    if (1..=PARTITIONS_MAX).contains(&partitions) {
        return Ok(());
    }
    Err(PlacementError::PartitionCount(partitions))
}

/// `path` cut to its first `components` components, or `path` itself
/// when it has fewer, with the number of components kept (0 for a
/// non-path, which no root can be).
fn ancestor_within(path: &str, components: usize) -> (&str, usize) {
    let bytes = path.as_bytes();
    if bytes.first() != Some(&b'/') || components == 0 {
        return (path, 0);
    }
    // Byte scans: '/' is ASCII, so every index found is a char boundary.
    let mut seen = 0;
    for (at, &byte) in bytes.iter().enumerate().skip(1) {
        if byte == b'/' {
            seen += 1;
            if seen == components {
                return (&path[..at], seen);
            }
        }
    }
    // `/` itself has none; any other path one more than its inner slashes.
    (path, seen + usize::from(bytes.len() > 1))
}

impl Placement {
    /// A placement with `configured` roots spread round robin over
    /// partitions 1..P-1, leaving partition 0 to the root group and the
    /// system nodes. It is version 0: configuration is not a change.
    pub fn new(
        partitions: u32,
        auto_top_level: bool,
        configured: &[String],
    ) -> Result<Placement, PlacementError> {
        let mut placement = Placement::empty(partitions, auto_top_level)?;
        for (i, root) in (0u32..).zip(configured) {
            // One partition: the remainder by 0 is None, and all go on 0.
            let spread = i.checked_rem(partitions - 1).map_or(0, |r| r + 1);
            placement.add_group(root, spread)?;
        }
        placement.version = 0;
        Ok(placement)
    }

    fn empty(partitions: u32, auto_top_level: bool) -> Result<Placement, PlacementError> {
        check_count(partitions)?;
        let roots = BTreeMap::from([(ROOT.to_string(), 0)]);
        let index = roots.iter().map(|(root, &p)| (root.clone(), p)).collect();
        Ok(Placement {
            partitions,
            auto_top_level,
            version: 0,
            roots,
            deepest_root: 0,
            index,
        })
    }

    pub fn partitions(&self) -> u32 {
        self.partitions
    }

    pub fn auto_top_level(&self) -> bool {
        self.auto_top_level
    }

    pub fn version(&self) -> u64 {
        self.version
    }

    /// Every group, `/` included, in the byte order of the roots.
    pub fn groups(&self) -> impl Iterator<Item = (&str, u32)> {
        self.roots.iter().map(|(root, &p)| (root.as_str(), p))
    }

    /// The roots of the groups on `partition` (`/` is on 0).
    pub fn groups_on(&self, partition: u32) -> impl Iterator<Item = &str> {
        let on = move |&(_, p): &(&str, u32)| p == partition;
        self.groups().filter(on).map(|(root, _)| root)
    }

    /// The deepest group root that is `path` or an ancestor of it. Runs on
    /// every request, so it looks up the path's ancestors, deepest first,
    /// rather than scanning the groups: O(depth) lookups.
    pub fn group_of(&self, path: &str) -> &str {
        self.owner(path).0
    }

    pub fn partition_of(&self, path: &str) -> u32 {
        self.owner(path).1
    }

    fn owner(&self, path: &str) -> (&str, u32) {
        // Not a path (the caller validates), or only `/` as a root: the
        // root group's, on partition 0 as `/` always is.
        let (mut candidate, mut depth) = ancestor_within(path, self.deepest_root);
        while depth > 0 {
            if let Some((root, &partition)) = self.index.get_key_value(candidate) {
                return (root, partition);
            }
            depth -= 1;
            if depth == 0 {
                break;
            }
            match candidate.as_bytes().iter().rposition(|&byte| byte == b'/') {
                Some(up) if up > 0 => candidate = &candidate[..up],
                _ => break,
            }
        }
        (ROOT, 0)
    }

    /// The group a create of `path` must make first, under automatic
    /// placement: `Some("/x")` for a new top-level `/x`. `add_group` of it
    /// then succeeds for any partition in range.
    pub fn group_root_for_new_node(&self, path: &str) -> Option<String> {
        let name = path.strip_prefix('/');
        let top_level = name.is_some_and(|name| !name.is_empty() && !name.contains('/'));
        let ok = self.auto_top_level && top_level && self.check_new_root(path).is_ok();
        ok.then(|| path.to_string())
    }

    /// Where a new group goes: the partition with the fewest groups, the
    /// lowest on a tie, but not 0 while another ties with it, as 0 also
    /// carries the root group.
    pub fn pick_partition(&self) -> u32 {
        let mut counts = vec![0usize; self.partitions as usize];
        for (_, p) in self.groups().filter(|&(root, _)| root != ROOT) {
            counts[p as usize] += 1;
        }
        let key = |&p: &u32| (counts[p as usize], p == 0, p);
        (0..self.partitions).min_by_key(key).unwrap_or(0)
    }

    fn check_new_root(&self, root: &str) -> Result<(), PlacementError> {
        if validate_path(root).is_err() {
            return Err(PlacementError::InvalidPath(root.to_string()));
        }
        if in_zookeeper(root) {
            return Err(PlacementError::UnderZookeeper(root.to_string()));
        }
        if self.roots.contains_key(root) {
            return Err(PlacementError::AlreadyGroup(root.to_string()));
        }
        Ok(())
    }

    fn check_partition(&self, root: &str, partition: u32) -> Result<(), PlacementError> {
        if partition < self.partitions {
            return Ok(());
        }
        let (root, partitions) = (root.to_string(), self.partitions);
        Err(PlacementError::PartitionOutOfRange {
            root,
            partition,
            partitions,
        })
    }

    pub fn add_group(&mut self, root: &str, partition: u32) -> Result<(), PlacementError> {
        self.check_new_root(root)?;
        self.check_partition(root, partition)?;
        self.roots.insert(root.to_string(), partition);
        self.changed();
        Ok(())
    }

    /// Moves `root`'s group to partition `to`; returns where it was. A move
    /// to where it is succeeds and counts as a change, like any other.
    pub fn move_group(&mut self, root: &str, to: u32) -> Result<u32, PlacementError> {
        let from = self.existing_group(root)?;
        self.check_partition(root, to)?;
        self.roots.insert(root.to_string(), to);
        self.changed();
        Ok(from)
    }

    /// Removes `root`'s group (its paths fall to the next root up); returns
    /// the partition it was on.
    pub fn remove_group(&mut self, root: &str) -> Result<u32, PlacementError> {
        let from = self.existing_group(root)?;
        self.roots.remove(root);
        self.changed();
        Ok(from)
    }

    fn existing_group(&self, root: &str) -> Result<u32, PlacementError> {
        if root == ROOT {
            return Err(PlacementError::RootGroupFixed);
        }
        let not_group = || PlacementError::NotGroup(root.to_string());
        self.roots.get(root).copied().ok_or_else(not_group)
    }

    fn changed(&mut self) {
        self.version += 1;
        let components = |root: &String| {
            if root == ROOT {
                0
            } else {
                root.matches('/').count()
            }
        };
        self.deepest_root = self.roots.keys().map(components).max().unwrap_or(0);
        self.index = (self.roots.iter())
            .map(|(root, &p)| (root.clone(), p))
            .collect();
        if cfg!(debug_assertions) {
            self.assert_invariants();
        }
    }

    /// Panics if a rule every placement keeps is broken: a bug in this
    /// module, never bad input (that is a `PlacementError`).
    pub fn assert_invariants(&self) {
        let n = self.partitions;
        assert!((1..=PARTITIONS_MAX).contains(&n), "{n} partitions");
        assert_eq!(self.roots.get(ROOT), Some(&0), "/ is not on partition 0");
        for (root, &p) in &self.roots {
            assert!(p < n, "group {root:?} on partition {p} of {n}");
            assert!(!in_zookeeper(root), "group root {root:?} in /zookeeper");
            assert!(
                validate_path(root).is_ok(),
                "group root {root:?} is not a path"
            );
        }
    }

    /// The text the system node holds; [`Placement::parse`] reads it back.
    pub fn render(&self) -> String {
        let (n, auto, version) = (self.partitions, self.auto_top_level, self.version);
        let mut out = format!("partitions={n}\nauto={auto}\nversion={version}\n");
        for (root, p) in self.groups().filter(|&(root, _)| root != ROOT) {
            out.push_str(&format!("group={p} {root}\n"));
        }
        out
    }

    /// Reads [`Placement::render`]'s text, checking every rule again: the
    /// text is replicated, and a placement that breaks a rule must be
    /// refused, not routed by.
    pub fn parse(text: &str) -> Result<Placement, PlacementError> {
        let mut fields = Fields::default();
        for (line, text) in (1..).zip(text.lines()) {
            fields.read(line, text).map_err(at_line(line))?;
        }
        let missing = PlacementError::MissingKey;
        let partitions = fields.partitions.ok_or(missing("partitions"))?;
        let auto = fields.auto.ok_or(missing("auto"))?;
        let version = fields.version.ok_or(missing("version"))?;
        let mut placement = Placement::empty(partitions, auto)?;
        for (line, partition, root) in fields.groups {
            placement
                .add_group(&root, partition)
                .map_err(at_line(line))?;
        }
        placement.version = version;
        Ok(placement)
    }
}

/// The text form's fields, before the rules between them are checked.
#[derive(Default)]
struct Fields {
    partitions: Option<u32>,
    auto: Option<bool>,
    version: Option<u64>,
    /// Line number, partition and root.
    groups: Vec<(usize, u32, String)>,
}

impl Fields {
    fn read(&mut self, number: usize, line: &str) -> Result<(), PlacementError> {
        let text = line.trim_start();
        if text.is_empty() || text.starts_with('#') {
            return Ok(());
        }
        let not_key_value = || PlacementError::NotKeyValue(line.to_string());
        let (key, value) = text.split_once('=').ok_or_else(not_key_value)?;
        let key = key.trim_end();
        match key {
            "partitions" => {
                set_once(&mut self.partitions, key, value)?;
                // Checked here, where the error can name the line.
                check_count(self.partitions.unwrap_or(0))
            }
            "auto" => set_once(&mut self.auto, key, value),
            "version" => set_once(&mut self.version, key, value),
            // The root is everything after the first space: paths may
            // hold spaces, even trailing ones.
            "group" => {
                let bad = || bad_value(key, value);
                let (partition, root) = value.split_once(' ').ok_or_else(bad)?;
                let partition = partition.parse().map_err(|_| bad())?;
                self.groups.push((number, partition, root.to_string()));
                Ok(())
            }
            _ => Err(PlacementError::UnknownKey(key.to_string())),
        }
    }
}

fn bad_value(key: &str, value: &str) -> PlacementError {
    let (key, value) = (key.to_string(), value.to_string());
    PlacementError::BadValue { key, value }
}

fn set_once<T: std::str::FromStr>(
    field: &mut Option<T>,
    key: &str,
    value: &str,
) -> Result<(), PlacementError> {
    if field.is_some() {
        return Err(PlacementError::DuplicateKey(key.to_string()));
    }
    *field = Some(value.trim().parse().map_err(|_| bad_value(key, value))?);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use PlacementError::*;

    fn placement(partitions: u32, roots: &[&str]) -> Result<Placement, PlacementError> {
        let roots: Vec<String> = roots.iter().map(|r| r.to_string()).collect();
        Placement::new(partitions, false, &roots)
    }

    fn line_error(text: &str) -> (usize, PlacementError) {
        match Placement::parse(text) {
            Err(Line { line, error }) => (line, *error),
            other => panic!("expected a line error, got {other:?}"),
        }
    }

    #[test]
    fn the_root_group_holds_everything_else_on_partition_0() {
        let p = placement(4, &["/app"]).unwrap();
        for path in ["/", "/zookeeper", "/zookeeper/config", "/other/x"] {
            assert_eq!((p.group_of(path), p.partition_of(path)), ("/", 0), "{path}");
        }
        assert_eq!(p.groups().collect::<Vec<_>>(), [("/", 0), ("/app", 1)]);
    }

    #[test]
    fn roots_own_paths_by_whole_components() {
        let p = placement(2, &["/app"]).unwrap();
        assert_eq!(p.group_of("/app"), "/app");
        assert_eq!(p.group_of("/app/x"), "/app");
        assert_eq!(p.group_of("/apple"), "/");
        assert_eq!(p.group_of("/app x"), "/");
    }

    #[test]
    fn the_deepest_nested_root_wins() {
        let p = placement(3, &["/a", "/a/b/c"]).unwrap();
        assert_eq!(p.group_of("/a/b"), "/a");
        assert_eq!(p.group_of("/a/b/c"), "/a/b/c");
        assert_eq!(p.group_of("/a/b/c/d"), "/a/b/c");
        assert_eq!(
            (p.partition_of("/a/b/cd"), p.partition_of("/a/b/c/d")),
            (1, 2)
        );
    }

    #[test]
    fn configured_roots_go_round_robin_over_1_to_p_minus_1() {
        let p = placement(3, &["/a", "/b", "/c"]).unwrap();
        let groups = [("/", 0), ("/a", 1), ("/b", 2), ("/c", 1)];
        assert_eq!(p.groups().collect::<Vec<_>>(), groups);
        assert_eq!(p.groups_on(1).collect::<Vec<_>>(), ["/a", "/c"]);
        assert_eq!(p.version(), 0);
        let one = placement(1, &["/a", "/b"]).unwrap();
        assert_eq!(one.groups_on(0).collect::<Vec<_>>(), ["/", "/a", "/b"]);
    }

    #[test]
    fn new_refuses_bad_counts_and_roots() {
        assert_eq!(placement(0, &[]), Err(PartitionCount(0)));
        assert_eq!(placement(1025, &[]), Err(PartitionCount(1025)));
        assert!(placement(1024, &[]).is_ok());
        assert_eq!(placement(2, &["/a", "/a"]), Err(AlreadyGroup("/a".into())));
        assert_eq!(placement(2, &["/"]), Err(AlreadyGroup("/".into())));
        assert_eq!(placement(2, &["a"]), Err(InvalidPath("a".into())));
        let zk = Err(UnderZookeeper("/zookeeper/x".into()));
        assert_eq!(placement(2, &["/zookeeper/x"]), zk);
    }

    #[test]
    fn add_group_checks_each_rule_and_counts_versions() {
        let mut p = placement(2, &[]).unwrap();
        for bad in ["", "a", "/a/", "/a//b", "/a/./b", "/..", "/a\0"] {
            assert_eq!(p.add_group(bad, 1), Err(InvalidPath(bad.into())));
        }
        let zk = Err(UnderZookeeper("/zookeeper".into()));
        assert_eq!(p.add_group("/zookeeper", 1), zk);
        assert_eq!(p.add_group("/zookeeperx", 1), Ok(()));
        let again = Err(AlreadyGroup("/zookeeperx".into()));
        assert_eq!(p.add_group("/zookeeperx", 0), again);
        let out = PartitionOutOfRange {
            root: "/b".into(),
            partition: 2,
            partitions: 2,
        };
        assert_eq!(p.add_group("/b", 2), Err(out));
        assert_eq!(p.version(), 1);
    }

    #[test]
    fn move_and_remove_refuse_non_groups_and_the_root() {
        let mut p = placement(3, &["/a", "/a/b"]).unwrap();
        assert_eq!(p.move_group("/a", 2), Ok(1));
        assert_eq!(p.partition_of("/a/x"), 2);
        assert_eq!(p.move_group("/", 1), Err(RootGroupFixed));
        assert_eq!(p.move_group("/c", 1), Err(NotGroup("/c".into())));
        assert!(matches!(
            p.move_group("/a", 3),
            Err(PartitionOutOfRange { .. })
        ));
        assert_eq!(p.remove_group("/"), Err(RootGroupFixed));
        assert_eq!(p.remove_group("/a/b/c"), Err(NotGroup("/a/b/c".into())));
        assert_eq!(p.remove_group("/a/b"), Ok(2));
        assert_eq!(p.group_of("/a/b/x"), "/a", "falls to the next root up");
        assert_eq!(p.version(), 2);
    }

    #[test]
    fn auto_placement_makes_new_top_level_nodes_groups() {
        let mut p = Placement::new(3, true, &["/a".to_string()]).unwrap();
        assert_eq!(p.group_root_for_new_node("/x"), Some("/x".to_string()));
        for no in ["/", "/a", "/zookeeper", "/x/y", "/x/", "/.", "x", "éx", ""] {
            assert_eq!(p.group_root_for_new_node(no), None, "{no}");
        }
        p.auto_top_level = false;
        assert_eq!(p.group_root_for_new_node("/x"), None);
    }

    #[test]
    fn pick_partition_fills_the_emptiest_and_spares_partition_0_on_ties() {
        let mut p = placement(3, &[]).unwrap();
        let mut picked = Vec::new();
        for root in ["/a", "/b", "/c", "/d", "/e", "/f"] {
            picked.push(p.pick_partition());
            p.add_group(root, picked[picked.len() - 1]).unwrap();
        }
        assert_eq!(picked, [1, 2, 0, 1, 2, 0]);
        assert_eq!(placement(1, &[]).unwrap().pick_partition(), 0);
    }

    #[test]
    fn render_writes_the_documented_lines_and_parse_skips_comments() {
        let mut p = placement(3, &["/a", "/b c "]).unwrap();
        p.move_group("/a", 2).unwrap();
        let text = "partitions=3\nauto=false\nversion=1\ngroup=2 /a\ngroup=2 /b c \n";
        assert_eq!(p.render(), text);
        let commented = format!(
            "# placement\n\n{}  # a note\n",
            text.replace("auto", " auto")
        );
        assert_eq!(Placement::parse(&commented), Ok(p));
    }

    #[test]
    fn parse_names_the_line_of_each_error() {
        let head = "partitions=2\nauto=true\nversion=3\n";
        type Case = (&'static str, usize, fn(&PlacementError) -> bool);
        let cases: [Case; 10] = [
            ("partitions=2\ncolour=red", 2, |e| {
                *e == UnknownKey("colour".into())
            }),
            ("partitions", 1, |e| *e == NotKeyValue("partitions".into())),
            ("auto=yes", 1, |e| matches!(e, BadValue { .. })),
            ("version=1\nversion=2", 2, |e| {
                *e == DuplicateKey("version".into())
            }),
            ("auto=true\npartitions=0", 2, |e| *e == PartitionCount(0)),
            ("!group=1 /a\ngroup=0 /a", 5, |e| {
                *e == AlreadyGroup("/a".into())
            }),
            ("!group=0 /", 4, |e| *e == AlreadyGroup("/".into())),
            ("!group=1 /zookeeper/q", 4, |e| {
                matches!(e, UnderZookeeper(_))
            }),
            ("!group=2 /a", 4, |e| {
                matches!(e, PartitionOutOfRange { .. })
            }),
            ("!group=1/a", 4, |e| matches!(e, BadValue { .. })),
        ];
        for (text, line, expected) in cases {
            // '!' stands for a valid head before the group lines.
            let text = text.replace('!', head);
            let (at, error) = line_error(&text);
            assert!(
                at == line && expected(&error),
                "{text:?}: line {at}: {error}"
            );
        }
        let no_version = Placement::parse("partitions=1\nauto=true");
        assert_eq!(no_version, Err(MissingKey("version")));
    }

    #[test]
    fn errors_read_as_one_line_naming_the_path_or_line() {
        let text = "partitions=2\nauto=true\nversion=0\ngroup=5 /app";
        let message = Placement::parse(text).unwrap_err().to_string();
        let expected = "placement line 4: no partition 5 for group \"/app\": partitions are 0 to 1";
        assert_eq!(message, expected);
        assert_eq!(
            NotGroup("/x".into()).to_string(),
            "\"/x\" is not a group root"
        );
    }

    /// Paths over a few components chosen to look alike: prefixes, a space,
    /// and `zookeeper`.
    fn path(depth: std::ops::Range<usize>) -> impl Strategy<Value = String> {
        let component = prop::sample::select(vec!["a", "ab", "b", "a b", "zookeeper"]);
        prop::collection::vec(component, depth).prop_map(|c| format!("/{}", c.join("/")))
    }

    fn valid_placement() -> impl Strategy<Value = Placement> {
        let groups = prop::collection::vec((path(1..4), 0u32..8), 0..12);
        (1u32..6, any::<bool>(), any::<u64>(), groups).prop_map(|(n, auto, version, groups)| {
            let mut p = Placement::new(n, auto, &[]).unwrap();
            for (root, partition) in groups {
                let _ = p.add_group(&root, partition % n);
            }
            p.version = version;
            p
        })
    }

    /// The rule as stated: the longest root that is the path or a
    /// whole-component ancestor of it, by a scan of every root.
    fn reference_group_of<'a>(p: &'a Placement, path: &str) -> &'a str {
        let owns = |r: &&str| *r == ROOT || path == *r || path.starts_with(&format!("{r}/"));
        let roots = p.groups().map(|(r, _)| r);
        roots.filter(owns).max_by_key(|r| r.len()).unwrap()
    }

    #[derive(Debug, Clone)]
    enum Change {
        Add(String, u32),
        Move(String, u32),
        Remove(String),
    }

    fn change() -> impl Strategy<Value = Change> {
        let odd = prop::sample::select(vec!["/".to_string(), "/a/".to_string()]);
        let root = prop_oneof![4 => path(1..4), 1 => odd];
        prop_oneof![
            (root.clone(), 0u32..5).prop_map(|(r, p)| Change::Add(r, p)),
            (root.clone(), 0u32..5).prop_map(|(r, p)| Change::Move(r, p)),
            root.prop_map(Change::Remove),
        ]
    }

    /// Characters that make a damaged rendering still nearly parse.
    fn edit() -> impl Strategy<Value = Option<char>> {
        let near = prop::sample::select(vec!['\n', '=', ' ', '/', '#', '0', '1', '9', 'a']);
        prop_oneof![
            Just(None),
            near.prop_map(Some),
            any::<char>().prop_map(Some)
        ]
    }

    proptest! {
        /// group_of's ancestor walk agrees with a scan of every root.
        #[test]
        fn group_of_is_the_deepest_whole_component_ancestor(
            p in valid_placement(),
            paths in prop::collection::vec(path(0..6), 1..20),
        ) {
            for path in &paths {
                prop_assert_eq!(p.group_of(path), reference_group_of(&p, path), "{}", path);
            }
        }

        /// The text form loses nothing.
        #[test]
        fn parse_reads_back_what_render_wrote(p in valid_placement()) {
            prop_assert_eq!(Placement::parse(&p.render()), Ok(p));
        }

        /// Changes keep the invariants, count in the version, and a move
        /// re-routes only the moved group's paths.
        #[test]
        fn changes_keep_the_rules_and_moves_stay_local(
            changes in prop::collection::vec(change(), 1..40),
            probes in prop::collection::vec(path(1..5), 1..20),
        ) {
            let mut p = Placement::new(4, true, &[]).unwrap();
            let mut succeeded = 0;
            for change in changes {
                let before = p.clone();
                let ok = match &change {
                    Change::Add(root, partition) => p.add_group(root, *partition).is_ok(),
                    Change::Remove(root) => p.remove_group(root).is_ok(),
                    Change::Move(root, to) => p.move_group(root, *to).is_ok(),
                };
                p.assert_invariants();
                succeeded += u64::from(ok);
                prop_assert_eq!(p.version(), succeeded);
                if !ok {
                    prop_assert_eq!(&p.roots, &before.roots, "a refused change changed nothing");
                }
                let Change::Move(root, to) = &change else { continue };
                for path in probes.iter().filter(|_| ok) {
                    let moved = before.group_of(path) == root;
                    prop_assert_eq!(p.group_of(path), before.group_of(path));
                    let expected = if moved { *to } else { before.partition_of(path) };
                    prop_assert_eq!(p.partition_of(path), expected, "{}", path);
                }
            }
        }

        /// Garbage and damaged renderings are refused or read, never a
        /// panic, and whatever is read keeps the rules.
        #[test]
        fn parse_never_panics(
            junk in "(?s).{0,200}",
            p in valid_placement(),
            edits in prop::collection::vec((any::<prop::sample::Index>(), edit()), 0..6),
        ) {
            let mut text: Vec<char> = p.render().chars().collect();
            for (at, edit) in edits {
                let i = at.index(text.len() + 1);
                match edit {
                    Some(c) => text.insert(i, c),
                    None if i < text.len() => drop(text.remove(i)),
                    None => {}
                }
            }
            for text in [junk, text.into_iter().collect()] {
                if let Ok(parsed) = Placement::parse(&text) {
                    parsed.assert_invariants();
                    prop_assert_eq!(Placement::parse(&parsed.render()), Ok(parsed));
                }
            }
        }
    }
}
