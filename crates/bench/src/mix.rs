//! The operation mix: which ZooKeeper calls a run makes, in what proportion.

use std::fmt;

/// One kind of call the load generator makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpKind {
    Create,
    Set,
    Get,
    Exists,
    Children,
    Delete,
    Multi,
}

impl OpKind {
    pub const ALL: [OpKind; 7] = [
        OpKind::Create,
        OpKind::Set,
        OpKind::Get,
        OpKind::Exists,
        OpKind::Children,
        OpKind::Delete,
        OpKind::Multi,
    ];

    pub fn name(self) -> &'static str {
        match self {
            OpKind::Create => "create",
            OpKind::Set => "set",
            OpKind::Get => "get",
            OpKind::Exists => "exists",
            OpKind::Children => "children",
            OpKind::Delete => "delete",
            OpKind::Multi => "multi",
        }
    }

    pub fn index(self) -> usize {
        self as usize
    }

    fn from_name(name: &str) -> Option<OpKind> {
        OpKind::ALL.into_iter().find(|k| k.name() == name)
    }
}

/// Relative weights per op kind (any non-negative integers; need not sum
/// to 100).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mix {
    weights: [u32; 7],
}

impl Mix {
    /// Parses `create=10,set=20,get=70`.
    pub fn parse(text: &str) -> Result<Mix, String> {
        let mut weights = [0u32; 7];
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (name, weight) = part
                .split_once('=')
                .ok_or_else(|| format!("mix entry {part:?} is not op=weight"))?;
            let kind = OpKind::from_name(name.trim())
                .ok_or_else(|| format!("unknown op {name:?} in mix (create, set, get, exists, children, delete, multi)"))?;
            weights[kind.index()] = weight
                .trim()
                .parse()
                .map_err(|_| format!("weight {weight:?} for {name} is not a whole number"))?;
        }
        let mix = Mix { weights };
        if mix.total() == 0 {
            return Err(format!("mix {text:?} has no op with a weight above 0"));
        }
        Ok(mix)
    }

    /// `percent` % getData, the rest setData.
    pub fn read_ratio(percent: u32) -> Result<Mix, String> {
        if percent > 100 {
            return Err(format!("read ratio {percent} is above 100"));
        }
        let mut weights = [0u32; 7];
        weights[OpKind::Get.index()] = percent;
        weights[OpKind::Set.index()] = 100 - percent;
        Ok(Mix { weights })
    }

    pub fn only(kind: OpKind) -> Mix {
        let mut weights = [0u32; 7];
        weights[kind.index()] = 1;
        Mix { weights }
    }

    fn total(&self) -> u64 {
        self.weights.iter().map(|&w| u64::from(w)).sum()
    }

    pub fn weight(&self, kind: OpKind) -> u32 {
        self.weights[kind.index()]
    }

    /// The kind for a uniform random number `r`.
    pub fn pick(&self, r: u64) -> OpKind {
        let mut x = r % self.total();
        for kind in OpKind::ALL {
            let w = u64::from(self.weights[kind.index()]);
            if x < w {
                return kind;
            }
            x -= w;
        }
        unreachable!("a Mix always has a positive total weight")
    }

    /// True when any op in the mix changes the keyspace's data.
    pub fn has_writes(&self) -> bool {
        [OpKind::Create, OpKind::Set, OpKind::Delete, OpKind::Multi]
            .iter()
            .any(|&k| self.weight(k) > 0)
    }
}

impl fmt::Display for Mix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = OpKind::ALL
            .iter()
            .filter(|k| self.weight(**k) > 0)
            .map(|k| format!("{}={}", k.name(), self.weight(*k)))
            .collect();
        f.write_str(&parts.join(","))
    }
}

/// A small fast PRNG (xorshift64*): the load generator needs speed and
/// reproducibility, not quality.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_display_round_trip() {
        let mix = Mix::parse("create=10, get=90").unwrap();
        assert_eq!(mix.to_string(), "create=10,get=90");
        assert!(Mix::parse("get=0").is_err());
        assert!(Mix::parse("frob=1").is_err());
        assert!(Mix::parse("get").is_err());
    }

    #[test]
    fn pick_follows_weights() {
        let mix = Mix::parse("set=25,get=75").unwrap();
        let mut rng = Rng::new(7);
        let gets = (0..10_000)
            .filter(|_| mix.pick(rng.next_u64()) == OpKind::Get)
            .count();
        assert!((7000..8000).contains(&gets), "{gets} gets of 10000");
    }

    #[test]
    fn read_ratio_mix() {
        assert_eq!(Mix::read_ratio(90).unwrap().to_string(), "set=10,get=90");
        assert_eq!(Mix::read_ratio(100).unwrap().to_string(), "get=100");
        assert!(!Mix::read_ratio(100).unwrap().has_writes());
        assert!(Mix::read_ratio(101).is_err());
    }
}
