//! Shell commands for a server of several partitions: list its groups and
//! move one (docs/partitions.md, "Moving a group"). The placement is the
//! text of `/zookeeper/partitions`; a move is a versioned setData of it,
//! which only the super user may make.

use crate::{Client, Error};

const PLACEMENT: &str = "/zookeeper/partitions";
const MOVE_USAGE: &str = "moveGroup root partition";

pub fn is_command(name: &str) -> bool {
    matches!(name, "listGroups" | "moveGroup")
}

pub async fn run(client: &Client, name: &str, args: &[String]) -> Result<String, String> {
    let failed = |e: Error| super::error_message(&e);
    let (text, stat) = match client.get_data(PLACEMENT, false).await {
        Ok(found) => found,
        Err(Error::NoNode { .. }) => {
            return Err("This server runs one partition: it has no groups to list or move".into())
        }
        Err(e) => return Err(failed(e)),
    };
    let text = String::from_utf8_lossy(&text).into_owned();
    match name {
        "listGroups" => Ok(list(&text)),
        _ => {
            let [root, partition] = args else {
                return Err(MOVE_USAGE.to_string());
            };
            let to: u32 = partition
                .parse()
                .map_err(|_| format!("{partition} is not a partition number\n{MOVE_USAGE}"))?;
            let moved = with_group_on(&text, root, to)
                .ok_or_else(|| format!("No group {root} (listGroups lists them)"))?;
            match client
                .set_data(PLACEMENT, moved.as_bytes(), stat.version)
                .await
            {
                Ok(_) => Ok(format!("Moved group {root} to partition {to}\n")),
                Err(Error::BadVersion { .. }) => {
                    Err("The placement changed meanwhile (another move); try again".into())
                }
                Err(Error::BadArguments { .. }) => Err(format!(
                    "Move refused: the server runs partitions 0 to {}",
                    partitions(&text).saturating_sub(1)
                )),
                Err(e) => Err(failed(e)),
            }
        }
    }
}

/// One line per group, `/` first: root, then its partition.
fn list(text: &str) -> String {
    let mut out = String::from("/ 0\n");
    for line in text.lines() {
        if let Some((partition, root)) = group_line(line) {
            out.push_str(&format!("{root} {partition}\n"));
        }
    }
    out
}

/// A `group=<partition> <root>` line's partition and root.
fn group_line(line: &str) -> Option<(&str, &str)> {
    line.strip_prefix("group=")?.split_once(' ')
}

fn partitions(text: &str) -> u32 {
    (text.lines())
        .find_map(|line| line.strip_prefix("partitions="))
        .and_then(|n| n.parse().ok())
        .unwrap_or(1)
}

/// The placement `text` with `root`'s group on `to`; None without such a
/// group.
fn with_group_on(text: &str, root: &str, to: u32) -> Option<String> {
    let mut found = false;
    let mut out = String::new();
    for line in text.lines() {
        match group_line(line) {
            Some((_, r)) if r == root => {
                found = true;
                out.push_str(&format!("group={to} {root}\n"));
            }
            _ => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    found.then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "partitions=3\nauto=false\nversion=0\ngroup=1 /app\ngroup=2 /billing\n";

    #[test]
    fn lists_every_group_with_its_partition() {
        assert_eq!(list(TEXT), "/ 0\n/app 1\n/billing 2\n");
        assert_eq!(partitions(TEXT), 3);
    }

    #[test]
    fn a_move_rewrites_only_that_groups_line() {
        assert_eq!(
            with_group_on(TEXT, "/app", 2).unwrap(),
            "partitions=3\nauto=false\nversion=0\ngroup=2 /app\ngroup=2 /billing\n"
        );
        assert_eq!(with_group_on(TEXT, "/ap", 2), None);
        assert_eq!(with_group_on(TEXT, "/", 2), None);
    }
}
